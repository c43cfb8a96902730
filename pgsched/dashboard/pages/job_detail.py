"""A job's page: its row or history, progress and steps, events, and its actions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pgsched.dashboard.html import (
    Column,
    Safe,
    badge,
    definition_list,
    exception_line,
    fmt,
    pretty_json,
    short_json,
    table,
    timestamp,
    url,
)
from pgsched.dashboard.pages.common import View, job_actions, progress_text, queue_link


def job(view: View, data: Mapping[str, Any]) -> Safe:
    j: Mapping[str, Any] = data["job"]
    props = definition_list(
        {
            "state": badge(j["state"]),
            "queue": queue_link(j["queue"]),
            "task": j["task"],
            "attempt": f"{j['attempt']} of {j['max_attempts']}" if j["max_attempts"] else j["attempt"],
            "priority": j["priority"],
            "due": timestamp(j["run_at"]),
            "created": timestamp(j["created_at"]),
            "started": timestamp(j["started_at"]),
            "finished": timestamp(j["finished_at"]),
            "progress": fmt(
                "{p} ({at})", p=progress_text(j["progress"], j["progress_note"]), at=timestamp(j["progress_at"])
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
    actions = job_actions(view, int(j["id"]), j["state"])
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
