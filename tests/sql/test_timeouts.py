"""Timeouts the database enforces: jobs.timeout, the deadline start() sets, and housekeeping that fails overdue runs.

Also the bound on shutdown hand-backs (release() past config.max_handbacks makes the job dead).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import psycopg
import pytest

from tests.sql.helpers import (
    Conn,
    claim_one,
    complete,
    enqueue,
    expire_leases,
    fail,
    heartbeat,
    history,
    job,
    pair,
    promote_due,
    register_tasks,
    release,
    retry,
    scalar,
)
from tests.sql.test_roles import MakeRole, connect, make_role  # noqa: F401


def start(conn: Conn, pairs: list[tuple[int, int]], *, now: datetime | None = None) -> dict[int, tuple[str, object]]:
    rows = conn.execute(
        "SELECT * FROM pgsched.start(%s::bigint[], %s::bigint[], NULL, %s)",
        [[p[0] for p in pairs], [p[1] for p in pairs], now],
    ).fetchall()
    return {r["job_id"]: (r["outcome"], r["timeout"]) for r in rows}


@pytest.fixture(autouse=True)
def _config(conn: Conn) -> None:
    conn.execute("UPDATE pgsched.config SET timeout_grace = '5 seconds', max_handbacks = 3")


def test_start_sets_the_deadline_and_returns_the_timeout(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn, timeout=timedelta(seconds=2))
    got = claim_one(conn, now=now)
    at = now + timedelta(seconds=1)
    assert start(conn, [pair(got)], now=at) == {job_id: ("started", timedelta(seconds=2))}
    row = job(conn, job_id)
    assert row is not None
    assert (row["timeout"], row["deadline_at"]) == (timedelta(seconds=2), at + timedelta(seconds=2))


def test_a_job_without_timeout_takes_its_tasks_and_else_has_no_deadline(conn: Conn, now: datetime) -> None:
    register_tasks(conn, [{"name": "limited", "timeout": 7.5}])
    limited = enqueue(conn, "limited")
    free = enqueue(conn, "free")
    a = claim_one(conn, now=now)
    b = claim_one(conn, now=now)
    got = start(conn, [pair(a), pair(b)], now=now)
    assert got[limited] == ("started", timedelta(seconds=7.5))
    assert got[free] == ("started", None)
    assert job(conn, free)["deadline_at"] is None  # type: ignore[index]
    # the job's own timeout wins over the task's
    own = enqueue(conn, "limited", timeout=timedelta(seconds=1))
    c = claim_one(conn, now=now)
    assert start(conn, [pair(c)], now=now) == {own: ("started", timedelta(seconds=1))}


def test_a_hung_run_is_failed_past_deadline_plus_grace_though_heartbeats_continue(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn, timeout=timedelta(seconds=2), max_attempts=3)
    got = claim_one(conn, now=now)
    start(conn, [pair(got)], now=now)
    for s in (1, 4, 6):  # the hung worker keeps beating: its lease never runs out
        assert heartbeat(conn, [pair(got)], now=now + timedelta(seconds=s)) == {job_id: (True, False)}
        assert expire_leases(conn, now=now + timedelta(seconds=s, milliseconds=900)) == 0  # within deadline + grace
    assert expire_leases(conn, now=now + timedelta(seconds=7, milliseconds=100)) == 1
    row = job(conn, job_id)
    assert row is not None
    assert row["state"] in ("available", "scheduled")  # retried by its policy (backoff)
    assert row["last_error"] == "timed out after 2 s"
    assert row["lease_token"] is None
    # fenced: the hung worker's late calls are refused
    later = now + timedelta(seconds=8)
    assert heartbeat(conn, [pair(got)], now=later) == {job_id: (False, False)}
    assert complete(conn, [pair(got)], now=later) == {job_id: False}
    assert fail(conn, *pair(got), now=later) == "lease_lost"
    assert history(conn, job_id) == []
    kinds = [
        r["kind"] for r in conn.execute("SELECT kind FROM pgsched.job_events WHERE job_id = %s ORDER BY seq", [job_id])
    ]
    assert kinds == ["claimed", "failed"]


def test_a_timed_out_last_attempt_is_dead(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn, timeout=timedelta(milliseconds=500), max_attempts=1)
    got = claim_one(conn, now=now)
    start(conn, [pair(got)], now=now)
    assert expire_leases(conn, now=now + timedelta(seconds=6)) == 1
    [dead] = history(conn, job_id)
    assert (dead["state"], dead["error"]) == ("dead", "timed out after 0.5 s")


def test_a_claimed_run_not_yet_started_has_no_deadline_from_its_previous_run(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn, timeout=timedelta(seconds=1), max_attempts=5)
    first = claim_one(conn, now=now)
    start(conn, [pair(first)], now=now)
    assert fail(conn, *pair(first), retry_at=now, now=now + timedelta(seconds=1)) == "available"
    second = claim_one(conn, now=now + timedelta(seconds=2))  # waits for a slot: started_at is NULL again
    assert expire_leases(conn, now=now + timedelta(seconds=20)) == 0
    assert job(conn, job_id)["lease_token"] == second["lease_token"]  # type: ignore[index]


def test_the_grace_is_a_config_value(conn: Conn, now: datetime) -> None:
    conn.execute("UPDATE pgsched.config SET timeout_grace = '0'")
    job_id = enqueue(conn, timeout=timedelta(seconds=1))
    got = claim_one(conn, now=now)
    start(conn, [pair(got)], now=now)
    assert expire_leases(conn, now=now + timedelta(seconds=1, milliseconds=100)) == 1
    assert job(conn, job_id)["last_error"] == "timed out after 1 s"  # type: ignore[index]
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute("UPDATE pgsched.config SET timeout_grace = '-1 second'")


@pytest.mark.parametrize("bad", [timedelta(0), timedelta(seconds=-1)])
@pytest.mark.commits  # its own transactions, or time that moves between statements
def test_a_timeout_must_be_positive(conn: Conn, bad: timedelta) -> None:
    with pytest.raises(psycopg.errors.CheckViolation, match="timeout"):
        enqueue(conn, timeout=bad)
    conn.rollback()
    with pytest.raises(psycopg.errors.CheckViolation, match=r"timeout .* is not allowed") as refused:
        conn.execute("INSERT INTO pgsched.jobs (task, args, timeout) VALUES ('t', '{}', %s)", [bad])
    assert (refused.value.diag.constraint_name, refused.value.diag.column_name) == ("jobs_timeout_positive", "timeout")
    assert "jobs_s" not in str(refused.value)  # the value is named, not a partition


def test_plain_insert_sets_a_timeout(conn: Conn, now: datetime) -> None:
    job_id = scalar(conn, "INSERT INTO pgsched.jobs (task, args, timeout) VALUES ('t', '{}', '3 s') RETURNING id")
    got = claim_one(conn, now=now)
    assert start(conn, [pair(got)], now=now) == {job_id: ("started", timedelta(seconds=3))}


def test_hand_backs_at_shutdown_are_bounded(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn, max_attempts=5)
    at = now
    for n in range(1, 4):
        got = claim_one(conn, now=at)
        start(conn, [pair(got)], now=at)
        [row] = release(conn, [pair(got)], now=at)
        assert row["outcome"] == "available"
        assert job(conn, job_id)["handbacks"] == n  # type: ignore[index]
        at += timedelta(seconds=1)
    assert job(conn, job_id)["max_attempts"] == 8  # grew by one per hand-back, three times at most
    got = claim_one(conn, now=at)
    start(conn, [pair(got)], now=at)
    [row] = release(conn, [pair(got)], now=at)
    assert row["outcome"] == "dead"
    [dead] = history(conn, job_id)
    assert dead["state"] == "dead"
    assert dead["error"] == "handed back unfinished at shutdown 4 times (max_handbacks 3)"


def test_a_job_released_before_it_started_counts_no_hand_back(conn: Conn, now: datetime) -> None:
    conn.execute("UPDATE pgsched.config SET max_handbacks = 0")
    job_id = enqueue(conn)
    got = claim_one(conn, now=now)  # claimed, never started (waited for a slot)
    assert release(conn, [pair(got)], now=now)[0]["outcome"] == "available"
    got = claim_one(conn, now=now)
    start(conn, [pair(got)], now=now)
    assert release(conn, [pair(got)], now=now)[0]["outcome"] == "dead"  # max_handbacks 0: the first one
    assert history(conn, job_id)[0]["state"] == "dead"


def test_a_job_whose_start_the_claim_recorded_but_never_ran_counts_no_hand_back(conn: Conn, now: datetime) -> None:
    # A worker's claim records the start of jobs it expects to take a slot within moments; one still waiting
    # at shutdown is handed back with ran => false: its start is withdrawn and nothing counts.
    conn.execute("UPDATE pgsched.config SET max_handbacks = 0")
    job_id = enqueue(conn)
    [got] = conn.execute(
        "SELECT * FROM pgsched.claim('w1', '{default}', 1, '30s', p_now => %s, starts => 1)", [now]
    ).fetchall()
    assert got["started_at"] is not None
    rows = conn.execute(
        "SELECT * FROM pgsched.release(%s::bigint[], %s::bigint[], %s, ran => '{false}')",
        [[job_id], [got["lease_token"]], now],
    ).fetchall()
    assert [r["outcome"] for r in rows] == ["available"]
    row = job(conn, job_id)
    assert row is not None
    assert (row["handbacks"], row["started_at"], row["deadline_at"]) == (0, None, None)
    # ran => true (the default), the same start counts: max_handbacks 0 makes the first one dead
    [got] = conn.execute(
        "SELECT * FROM pgsched.claim('w1', '{default}', 1, '30s', p_now => %s, starts => 1)", [now]
    ).fetchall()
    rows = conn.execute(
        "SELECT * FROM pgsched.release(%s::bigint[], %s::bigint[], %s, ran => '{true}')",
        [[job_id], [got["lease_token"]], now],
    ).fetchall()
    assert [r["outcome"] for r in rows] == ["dead"]


def test_snoozes_are_not_hand_backs(conn: Conn, now: datetime) -> None:
    conn.execute("UPDATE pgsched.config SET max_handbacks = 0")
    job_id = enqueue(conn)
    got = claim_one(conn, now=now)
    start(conn, [pair(got)], now=now)
    assert scalar(conn, "SELECT pgsched.snooze(%s, %s, %s, %s)", [*pair(got), now, now]) == "available"
    assert job(conn, job_id)["handbacks"] == 0  # type: ignore[index]


def test_a_service_handed_back_at_every_deploy_never_goes_dead(conn: Conn, now: datetime) -> None:
    conn.execute("UPDATE pgsched.config SET max_handbacks = 0")
    job_id = int(scalar(conn, "SELECT pgsched.enqueue_service('svc')"))
    for at in (now + timedelta(seconds=n) for n in range(3)):
        got = claim_one(conn, now=at)
        start(conn, [pair(got)], now=at)
        assert release(conn, [pair(got)], now=at)[0]["outcome"] == "available"
    row = job(conn, job_id)
    assert row is not None
    assert (row["state"], row["handbacks"]) == ("available", 0)
    assert history(conn, job_id) == []


def test_an_enqueue_role_sets_a_timeout_but_not_the_deadline_nor_the_hand_backs(
    conn: Conn,
    make_role: MakeRole,  # noqa: F811 (the fixture of test_roles)
    now: datetime,
) -> None:
    with connect(make_role("pgsched_enqueue")) as app:
        by_function = scalar(app, "SELECT pgsched.enqueue('t', timeout => interval '2 seconds')")
        by_insert = scalar(app, "INSERT INTO pgsched.jobs (task, args, timeout) VALUES ('t', '{}', '3 s') RETURNING id")
        for column, value in (("deadline_at", now), ("handbacks", -5)):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                app.execute(f"INSERT INTO pgsched.jobs (task, args, {column}) VALUES ('t', '{{}}', %s)", [value])
            app.rollback()
        for statement in (
            "UPDATE pgsched.jobs SET timeout = NULL, deadline_at = NULL",
            "UPDATE pgsched.config SET timeout_grace = '1 day', max_handbacks = 1000000",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                app.execute(statement)
            app.rollback()
    assert [job(conn, i)["timeout"] for i in (by_function, by_insert)] == [  # type: ignore[index]
        timedelta(seconds=2),
        timedelta(seconds=3),
    ]
    assert scalar(conn, "SELECT timeout_grace FROM pgsched.config") == timedelta(seconds=5)


def _enqueue_command(conn: Conn, timeout: timedelta | None, max_attempts: int = 2) -> int:
    return int(
        scalar(
            conn,
            "SELECT pgsched.enqueue_command(ARRAY['sleep', '600'], timeout => %s, max_attempts => %s)",
            [timeout, max_attempts],
        )
    )


def _claim_command(conn: Conn, now: datetime) -> dict[str, object]:
    return claim_one(conn, queues=["commands"], labels=["pgsched:command"], now=now)


def test_a_command_job_carries_its_timeout_plus_the_margin_as_its_deadline(conn: Conn, now: datetime) -> None:
    conn.execute("UPDATE pgsched.config SET command_timeout_margin = '10 seconds'")
    job_id = _enqueue_command(conn, timedelta(seconds=2))
    row = job(conn, job_id)
    assert row is not None
    assert (row["timeout"], row["args"]["timeout_s"]) == (timedelta(seconds=12), 2)  # the runner kills at 2 s
    at = now + timedelta(seconds=1)  # enqueue_command took its run_at from now(), after the fixture's
    got = _claim_command(conn, at)
    assert start(conn, [pair(got)], now=at) == {job_id: ("started", timedelta(seconds=12))}
    # The runner hangs; the worker keeps beating: its lease never runs out.
    for s in (1, 5, 10, 16):
        assert heartbeat(conn, [pair(got)], now=at + timedelta(seconds=s)) == {job_id: (True, False)}
        assert expire_leases(conn, now=at + timedelta(seconds=s, milliseconds=900)) == 0  # within 12 s + 5 s
    assert expire_leases(conn, now=at + timedelta(seconds=17, milliseconds=100)) == 1
    row = job(conn, job_id)
    assert row is not None
    assert row["state"] in ("available", "scheduled")  # retried by its policy: attempt 1 of 2
    assert row["last_error"] == (
        "timed out after 12 s: the command runner did not end the command within the margin of its 2 s timeout"
    )
    # fenced: the runner's late result is refused
    later = at + timedelta(seconds=18)
    assert heartbeat(conn, [pair(got)], now=later) == {job_id: (False, False)}
    assert complete(conn, [pair(got)], results=[{"exit_code": 0}], now=later) == {job_id: False}
    assert fail(conn, *pair(got), "timed out after 2 s", now=later) == "lease_lost"
    assert history(conn, job_id) == []
    # The second attempt is timed the same way; when it hangs too, it is dead.
    promote_due(conn, now=at + timedelta(minutes=2))
    second = _claim_command(conn, at + timedelta(minutes=2))
    assert start(conn, [pair(second)], now=at + timedelta(minutes=2)) == {job_id: ("started", timedelta(seconds=12))}
    assert expire_leases(conn, now=at + timedelta(minutes=2, seconds=18)) == 1
    [dead] = history(conn, job_id)
    assert (dead["state"], dead["attempt"]) == ("dead", 2)
    assert dead["error"].startswith("timed out after 12 s: the command runner did not end the command")


def test_a_command_job_without_timeout_has_no_deadline_and_is_covered_by_its_lease(conn: Conn, now: datetime) -> None:
    job_id = _enqueue_command(conn, None)
    assert job(conn, job_id)["timeout"] is None  # type: ignore[index]
    at = now + timedelta(seconds=1)
    got = _claim_command(conn, at)
    assert start(conn, [pair(got)], now=at) == {job_id: ("started", None)}
    # a heartbeat keeps it held however long it runs
    assert heartbeat(conn, [pair(got)], lease=timedelta(hours=20), now=at + timedelta(seconds=10)) == {
        job_id: (True, False)
    }
    assert heartbeat(conn, [pair(got)], now=at + timedelta(hours=20)) == {job_id: (True, False)}
    assert expire_leases(conn, now=at + timedelta(hours=20, seconds=10)) == 0  # beating: it runs as long as it likes
    # its worker dies: no more heartbeats, the lease runs out and the job runs again
    assert expire_leases(conn, now=at + timedelta(hours=21)) == 1
    row = job(conn, job_id)
    assert row is not None
    assert (row["state"], row["lease_token"]) == ("available", None)
    assert row["last_error"].startswith("lease expired at")


@pytest.mark.commits  # its own transactions, or time that moves between statements
def test_the_command_timeout_margin_is_a_config_value_with_bounds(conn: Conn) -> None:
    assert scalar(conn, "SELECT command_timeout_margin FROM pgsched.config") == timedelta(seconds=30)
    assert job(conn, _enqueue_command(conn, timedelta(hours=1)))["timeout"] == timedelta(hours=1, seconds=30)  # type: ignore[index]
    conn.execute("UPDATE pgsched.config SET command_timeout_margin = '2 minutes'")
    assert job(conn, _enqueue_command(conn, timedelta(seconds=1.5)))["timeout"] == timedelta(minutes=2, seconds=1.5)  # type: ignore[index]
    for bad in ("1 second", "0", "2 days"):
        with pytest.raises(psycopg.errors.CheckViolation, match="config_command_timeout_margin_range"):
            conn.execute("UPDATE pgsched.config SET command_timeout_margin = %s::interval", [bad])
        conn.rollback()


def test_a_command_role_gets_the_deadline_and_cannot_loosen_it(
    conn: Conn,
    make_role: MakeRole,  # noqa: F811 (the fixture of test_roles)
) -> None:
    with connect(make_role("pgsched_command")) as ops:
        job_id = int(scalar(ops, "SELECT pgsched.enqueue_command(ARRAY['true'], timeout => interval '5 seconds')"))
        for statement in (
            "UPDATE pgsched.jobs SET timeout = NULL, deadline_at = NULL",
            "UPDATE pgsched.config SET command_timeout_margin = '1 day'",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                ops.execute(statement)
            ops.rollback()
    assert job(conn, job_id)["timeout"] == timedelta(seconds=35)  # type: ignore[index]


@pytest.mark.parametrize("ending", ["dead", "cancelled", "completed-then-kept"])
def test_a_redriven_job_keeps_its_own_timeout(conn: Conn, now: datetime, ending: str) -> None:
    job_id = enqueue(conn, timeout=timedelta(seconds=3), max_attempts=1)
    got = claim_one(conn, now=now)
    assert got["id"] == job_id
    other = enqueue(conn)  # no timeout of its own, beside it
    if ending == "cancelled":
        assert scalar(conn, "SELECT pgsched.cancel(%s, %s)", [job_id, now]) in {"cancelled", "cancel_requested"}
        fail(conn, *pair(got), final=True, now=now)
    elif ending == "dead":
        assert fail(conn, *pair(got), final=True, now=now) == "dead"
    else:
        assert complete(conn, [pair(got)], now=now)
    assert history(conn, job_id)[-1]["timeout"] == timedelta(seconds=3)
    if ending == "completed-then-kept":
        assert retry(conn, job_id, now=now) == "not_retryable"
        return
    assert retry(conn, job_id, now=now) == "retried"
    row = job(conn, job_id)
    assert row is not None
    assert row["timeout"] == timedelta(seconds=3)
    promote_due(conn, now=now + timedelta(seconds=1))
    again = claim_one(conn, now=now + timedelta(seconds=1))
    if again["id"] != job_id:
        again = claim_one(conn, now=now + timedelta(seconds=1))
    at = now + timedelta(seconds=2)
    assert start(conn, [pair(again)], now=at) == {job_id: ("started", timedelta(seconds=3))}
    assert (job(conn, other) or {})["timeout"] is None
