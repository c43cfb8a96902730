"""`pgsched doctor`: health checks of a pgsched database, with what to look at when one fails."""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

import click
import psycopg
from psycopg.rows import dict_row

from pgsched.cli.common import duration_callback, emit_json, emit_table, handle_errors, state
from pgsched.db import queries
from pgsched.observe.redact import describe, redact

OK, WARN, FAIL = "ok", "warn", "fail"


@dataclass
class Check:
    check: str
    status: str
    detail: str
    data: dict[str, Any] | None = None


@dataclass(frozen=True)
class Limits:
    max_xact_age: timedelta
    max_idle_xact: timedelta
    max_due_age: timedelta
    max_dead_ratio: float


def _seconds(value: Any) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value or 0)


def check_connection(conn: psycopg.Connection[dict[str, Any]]) -> Check:
    row = conn.execute(queries.DOCTOR_SERVER).fetchone()
    assert row is not None
    return Check("connection", OK, f"PostgreSQL {row['v']}, database {row['db']}")


def check_schema(conn: psycopg.Connection[dict[str, Any]]) -> Check:
    from pgsched.db.schema import check_compatible
    from pgsched.errors import SchemaError

    try:
        return Check("schema", OK, f"revision {check_compatible(conn)}")
    except SchemaError as exc:
        return Check("schema", FAIL, str(exc))


def check_listen(dsn: str, timeout: float = 2.0) -> Check:
    """LISTEN on one connection, NOTIFY from another: what workers rely on for prompt wake-ups."""
    channel = "pgsched_doctor"
    try:
        with (
            psycopg.connect(dsn, autocommit=True, connect_timeout=5) as listener,
            psycopg.connect(dsn, autocommit=True, connect_timeout=5) as sender,
        ):
            listener.execute(f"LISTEN {channel}")
            sender.execute("SELECT pg_notify(%s, 'ping')", [channel])
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                for note in listener.notifies(timeout=max(0.01, deadline - time.monotonic()), stop_after=1):
                    if note.channel == channel:
                        return Check("listen/notify", OK, "a NOTIFY from another session arrived")
    except psycopg.Error as exc:
        return Check("listen/notify", WARN, redact(f"LISTEN failed: {exc}; workers poll instead"))
    return Check(
        "listen/notify",
        WARN,
        "a NOTIFY did not arrive (a transaction-pooling PgBouncer?): run workers with --no-listen; they poll",
    )


def check_horizon(conn: psycopg.Connection[dict[str, Any]], limits: Limits) -> list[Check]:
    """Who holds back the xmin horizon (so VACUUM cannot remove pgsched's dead rows), and idle transactions.

    A session holds it with a snapshot (backend_xmin) or, idle in a transaction that wrote, with its xid
    alone (backend_xid): pgsched.xmin_horizon() reads both, and prepared transactions and replication slots.
    """
    holders = conn.execute(queries.DOCTOR_XMIN_HOLDERS).fetchall()
    checks: list[Check] = []
    limit = limits.max_xact_age.total_seconds()
    # A slot has no age in seconds: it fails by transactions only.
    old = [h for h in holders if (h["age_s"] is not None and h["age_s"] > limit) or h["xmin_age"] > 1_000_000]
    if old:
        h = old[0]
        who = (
            f"pid {h['pid']} ({h['application_name'] or h['user']}, {h['state']})"
            if h["holder"] == "session"
            else f"{h['holder']}" + (f" (pid {h['pid']})" if h["pid"] else "")
        )
        held = f"{h['age_s']:.0f}s, " if h["age_s"] is not None else ""
        if h["holder"] == "session":
            remedy = f" Query: {h['query']!r}. End it: SELECT pg_terminate_backend({h['pid']})"
        elif h["holder"].startswith("prepared"):
            remedy = " Finish it: COMMIT PREPARED or ROLLBACK PREPARED."
        else:
            remedy = " Drop the slot if nothing uses it, or look at its standby (hot_standby_feedback)."
        checks.append(
            Check(
                "xmin horizon",
                FAIL,
                f"{who} has held it back for {held}{h['xmin_age']} transactions: VACUUM cannot clean "
                f"pgsched's tables behind it.{remedy}",
                {"pid": h["pid"], "holders": holders},
            )
        )
    else:
        oldest = (
            f"oldest transaction {holders[0]['age_s'] or 0:.0f}s, {holders[0]['xmin_age']} transactions back"
            f" ({holders[0]['holder']} {holders[0]['pid'] or ''})".rstrip()
            if holders
            else ""
        )
        checks.append(Check("xmin horizon", OK, oldest or "no long transaction holds it back", {"holders": holders}))

    idle = conn.execute(queries.DOCTOR_IDLE_TRANSACTIONS).fetchall()
    long_idle = [r for r in idle if _seconds(r["idle_for"]) > limits.max_idle_xact.total_seconds()]
    if long_idle:
        r = long_idle[0]
        checks.append(
            Check(
                "idle in transaction",
                FAIL,
                f"{len(long_idle)} session(s); the oldest, pid {r['pid']} ({r['application_name']}), idle for "
                f"{_seconds(r['idle_for']):.0f}s after {r['query']!r}",
                {"sessions": idle},
            )
        )
    else:
        checks.append(Check("idle in transaction", OK, f"{len(idle)} session(s), none for long", {"sessions": idle}))
    return checks


def check_dead_tuples(conn: psycopg.Connection[dict[str, Any]], limits: Limits) -> Check:
    """Dead row versions per table, a partitioned table's partitions summed (each may stay under a threshold)."""
    rows = [r for r in conn.execute(queries.DEAD_TUPLES).fetchall() if r["dead"] > 0]
    bloated = [r for r in rows if r["dead"] > 10_000 and r["dead"] > limits.max_dead_ratio * max(r["live"], 1)]
    total = sum(r["dead"] for r in rows)
    if bloated:
        r = bloated[0]
        parts = f" over {r['partitions']} partitions" if r["partitions"] else ""
        return Check(
            "dead tuples",
            WARN,
            f"{r['table']}: {r['dead']} dead vs {r['live']} live rows{parts} (vacuumed {r['last_vacuum'] or 'never'}); "
            "a long transaction (see xmin horizon) or slow autovacuum",
            {"tables": rows},
        )
    return Check("dead tuples", OK, f"{total} dead rows over pgsched's tables", {"tables": rows})


def check_jobs(conn: psycopg.Connection[dict[str, Any]], limits: Limits) -> list[Check]:
    row = conn.execute(queries.DOCTOR_JOBS).fetchone()
    assert row is not None
    checks = []
    if row["expired"]:
        checks.append(
            Check(
                "expired leases",
                FAIL,
                f"{row['expired']} running jobs' leases ran out over a minute ago (since {row['oldest_expired']}) "
                "and nothing handed them back: is any scanner or worker running?",
            )
        )
    else:
        checks.append(Check("expired leases", OK, "none left behind"))
    age = float(row["oldest_due_s"] or 0)
    status = FAIL if age > limits.max_due_age.total_seconds() else OK
    checks.append(Check("oldest due job", status, f"{row['due']} due, the oldest waiting {age:.1f}s"))
    return checks


def check_unserved_labels(conn: psycopg.Connection[dict[str, Any]]) -> Check:
    """Due jobs whose labels no live worker of their queue offers: they would wait silently."""
    rows = conn.execute(queries.UNSERVED_LABELS).fetchall()
    if not rows:
        return Check("worker pools", OK, "every due job with labels has a live worker offering them")
    described = "; ".join(
        f"{r['available']} in {r['queue']} need {','.join(r['labels'])} "
        f"(oldest waiting {float(r['oldest_due_age_s']):.0f}s)"
        for r in rows[:5]
    )
    more = f" and {len(rows) - 5} more label sets" if len(rows) > 5 else ""
    return Check(
        "worker pools",
        FAIL,
        f"due jobs no live worker can take: {described}{more}; start a worker with --labels offering them",
    )


def check_unserved_tasks(conn: psycopg.Connection[dict[str, Any]]) -> Check:
    """Jobs handed back because no live worker of their queue has registered their task: dead at the timeout."""
    rows = conn.execute(queries.UNSERVED_TASKS).fetchall()
    if not rows:
        return Check("unserved tasks", OK, "every job handed back for its task has a live worker that knows it")
    described = "; ".join(
        f"{r['jobs']} of {r['task']} in {r['queue']} (unserved {float(r['unserved_s']):.0f}s, "
        f"dead in {float(r['dead_in_s']):.0f}s)"
        for r in rows[:5]
    )
    more = f" and {len(rows) - 5} more tasks" if len(rows) > 5 else ""
    return Check(
        "unserved tasks",
        FAIL,
        f"jobs whose task no live worker has registered: {described}{more}; start a worker of the application "
        "that defines the task (pgsched.config.unserved_task_timeout says how long they wait)",
    )


def check_processes(conn: psycopg.Connection[dict[str, Any]]) -> list[Check]:
    workers = conn.execute(queries.DOCTOR_WORKERS).fetchone()
    scanners = conn.execute(queries.DOCTOR_SCANNERS).fetchone()
    orphaned = conn.execute(queries.DOCTOR_ORPHANED_SHARDS).fetchone()
    assert workers is not None
    assert scanners is not None
    assert orphaned is not None
    checks = [
        Check(
            "workers",
            OK if workers["n"] else WARN,
            f"{workers['n']} live, running {workers['running']} jobs" if workers["n"] else "no live worker",
        )
    ]
    if scanners["n"]:
        detail = f"{scanners['n']} live" + (f"; {orphaned['n']} shards without a live owner" if orphaned["n"] else "")
        checks.append(Check("scanners", OK if not orphaned["n"] else WARN, detail))
    else:
        checks.append(
            Check(
                "scanners",
                WARN,
                "no live scanner: workers with housekeeping promote, expire and expand schedules themselves (slower)",
            )
        )
    return checks


def check_resource_limits(conn: psycopg.Connection[dict[str, Any]]) -> Check:
    """How the live workers that run command jobs limit them: a cgroup per run, or only rlimits."""
    from pgsched.runtime.limits import mechanism

    rows = conn.execute(queries.DOCTOR_RESOURCE_LIMITS).fetchall()
    here = mechanism().describe()
    if not rows:
        return Check("resource limits", OK, f"no live worker runs commands; one on this host would use {here}")
    shown = "; ".join(f"{r['name']}: {r['resource_limits']}" for r in rows)
    weak = [r["name"] for r in rows if str(r["resource_limits"]).startswith("rlimit")]
    status = WARN if weak else OK
    hint = " (rlimits only: memory as address space, no CPU rate; give the worker a writable cgroup)" if weak else ""
    return Check("resource limits", status, shown + hint, {"workers": {r["name"]: r["resource_limits"] for r in rows}})


def check_schedules(conn: psycopg.Connection[dict[str, Any]], margin: timedelta = timedelta(minutes=1)) -> list[Check]:
    """Schedules that nobody expands (their next fire time passed with no occurrence filed) or that cannot be."""
    rows = conn.execute(
        queries.DOCTOR_SCHEDULES,
        {"margin": margin},
    ).fetchall()
    if not rows:
        return [Check("schedules", OK, "no enabled schedule")]
    checks: list[Check] = []
    broken = [r for r in rows if r["last_error"]]
    if broken:
        shown = "; ".join(f"{r['name']}: {r['last_error']}" for r in broken[:3])
        checks.append(
            Check(
                "schedule errors",
                FAIL,
                f"{len(broken)} schedules cannot be expanded and never fire ({shown}); fix them with"
                " `pgsched schedules add` (an edit clears the error)",
                {"schedules": [r["name"] for r in broken]},
            )
        )
    stale = [r for r in rows if r["stale"]]
    orphaned = [r for r in rows if not r["held"] and not r["last_error"]]
    if stale:
        who = (
            "nobody holds their shards: start a scanner, or a worker with housekeeping"
            if any(not r["held"] for r in stale)
            else f"their shards are held ({', '.join(sorted({str(r['owner']) for r in stale}))}) but not expanded"
        )
        names = ", ".join(r["name"] for r in stale[:5])
        checks.append(
            Check(
                "schedules expanded",
                FAIL,
                f"{len(stale)} schedules passed their next fire time with no occurrence filed ({names}): {who}",
                {"schedules": [r["name"] for r in stale]},
            )
        )
    elif orphaned:
        checks.append(
            Check(
                "schedules expanded",
                WARN,
                f"{len(orphaned)} schedules are on shards nobody holds (no scanner, no worker with housekeeping):"
                " they will not fire",
                {"schedules": [r["name"] for r in orphaned]},
            )
        )
    else:
        checks.append(Check("schedules expanded", OK, f"{len(rows) - len(broken)} schedules expanded ahead"))
    return checks


def check_event_stream(conn: psycopg.Connection[dict[str, Any]], limits: Limits) -> Check:
    """How far read_events (`pgsched events`, event hooks) is held back, and by whom: any session holding a
    transaction id open stalls the stream for every reader until it ends (docs/events.md)."""
    held = conn.execute(queries.DOCTOR_HELD_EVENTS).fetchone()
    assert held is not None
    count, behind = int(held["held"]), _seconds(held["behind"])
    if count == 0:
        return Check("event stream", OK, "no event waits for an open transaction")
    holder = conn.execute(queries.DOCTOR_OLDEST_XID).fetchone()
    if holder is None:  # it ended between the two queries
        return Check("event stream", OK, f"{count} events were waiting; their transactions have ended")
    who = (
        f"prepared transaction {holder['gid']!r}: COMMIT PREPARED or ROLLBACK PREPARED it"
        if holder["gid"] is not None
        else f"pid {holder['pid']} ({holder['application_name'] or holder['user']}, {holder['state']}, transaction "
        f"open {_seconds(holder['xact_age']):.0f}s, {holder['query']!r}): end it with "
        f"SELECT pg_terminate_backend({holder['pid']})"
    )
    status = FAIL if behind > limits.max_xact_age.total_seconds() else OK
    noun = "event" if count == 1 else "events"
    detail = f"{count} {noun} ({behind:.0f}s old) wait for the oldest open transaction, {who}"
    return Check("event stream", status, detail, {"held": count, "behind_s": behind, **holder})


def check_notify_queue(conn: psycopg.Connection[dict[str, Any]]) -> Check:
    row = conn.execute(queries.DOCTOR_NOTIFY_QUEUE).fetchone()
    assert row is not None
    usage = float(row["usage"])
    status = FAIL if usage > 0.5 else WARN if usage > 0.1 else OK
    detail = f"{usage:.1%} used"
    if status != OK:
        detail += ": a listener is not reading (often one idle in a transaction); NOTIFY fails when it is full"
    return Check("notify queue", status, detail)


def run_checks(dsn: str, limits: Limits) -> list[Check]:
    try:
        conn = psycopg.connect(dsn, autocommit=True, row_factory=dict_row, connect_timeout=10)
    except psycopg.Error as exc:
        return [Check("connection", FAIL, redact(f"{describe(dsn)}: {str(exc).strip()}"))]
    with conn:
        checks = [check_connection(conn), check_schema(conn)]
        if checks[-1].status == FAIL:
            return checks
        checks.append(check_listen(dsn))
        checks += check_horizon(conn, limits)
        checks.append(check_event_stream(conn, limits))
        checks.append(check_dead_tuples(conn, limits))
        checks += check_jobs(conn, limits)
        checks.append(check_unserved_labels(conn))
        checks.append(check_unserved_tasks(conn))
        checks += check_processes(conn)
        checks.append(check_resource_limits(conn))
        checks += check_schedules(conn)
        checks.append(check_notify_queue(conn))
    return checks


@click.command()
@click.option(
    "--max-xact-age",
    default="5m",
    show_default=True,
    callback=duration_callback,
    help="A snapshot held longer than this fails the xmin horizon check; events held back longer fail the "
    "event stream check.",
)
@click.option(
    "--max-idle-xact",
    default="1m",
    show_default=True,
    callback=duration_callback,
    help="A session idle in a transaction longer than this fails.",
)
@click.option(
    "--max-due-age",
    default="5m",
    show_default=True,
    callback=duration_callback,
    help="A due job waiting longer than this fails.",
)
@click.option("--max-dead-ratio", type=float, default=1.0, show_default=True, help="Dead/live rows that warn.")
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
@click.pass_context
@handle_errors
def doctor(
    ctx: click.Context,
    max_xact_age: timedelta,
    max_idle_xact: timedelta,
    max_due_age: timedelta,
    max_dead_ratio: float,
    as_json: bool,
) -> None:
    """Check the database pgsched runs on: connection, schema, LISTEN, the xmin horizon and who holds it,
    the event stream and the transaction it waits for, idle transactions, dead rows, expired leases, the
    oldest due job, live workers and scanners, how command workers limit their runs (cgroups or rlimits),
    schedules that nobody expands or that cannot be expanded, and the NOTIFY queue. Exits 1 when a check
    fails (warnings do not)."""
    limits = Limits(max_xact_age, max_idle_xact, max_due_age, max_dead_ratio)
    checks = run_checks(state(ctx).resolve(), limits)
    if as_json:
        emit_json([asdict(c) for c in checks])
    else:
        emit_table(
            [{"check": c.check, "status": c.status, "detail": c.detail} for c in checks], ["check", "status", "detail"]
        )
    sys.exit(1 if any(c.status == FAIL for c in checks) else 0)


def register(group: click.Group) -> None:
    group.add_command(doctor)
