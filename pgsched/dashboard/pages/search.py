"""The job search page, and the confirmation of a bulk action on what it found."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pgsched.dashboard.html import (
    Column,
    Safe,
    ago,
    badge,
    exception_line,
    fmt,
    join,
    number,
    table,
    timestamp,
    url,
)
from pgsched.dashboard.pages.common import View, job_actions, job_link, page_links, queue_link
from pgsched.dashboard.queries import STATES

SEARCH_COLUMNS = (
    Column("id", "num"),
    Column("queue"),
    Column("state"),
    Column("task"),
    Column("args", "code"),
    Column("attempt", "num"),
    Column("tenant"),
    Column("due"),
    Column("finished"),
    Column("error", "wrap"),
    Column(""),
)


def _filter_form(filters: Mapping[str, str]) -> Safe:
    def field(name: str, label: str, hint: str, cls: str = "") -> Safe:
        return fmt(
            '<label>{label}<input name="{name}" value="{value}" placeholder="{hint}" class="{cls}"></label>',
            label=label,
            name=name,
            value=filters.get(name, ""),
            hint=hint,
            cls=cls,
        )

    def choice(name: str, label: str, options: Sequence[tuple[str, str]]) -> Safe:
        current = filters.get(name, "")
        return fmt(
            '<label>{label}<select name="{name}">{options}</select></label>',
            label=label,
            name=name,
            options=join(
                fmt(
                    '<option value="{v}"{sel}>{text}</option>',
                    v=value,
                    sel=Safe(" selected") if value == current else Safe(""),
                    text=text,
                )
                for value, text in options
            ),
        )

    return fmt(
        '<form method="get" action="/jobs" class="filters">{task}{state}{queue}{tenant}{args}{time}{since}{until}'
        '<button type="submit">Search</button> <a href="/jobs">clear</a></form>',
        task=field("task", "task", "name, or prefix*"),
        state=choice("state", "state", [("", "any"), *((s, s) for s in STATES)]),
        queue=field("queue", "queue", "any"),
        tenant=field("tenant", "tenant", "any"),
        args=field("args", "args contain (JSON)", '{"user_id": 42}', "wide"),
        time=choice("time", "time range on", [("", "enqueued"), ("due", "due"), ("finished", "finished")]),
        since=field("since", "since", "1h, 2d or 2026-12-01T09:00"),
        until=field("until", "until", "now"),
    )


def jobs(view: View, data: Mapping[str, Any]) -> Safe:
    filters: Mapping[str, str] = data["filters"]
    rows = (
        [
            job_link(j["id"]),
            queue_link(j["queue"]),
            badge(j["state"]),
            j["task"],
            j["args"],
            f"{j['attempt']}/{j['max_attempts']}" if j["max_attempts"] else j["attempt"],
            j["tenant"],
            timestamp(j["run_at"]),
            ago(j["finished_at"]),
            exception_line(j["error"]),
            job_actions(view, j["id"], j["state"]),
        ]
        for j in data["jobs"]
    )
    bulk = Safe("")
    if not view.read_only:
        bulk = fmt(
            '<div class="actions"><a href="{cancel}">Cancel the matching jobs…</a> · '
            '<a href="{retry}">Retry the matching jobs…</a></div>',
            cancel=url("jobs", "bulk", "cancel", **filters),
            retry=url("jobs", "bulk", "retry", **filters),
        )
    return fmt(
        '<h1>Jobs</h1><p class="muted">Across queues, active and finished, newest first. '
        "A finished job shows its latest run.</p>{form}{bulk}{table}{pager}",
        form=_filter_form(filters),
        bulk=bulk,
        table=table(SEARCH_COLUMNS, rows, empty="No job matches these filters."),
        pager=page_links(view, data["next_before"]),
    )


def _describe(filters: Mapping[str, str]) -> str:
    return ", ".join(f"{k} = {v}" for k, v in filters.items()) or "no filter: every job"


def bulk_confirm(view: View, data: Mapping[str, Any]) -> Safe:
    verb: str = data["verb"]
    filters: Mapping[str, str] = data["filters"]
    total: int = data["total"]
    states = table(
        (Column("state"), Column("jobs", "num")),
        ([badge(r["state"]), number(r["n"])] for r in data["by_state"]),
        empty="None.",
    )
    back = url("jobs", **filters)
    intro = fmt(
        "<h1>{title} jobs</h1><p>Filters: <b>{filters}</b>. {which}</p>{states}",
        title=verb.title(),
        filters=_describe(filters),
        which="Only waiting and running jobs can be cancelled (running ones are asked to stop)."
        if verb == "cancel"
        else "Only dead and cancelled jobs can be retried; each runs again now, with a fresh attempt budget.",
        states=states,
    )
    if view.read_only:
        decision = fmt('<p class="confirm">This dashboard is read-only.</p>')
    elif total == 0:
        done = "cancelled" if verb == "cancel" else "retried"
        decision = fmt('<p class="confirm">No job matching these filters can be {done}.</p>', done=done)
    elif data["too_many"]:
        decision = fmt(
            '<p class="confirm">More than {cap} jobs match: narrow the filters (a time range, a queue) '
            "and act on them in parts.</p>",
            cap=number(data["cap"]),
        )
    else:
        hidden = join(
            fmt('<input type="hidden" name="{k}" value="{v}">', k=k, v=v)
            for k, v in [
                *filters.items(),
                ("max_id", data["max_id"]),
                ("issued", data["issued"]),
                ("nonce", data["nonce"]),
                ("token", data["token"]),
            ]
        )
        decision = fmt(
            '<form method="post" action="{action}" class="confirm">{hidden}'
            "<p>This will {verb} <b>{n}</b> job{s} (those matching now, up to id {max_id}; "
            "jobs enqueued after this page was shown are left alone).</p>"
            '<button type="submit" class="danger">{label}</button></form>',
            action=url("jobs", "bulk", verb),
            hidden=hidden,
            verb=verb,
            n=number(total),
            s="" if total == 1 else "s",
            max_id=data["max_id"],
            label=f"{verb.title()} {total} job{'' if total == 1 else 's'}",
        )
    return fmt(
        '{intro}{decision}<p><a href="{back}">← back to the jobs</a></p>', intro=intro, decision=decision, back=back
    )
