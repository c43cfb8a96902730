"""The overview page: queues, workers and scanners, dispatch, the replica."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pgsched.dashboard.html import (
    Column,
    Safe,
    badge,
    duration,
    fmt,
    join,
    number,
    table,
    timestamp,
    url,
)
from pgsched.dashboard.pages.common import (
    View,
    age_cell,
    charts_block,
    queue_actions,
    queue_link,
    refresh_links,
    stat_box,
)


def _count(value: int | None, cls: str = "") -> Safe:
    if not value:
        return fmt('<span class="muted">{v}</span>', v=number(value or 0))
    return fmt('<span class="{cls}">{v}</span>', cls=cls, v=number(value))


def _replica_stat(replica: Mapping[str, Any] | None) -> list[Safe]:
    """With --read-dsn: how far behind the replica the page was read from is."""
    if replica is None:
        return []
    if not replica["in_recovery"]:
        return [stat_box("read from (--read-dsn)", "the primary")]
    lag = replica["lag_s"]
    return [stat_box("replica behind by", "unknown" if lag is None else f"{lag:.1f} s")]


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
        queue_link(q["queue"]),
        badge("paused") if q["paused"] else badge("active"),
        number(q["scheduled"]),
        number(q.get("waiting", 0)),
        number(q["available"]),
        number(q["running"]),
        number(q["claimed"]),
        _count(q["retrying"], "warn"),
        _count(q["lease_expired"], "warn"),
        age_cell(q["oldest_due_age_s"]),
        duration(q["lag_p50_s"]),
        duration(q["lag_p95_s"]),
        duration(q["lag_p99_s"]),
        number(q["completed_5m"]),
        _count(q["dead_5m"], "bad"),
        f"{q['completed_per_s']:.2f}",
        fmt('<a class="bad" href="{h}">{n}</a>', h=url("dead", queue=q["queue"]), n=number(dead))
        if dead
        else _count(0),
        queue_actions(view, q["queue"], bool(q["paused"])),
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
            stat_box("available (due)", number(totals["available"])),
            stat_box("running", number(totals["running"])),
            stat_box("claimed (waiting for a slot)", number(totals["claimed"])),
            stat_box("scheduled", number(totals["scheduled"])),
            stat_box("waiting (for dependencies)", number(totals["waiting"])),
            stat_box("oldest due job waiting", age_cell(oldest) or "—"),
            stat_box("dead letters", number(totals["dead_letters"])),
            stat_box("workers live", number(data["workers_live"])),
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
        toolbar=refresh_links(view, refresh),
        grid=grid,
        charts=charts_block(view, data["history"], None),
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
        ([queue_link(p["queue"]), describe(p)] for p in data.get("policies", [])),
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
            [queue_link(u["queue"]), ", ".join(u["labels"]), number(u["available"]), age_cell(u["oldest_due_age_s"])]
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
            [queue_link(u["queue"]), u["task"], number(u["jobs"]), age_cell(u["unserved_s"]), age_cell(u["dead_in_s"])]
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
