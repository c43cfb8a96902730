"""The dashboard's pages, rendered on the server from what queries.py read (no JavaScript)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from pgsched.dashboard.charts import WINDOWS, queue_charts
from pgsched.dashboard.html import (
    CLIP_AT,
    Column,
    Safe,
    ago,
    badge,
    button_form,
    definition_list,
    duration,
    esc,
    exception_line,
    fmt,
    join,
    number,
    pretty_json,
    short_json,
    table,
    timestamp,
    url,
)
from pgsched.dashboard.queries import ACTIVE_STATES, STATES

# Ages past these are shown as a warning (amber) or a problem (red).
AGE_WARN_S = 60.0
AGE_BAD_S = 600.0


@dataclass(frozen=True, slots=True)
class View:
    """What every page needs to know about the request: where it is and whether actions are allowed."""

    path: str
    query: Mapping[str, str]
    read_only: bool

    @property
    def here(self) -> str:
        """This page's address (without a flash message), for forms to come back to."""
        return self.with_query()

    def with_query(self, **changes: object) -> str:
        """This page's address with some query parameters changed (None removes one)."""
        merged: dict[str, object] = {k: v for k, v in self.query.items() if k != "msg"}
        merged.update(changes)
        params = {k: str(v) for k, v in merged.items() if v is not None and v != ""}
        return self.path + ("?" + urlencode(params) if params else "")


def _age(seconds: float | None) -> Safe:
    if not seconds:
        return Safe("")
    cls = "bad" if seconds >= AGE_BAD_S else "warn" if seconds >= AGE_WARN_S else ""
    return fmt('<span class="{cls}">{text}</span>', cls=cls, text=duration(seconds))


def _count(value: int | None, cls: str = "") -> Safe:
    if not value:
        return fmt('<span class="muted">{v}</span>', v=number(value or 0))
    return fmt('<span class="{cls}">{v}</span>', cls=cls, v=number(value))


def _stat(label: str, value: object) -> Safe:
    return fmt('<div class="stat"><b>{value}</b><span>{label}</span></div>', value=value, label=label)


def _replica_stat(replica: Mapping[str, Any] | None) -> list[Safe]:
    """With --read-dsn: how far behind the replica the page was read from is."""
    if replica is None:
        return []
    if not replica["in_recovery"]:
        return [_stat("read from (--read-dsn)", "the primary")]
    lag = replica["lag_s"]
    return [_stat("replica behind by", "unknown" if lag is None else f"{lag:.1f} s")]


def _refresh_links(view: View, refresh: int | None) -> Safe:
    links = [
        fmt(
            '<a class="{on}" href="{href}">{label}</a>',
            on="on" if refresh == seconds else "",
            href=view.with_query(refresh=seconds),
            label=label,
        )
        for seconds, label in ((None, "off"), (5, "5s"), (30, "30s"))
    ]
    return fmt(
        '<div class="toolbar">read at {now} UTC · auto-refresh: {links}</div>',
        now=datetime.now(UTC).strftime("%H:%M:%S"),
        links=join(links, " · "),
    )


def _queue_actions(view: View, queue: str, paused: bool) -> Safe:
    if view.read_only:
        return Safe("")
    if paused:
        return button_form(url("queues", queue, "resume"), "resume", next_url=view.here)
    return button_form(url("queues", queue, "pause"), "pause", next_url=view.here, danger=True)


def _job_actions(view: View, job_id: int, state: str) -> Safe:
    if view.read_only:
        return Safe("")
    if state in ACTIVE_STATES:
        return button_form(url("jobs", job_id, "cancel"), "cancel", next_url=view.here, danger=True)
    if state in ("dead", "cancelled"):
        return button_form(url("jobs", job_id, "retry"), "retry", next_url=view.here)
    return Safe("")


def _job_link(job_id: int) -> Safe:
    return fmt('<a href="{href}">{id}</a>', href=url("jobs", job_id), id=job_id)


def _queue_link(queue: str) -> Safe:
    if len(queue) > CLIP_AT:  # cut in tables, like other long text, with the whole name as its tooltip
        return fmt('<a class="clip" href="{href}" title="{q}">{q}</a>', href=url("queues", queue), q=queue)
    return fmt('<a href="{href}">{q}</a>', href=url("queues", queue), q=queue)


# -- charts ------------------------------------------------------------------


def _live_every(view: View) -> int:
    """Seconds between live chart updates: ?live=N (1 to 3600), else 10."""
    text = view.query.get("live", "")
    return int(text) if text.isdigit() and 1 <= int(text) <= 3600 else 10


def _charts(view: View, history: Mapping[str, Any], queue_name: str | None) -> Safe:
    window: str = history["window"]
    tabs = join(
        fmt(
            '<a class="{on}" href="{href}">{label}</a>',
            on="on" if key == window else "",
            href=view.with_query(window=None if key == "1h" else key),
            label=spec.label,
        )
        for key, spec in WINDOWS.items()
    )
    return fmt(
        '<h2>Over time</h2><div class="tabs">{tabs}</div>'
        '<div id="live" data-src="{src}" data-every="{every}">{charts}</div>',
        tabs=tabs,
        src=url("fragments", "charts", queue=queue_name, window=window),
        every=_live_every(view),
        charts=queue_charts(history),
    )


# -- overview ----------------------------------------------------------------

QUEUE_COLUMNS = (
    Column("queue"),
    Column("status"),
    Column("scheduled", "num"),
    Column("waiting", "num"),
    Column("available", "num"),
    Column("running", "num"),
    Column("claimed", "num"),
    Column("retrying", "num"),
    Column("lease expired", "num"),
    Column("oldest due", "num"),
    Column("lag p50", "num"),
    Column("lag p95", "num"),
    Column("lag p99", "num"),
    Column("done 5m", "num"),
    Column("dead 5m", "num"),
    Column("done/s", "num"),
    Column("dead letters", "num"),
    Column(""),
)


def _queue_row(view: View, q: Mapping[str, Any]) -> list[object]:
    dead = q["dead_letters"]
    return [
        _queue_link(q["queue"]),
        badge("paused") if q["paused"] else badge("active"),
        number(q["scheduled"]),
        number(q.get("waiting", 0)),
        number(q["available"]),
        number(q["running"]),
        number(q["claimed"]),
        _count(q["retrying"], "warn"),
        _count(q["lease_expired"], "warn"),
        _age(q["oldest_due_age_s"]),
        duration(q["lag_p50_s"]),
        duration(q["lag_p95_s"]),
        duration(q["lag_p99_s"]),
        number(q["completed_5m"]),
        _count(q["dead_5m"], "bad"),
        f"{q['completed_per_s']:.2f}",
        fmt('<a class="bad" href="{h}">{n}</a>', h=url("dead", queue=q["queue"]), n=number(dead))
        if dead
        else _count(0),
        _queue_actions(view, q["queue"], bool(q["paused"])),
    ]


def overview(view: View, data: Mapping[str, Any], refresh: int | None) -> Safe:
    queues: Sequence[Mapping[str, Any]] = data["queues"]
    totals = {
        key: sum(int(q[key]) for q in queues)
        for key in ("scheduled", "waiting", "available", "running", "claimed", "dead_letters")
    }
    oldest = max((float(q["oldest_due_age_s"]) for q in queues), default=0.0)
    grid = join(
        [
            _stat("available (due)", number(totals["available"])),
            _stat("running", number(totals["running"])),
            _stat("claimed (waiting for a slot)", number(totals["claimed"])),
            _stat("scheduled", number(totals["scheduled"])),
            _stat("waiting (for dependencies)", number(totals["waiting"])),
            _stat("oldest due job waiting", _age(oldest) or "—"),
            _stat("dead letters", number(totals["dead_letters"])),
            _stat("workers live", number(data["workers_live"])),
            *_replica_stat(data.get("replica")),
        ]
    )
    workers = table(
        (
            Column("name"),
            Column("host"),
            Column("pid", "num"),
            Column("queues"),
            Column("labels"),
            Column("running", "num"),
            Column("claimed", "num"),
            Column("last seen", "num"),
            Column("started"),
            Column("version"),
        ),
        (
            [
                w["name"],
                w["host"],
                w["pid"],
                ", ".join(w["queues"] or []),
                ", ".join(w["labels"] or []),
                f"{w['running']}/{w['concurrency']}" if w["concurrency"] is not None else w["running"],
                w["claimed"],
                f"{duration(w['seen_s_ago'])} ago",
                timestamp(w["started_at"]),
                w["version"],
            ]
            for w in data["workers"]
        ),
        empty="No live workers (none reported in the last minute).",
    )
    scanners = _scanners(data["scanners"], data["shard_leases"])
    return fmt(
        '<h1>Overview</h1>{toolbar}<div class="grid">{grid}</div>{charts}'
        "<h2>Queues</h2>{queues}"
        "<h2>Workers</h2>{workers}"
        "{dispatch}"
        "<h2>Scanners and the shards they own</h2>{scanners}",
        toolbar=_refresh_links(view, refresh),
        grid=grid,
        charts=_charts(view, data["history"], None),
        queues=table(
            QUEUE_COLUMNS,
            (_queue_row(view, q) for q in queues),
            empty="No queues yet: nothing enqueued, nothing finished in the last 5 minutes.",
        ),
        workers=workers,
        dispatch=_dispatch(data),
        scanners=scanners,
    )


def _dispatch(data: Mapping[str, Any]) -> Safe:
    """Dispatch policies per queue, worker pools (labels -> live workers), and due jobs no pool can take."""
    from pgsched.api.dispatch import describe

    policies = table(
        (Column("queue"), Column("dispatch policy")),
        ([_queue_link(p["queue"]), describe(p)] for p in data.get("policies", [])),
        empty="No queue has a dispatch policy: strict priority, no limits (pgsched queues configure).",
    )
    pools = table(
        (Column("labels offered"), Column("live workers"), Column("queues")),
        (
            [", ".join(p["labels"] or []) or _muted("(none)"), ", ".join(p["workers"]), ", ".join(p["queues"])]
            for p in data.get("pools", [])
        ),
        empty="No live workers.",
    )
    unserved = data.get("unserved_labels", [])
    warning = table(
        (Column("queue"), Column("labels needed"), Column("due jobs", "num"), Column("oldest due", "num")),
        (
            [_queue_link(u["queue"]), ", ".join(u["labels"]), number(u["available"]), _age(u["oldest_due_age_s"])]
            for u in unserved
        ),
        empty="",
    )
    tasks = data.get("unserved_tasks", [])
    task_warning = table(
        (
            Column("queue"),
            Column("task"),
            Column("jobs", "num"),
            Column("unserved for", "num"),
            Column("dead in", "num"),
        ),
        (
            [_queue_link(u["queue"]), u["task"], number(u["jobs"]), _age(u["unserved_s"]), _age(u["dead_in_s"])]
            for u in tasks
        ),
        empty="",
    )
    return fmt(
        "<h2>Dispatch policies</h2>{policies}<h2>Worker pools</h2>{pools}{unserved}{tasks}",
        policies=policies,
        pools=pools,
        unserved=fmt('<h3 class="bad">Due jobs whose labels no live worker offers</h3>{t}', t=warning)
        if unserved
        else "",
        tasks=fmt('<h3 class="bad">Jobs whose task no live worker has registered</h3>{t}', t=task_warning)
        if tasks
        else "",
    )


def _scanners(scanners: Sequence[Mapping[str, Any]], leases: Sequence[Mapping[str, Any]]) -> Safe:
    """One row per scanner (and per lease owner that is no longer registered), with its shards and lease end."""
    owned: dict[str, list[Mapping[str, Any]]] = {}
    orphans: list[int] = []
    for lease in leases:
        if lease["owner"] is None or (lease["expires_in_s"] or 0) <= 0:
            orphans.append(int(lease["shard"]))
        else:
            owned.setdefault(lease["owner"], []).append(lease)
    rows: list[list[object]] = []
    known = {s["name"] for s in scanners}
    for scanner in scanners:
        mine = owned.get(scanner["name"], [])
        rows.append(
            [
                scanner["name"],
                scanner["host"],
                scanner["pid"],
                shard_ranges([int(x["shard"]) for x in mine]) or _muted("none"),
                _lease_end(min((x["expires_in_s"] for x in mine), default=None)),
                f"{duration(scanner['seen_s_ago'])} ago",
            ]
        )
    for owner in sorted(set(owned) - known):
        mine = owned[owner]
        ends = _lease_end(min(x["expires_in_s"] for x in mine))
        rows.append([owner, _muted("not registered"), "", shard_ranges([int(x["shard"]) for x in mine]), ends, ""])
    if orphans:
        rows.append([_muted("no owner"), "", "", fmt('<span class="warn">{s}</span>', s=shard_ranges(orphans)), "", ""])
    return table(
        (
            Column("scanner"),
            Column("host"),
            Column("pid", "num"),
            Column("shards"),
            Column("leases end", "num"),
            Column("last seen", "num"),
        ),
        rows,
        empty="No scanners: workers promote due jobs and expire leases themselves.",
    )


def shard_ranges(shards: Sequence[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2, 5, 7-8'."""
    parts: list[str] = []
    ordered = sorted(shards)
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}–{ordered[j]}")
        i = j + 1
    return ", ".join(parts)


def _muted(text: str) -> Safe:
    return fmt('<span class="muted">{t}</span>', t=text)


def _lease_end(seconds: float | None) -> Safe:
    if seconds is None:
        return _muted("")
    if seconds < 0:
        return fmt('<span class="warn">expired {d} ago</span>', d=duration(-seconds))
    return fmt("in {d}", d=duration(seconds))


# -- queue -------------------------------------------------------------------

JOB_COLUMNS = (
    Column("id", "num"),
    Column("state"),
    Column("task"),
    Column("args", "code"),
    Column("attempt", "num"),
    Column("priority", "num"),
    Column("due"),
    Column("finished"),
    Column("worker"),
    Column("progress"),
    Column("error", "wrap"),
    Column(""),
)


def _progress(fraction: float | None, note: str | None, elapsed_s: float | None = None) -> str:
    """A job's last progress report, and for a running one how long it has run: '42% page 3 · 1m 05s'."""
    parts = []
    if fraction is not None:
        parts.append(f"{fraction * 100:.0f}%" + (f" {note}" if note else ""))
    if elapsed_s is not None:
        parts.append(f"{duration(elapsed_s)} elapsed")
    return " · ".join(parts)


def queue(view: View, data: Mapping[str, Any], refresh: int | None) -> Safe:
    name: str = data["queue"]
    stats: Mapping[str, Any] = data["stats"] or {}
    state: str | None = data["state"]
    paused = bool(stats.get("paused"))
    grid = join(
        [
            _stat("scheduled", number(stats.get("scheduled", 0))),
            _stat("available", number(stats.get("available", 0))),
            _stat("running", number(stats.get("running", 0))),
            _stat("claimed (waiting for a slot)", number(stats.get("claimed", 0))),
            _stat("retrying", number(stats.get("retrying", 0))),
            _stat("lease expired", number(stats.get("lease_expired", 0))),
            _stat("oldest due", _age(stats.get("oldest_due_age_s")) or "—"),
            _stat("lag p50", duration(stats.get("lag_p50_s")) or "—"),
            _stat("lag p95", duration(stats.get("lag_p95_s")) or "—"),
            _stat("lag p99", duration(stats.get("lag_p99_s")) or "—"),
            _stat("done (5m)", number(stats.get("completed_5m", 0))),
            _stat("dead (5m)", number(stats.get("dead_5m", 0))),
            _stat("dead letters", number(stats.get("dead_letters", 0))),
        ]
    )
    tabs = join(
        fmt(
            '<a class="{on}" href="{href}">{label}</a>',
            on="on" if s == state else "",
            href=url("queues", name, state=s),
            label=s or "all",
        )
        for s in (None, *STATES)
    )
    rows = (
        [
            _job_link(j["id"]),
            badge(j["state"]),
            j["task"],
            j["args"],
            f"{j['attempt']}/{j['max_attempts']}" if j["max_attempts"] else j["attempt"],
            j["priority"],
            timestamp(j["run_at"]),
            ago(j["finished_at"]),
            j["worker"],
            _progress(j["progress"], j["progress_note"], j["elapsed_s"]),
            exception_line(j["error"]),
            _job_actions(view, j["id"], j["state"]),
        ]
        for j in data["jobs"]
    )
    return fmt(
        '<h1>Queue {name} {status} {action}</h1>{toolbar}<div class="grid">{grid}</div>{charts}'
        '<h2>Jobs</h2><div class="tabs">{tabs}</div>{jobs}{pager}',
        name=name,
        status=badge("paused") if paused else Safe(""),
        action=_queue_actions(view, name, paused),
        toolbar=_refresh_links(view, refresh),
        grid=grid,
        charts=_charts(view, data["history"], name),
        tabs=tabs,
        jobs=table(JOB_COLUMNS, rows, empty="No jobs here."),
        pager=_pager(view, data["next_before"]),
    )


def _pager(view: View, next_before: int | None) -> Safe:
    """Links to the newest page and the next older one, when there is more than one page."""
    links = []
    if view.query.get("before"):
        links.append(fmt('<a href="{h}">← newest</a>', h=view.with_query(before=None)))
    if next_before is not None:
        links.append(fmt('<a href="{h}">older →</a>', h=view.with_query(before=next_before)))
    return fmt('<div class="toolbar pager">{links}</div>', links=join(links, " · ")) if links else Safe("")


# -- job ---------------------------------------------------------------------


def job(view: View, data: Mapping[str, Any]) -> Safe:
    j: Mapping[str, Any] = data["job"]
    props = definition_list(
        {
            "state": badge(j["state"]),
            "queue": _queue_link(j["queue"]),
            "task": j["task"],
            "attempt": f"{j['attempt']} of {j['max_attempts']}" if j["max_attempts"] else j["attempt"],
            "priority": j["priority"],
            "due": timestamp(j["run_at"]),
            "created": timestamp(j["created_at"]),
            "started": timestamp(j["started_at"]),
            "finished": timestamp(j["finished_at"]),
            "progress": fmt(
                "{p} ({at})", p=_progress(j["progress"], j["progress_note"]), at=timestamp(j["progress_at"])
            )
            if j["progress"] is not None
            else None,
            "worker": j["worker"],
            "fencing token": j["lease_token"],
            "lease ends": timestamp(j["lease_expires_at"]),
            "cancel requested": timestamp(j["cancel_requested_at"]),
            "idempotency key": j["idempotency_key"],
            "labels": ", ".join(j["labels"] or []),
            "tenant": j["tenant"],
            "schedule": fmt('<a href="{h}">{s}</a>', h=url("schedules", schedule=j["schedule"]), s=j["schedule"])
            if j["schedule"]
            else None,
            "shard": j["shard"],
            "row in": f"pgsched.{j['table']}",
        }
    )
    events = table(
        (
            Column("at"),
            Column("event"),
            Column("attempt", "num"),
            Column("worker"),
            Column("token", "num"),
            Column("detail", "code wrap"),
        ),
        (
            [
                timestamp(e["at"], precise=True),
                badge(e["kind"]),
                e["attempt"],
                e["worker"],
                e["token"],
                "" if e["detail"] is None else short_json(e["detail"]),
            ]
            for e in data["events"]
        ),
        empty="No transitions recorded yet (the job has not been claimed).",
    )
    runs = table(
        (
            Column("outcome"),
            Column("attempt", "num"),
            Column("started"),
            Column("finished"),
            Column("worker"),
            Column("error", "wrap"),
        ),
        (
            [
                badge(h["state"]),
                h["attempt"],
                timestamp(h["started_at"]),
                timestamp(h["finished_at"]),
                h["worker"],
                exception_line(h["error"]),
            ]
            for h in data["history"]
        ),
        empty="Not finished yet.",
    )
    error = fmt('<h3>Error</h3><pre class="error">{e}</pre>', e=j["error"]) if j["error"] else Safe("")
    result = fmt("<h3>Result</h3><pre>{r}</pre>", r=pretty_json(j["result"])) if j["result"] is not None else Safe("")
    psql = (
        f"SELECT * FROM pgsched.jobs WHERE id = {int(j['id'])};\n"
        f"SELECT * FROM pgsched.job_history WHERE id = {int(j['id'])} ORDER BY finished_at;\n"
        f"SELECT * FROM pgsched.job_timeline WHERE job_id = {int(j['id'])};"
    )
    actions = _job_actions(view, int(j["id"]), j["state"])
    return fmt(
        '<h1>Job {id} <span class="sub">{task}</span> {state}</h1>{actions}'
        '<div class="split"><div>{props}</div><div><h3>Arguments</h3><pre>{args}</pre>{error}{result}</div></div>'
        "<h2>Timeline</h2>{events}<h2>Finished runs</h2>{runs}<h2>In psql</h2><pre>{psql}</pre>",
        id=j["id"],
        task=j["task"],
        state=badge(j["state"]),
        actions=fmt('<div class="actions">{a}</div>', a=actions) if actions else Safe(""),
        props=props,
        args=pretty_json(j["args"]),
        error=error,
        result=result,
        events=events,
        runs=runs,
        psql=psql,
    )


# -- dead letters --------------------------------------------------------------


def dead_letters(view: View, data: Mapping[str, Any]) -> Safe:
    current: str | None = data["queue"]
    counts: Sequence[Mapping[str, Any]] = data["counts"]
    total = sum(int(c["n"]) for c in counts)
    tabs = join(
        [
            fmt('<a class="{on}" href="/dead">all ({n})</a>', on="" if current else "on", n=number(total)),
            *(
                fmt(
                    '<a class="{on}" href="{h}">{q} ({n})</a>',
                    on="on" if c["queue"] == current else "",
                    h=url("dead", queue=c["queue"]),
                    q=c["queue"],
                    n=number(c["n"]),
                )
                for c in counts
            ),
        ]
    )
    rows = (
        [
            _job_link(d["id"]),
            _queue_link(d["queue"]),
            d["task"],
            d["args"],
            f"{d['attempt']}/{d['max_attempts']}",
            ago(d["died_at"]),
            d["last_worker"],
            exception_line(d["error"]),
            _job_actions(view, d["id"], "dead"),
        ]
        for d in data["dead_letters"]
    )
    columns = (
        Column("id", "num"),
        Column("queue"),
        Column("task"),
        Column("args", "code"),
        Column("attempts", "num"),
        Column("died"),
        Column("last worker"),
        Column("error", "wrap"),
        Column(""),
    )
    return fmt(
        '<h1>Dead letters</h1><p class="muted">Jobs that used up their attempts (or were given up on). '
        "Retry redrives one: it runs again now, with a fresh attempt budget.</p>"
        '<div class="tabs">{tabs}</div>{table}{pager}',
        tabs=tabs,
        table=table(columns, rows, empty="No dead letters."),
        pager=_pager(view, data["next_before"]),
    )


# -- job search and bulk actions -----------------------------------------------

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
            _job_link(j["id"]),
            _queue_link(j["queue"]),
            badge(j["state"]),
            j["task"],
            j["args"],
            f"{j['attempt']}/{j['max_attempts']}" if j["max_attempts"] else j["attempt"],
            j["tenant"],
            timestamp(j["run_at"]),
            ago(j["finished_at"]),
            exception_line(j["error"]),
            _job_actions(view, j["id"], j["state"]),
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
        pager=_pager(view, data["next_before"]),
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


# -- schedules ---------------------------------------------------------------


def schedules(view: View, data: Mapping[str, Any]) -> Safe:
    current: str | None = data["schedule"]
    # The pause/resume button sits by the status, never off the right edge;
    # the long cells (policies, errors) wrap instead of widening the table.
    columns = (
        Column("name", "wrap"),
        Column("status"),
        Column("", "act"),
        Column("cron", "code"),
        Column("time zone"),
        Column("task"),
        Column("queue"),
        Column("next fire"),
        Column("in flight", "num"),
        Column("last run"),
        Column("policies", "wrap"),
        Column("error", "wrap"),
    )
    rows = (
        [
            fmt('<a href="{h}">{n}</a>', h=url("schedules", schedule=s["name"]), n=s["name"]),
            badge("enabled") if s["enabled"] else badge("paused"),
            _schedule_actions(view, s["name"], bool(s["enabled"])),
            s["cron"],
            s["timezone"],
            s["task"],
            _queue_link(s["queue"]),
            timestamp(s["next_fire_at"]),
            s["in_flight"],
            join([badge(s["last_state"]), " ", ago(s["last_finished_at"])]) if s["last_state"] else "",
            f"misfire {s['misfire_policy']}, gap {s['gap_policy']}, overlap {s['overlap_policy']}, "
            f"concurrency {s['concurrency']}",
            fmt('<span class="bad">{e}</span>', e=exception_line(s["last_error"])) if s["last_error"] else "",
        ]
        for s in data["schedules"]
    )
    occurrences = table(
        (
            Column("schedule"),
            Column("fire at"),
            Column("local time"),
            Column("dst"),
            Column("decision"),
            Column("reason", "wrap"),
            Column("job", "num"),
            Column("decided"),
        ),
        (
            [
                o["schedule"],
                timestamp(o["fire_at"]),
                o["nominal"],
                o["dst"],
                badge(o["decision"]),
                o["reason"],
                _job_link(o["job_id"]) if o["job_id"] is not None else "",
                ago(o["decided_at"]),
            ]
            for o in data["occurrences"]
        ),
        empty="No occurrences decided yet (scanners expand schedules into jobs).",
    )
    heading = fmt(' of {s} · <a href="/schedules">all</a>', s=current) if current else Safe("")
    return fmt(
        "<h1>Schedules</h1>{table}<h2>Recent decisions{heading}</h2>{occurrences}",
        table=table(columns, rows, empty="No schedules."),
        heading=heading,
        occurrences=occurrences,
    )


def _schedule_actions(view: View, name: str, enabled: bool) -> Safe:
    if view.read_only:
        return Safe("")
    if enabled:
        return button_form(url("schedules", name, "pause"), "pause", next_url=view.here, danger=True)
    return button_form(url("schedules", name, "resume"), "resume", next_url=view.here)


def message(title: str, text: str) -> Safe:
    """A page that only says something (not found, refused, unavailable)."""
    return fmt('<h1>{title}</h1><p>{text}</p><p><a href="/">Back to the overview</a></p>', title=title, text=esc(text))
