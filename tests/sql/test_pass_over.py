"""pgsched.pass_over(): a worker that claimed a job of a task it lacks hands it back for one that knows the task,
without spending an attempt; the job goes dead only when no live worker has registered its task for
pgsched.config.unserved_task_timeout (issue 21.5)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from tests.sql.helpers import (
    Conn,
    cancel,
    claim_one,
    enqueue,
    event_kinds,
    history,
    job,
    pair,
    promote_due,
    refused,
)


def pass_over(conn: Conn, pairs: list[tuple[int, int]], *, now: datetime | None = None) -> list[dict[str, Any]]:
    ids = [p[0] for p in pairs]
    tokens = [p[1] for p in pairs]
    return conn.execute(
        "SELECT * FROM pgsched.pass_over(%s::bigint[], %s::bigint[], %s)", [ids, tokens, now]
    ).fetchall()


def live_worker(
    conn: Conn, name: str, tasks: list[str] | None, at: datetime, queues: tuple[str, ...] = ("default",)
) -> None:
    conn.execute(
        "SELECT pgsched.register_worker(%s, queues => %s::text[], tasks => %s::text[])", [name, list(queues), tasks]
    )
    conn.execute("UPDATE pgsched.workers SET last_seen = %s WHERE name = %s", [at, name])


def test_a_job_no_live_worker_knows_goes_back_unserved_and_keeps_its_attempts(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn, "other.app.task", max_attempts=1)
    live_worker(conn, "mine", ["my.task"], now)
    lease = claim_one(conn, worker="mine", now=now)
    [row] = pass_over(conn, [pair(lease)], now=now)
    assert row == {"job_id": job_id, "outcome": "scheduled"}
    got = job(conn, job_id)
    assert got is not None
    assert (got["state"], got["lease_token"], got["unserved_since"]) == ("scheduled", None, now)
    assert got["max_attempts"] == 2  # the claim's attempt is given back: one failure still allowed
    assert got["run_at"] > now
    assert event_kinds(conn, job_id) == ["claimed", "passed_over"]
    # claimed again before the timeout: still only passed over, unserved since the first time
    later = now + timedelta(minutes=9)
    live_worker(conn, "mine", ["my.task"], later)
    promote_due(conn, now=later)
    lease = claim_one(conn, worker="mine", now=later)
    assert pass_over(conn, [pair(lease)], now=later)[0]["outcome"] == "scheduled"
    assert job(conn, job_id)["unserved_since"] == now  # type: ignore[index]


def test_it_goes_dead_once_unserved_for_the_configured_time(conn: Conn, now: datetime) -> None:
    conn.execute("UPDATE pgsched.config SET unserved_task_timeout = '2 minutes'")
    job_id = enqueue(conn, "typo.task")
    lease = claim_one(conn, worker="mine", now=now)
    assert pass_over(conn, [pair(lease)], now=now)[0]["outcome"] == "scheduled"
    later = now + timedelta(minutes=2, seconds=1)
    promote_due(conn, now=later)
    lease = claim_one(conn, worker="mine", now=later)
    assert pass_over(conn, [pair(lease)], now=later)[0]["outcome"] == "dead"
    [dead] = history(conn, job_id)
    assert dead["state"] == "dead"
    assert dead["error"] == "unknown task 'typo.task': no live worker has registered it for 00:02:00"


def test_a_job_a_live_worker_knows_goes_back_for_it_and_is_not_unserved(conn: Conn, now: datetime) -> None:
    conn.execute("UPDATE pgsched.config SET unserved_task_timeout = '1 minute'")
    job_id = enqueue(conn, "other.app.task")
    lease = claim_one(conn, worker="mine", now=now)
    assert pass_over(conn, [pair(lease)], now=now)[0]["outcome"] == "scheduled"
    later = now + timedelta(hours=1)
    live_worker(conn, "theirs", ["other.app.task"], later)
    live_worker(conn, "elsewhere", ["other.app.task"], later, queues=("reports",))  # not of this queue
    promote_due(conn, now=later)
    lease = claim_one(conn, worker="mine", now=later)
    assert pass_over(conn, [pair(lease)], now=later)[0]["outcome"] == "scheduled"  # not dead: theirs knows it
    got = job(conn, job_id)
    assert got is not None
    assert got["unserved_since"] is None
    # a worker that reports no task list (an older worker) may know it: never dead because of it
    conn.execute("DELETE FROM pgsched.workers WHERE name = 'theirs'")
    live_worker(conn, "old", None, later + timedelta(hours=1))
    promote_due(conn, now=later + timedelta(hours=1))
    lease = claim_one(conn, worker="mine", now=later + timedelta(hours=1))
    assert pass_over(conn, [pair(lease)], now=later + timedelta(hours=1))[0]["outcome"] == "scheduled"


def test_a_stale_token_or_a_cancel_request_is_answered(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn, "x")
    lease = claim_one(conn, worker="mine", now=now)
    assert pass_over(conn, [(job_id, lease["lease_token"] + 1000)], now=now)[0]["outcome"] == "lease_lost"
    assert cancel(conn, job_id, now=now) == "cancel_requested"
    assert pass_over(conn, [pair(lease)], now=now)[0]["outcome"] == "cancelled"


def test_the_setting_is_validated(conn: Conn) -> None:
    for bad in ("0", "-1 minute", "1000 years"):
        with refused("23514", "config_unserved_task_timeout_range"):
            conn.execute("UPDATE pgsched.config SET unserved_task_timeout = %s::interval", [bad])


def test_a_worker_that_registers_the_task_makes_its_unserved_jobs_due_at_once(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn, "other.app.task", queue="shared")
    lease = claim_one(conn, worker="mine", queues=["shared"], now=now)
    assert pass_over(conn, [pair(lease)], now=now)[0]["outcome"] == "scheduled"
    waiting = job(conn, job_id)
    assert waiting is not None
    assert waiting["run_at"] == now + timedelta(seconds=30)  # asked again in 30 s while nobody knows the task
    live_worker(conn, "elsewhere", ["other.app.task"], now, queues=("reports",))  # not of its queue
    assert job(conn, job_id)["run_at"] == waiting["run_at"]  # type: ignore[index]
    conn.execute(
        "SELECT pgsched.register_worker('theirs', queues => ARRAY['shared'], tasks => ARRAY['other.app.task'])"
    )
    due = job(conn, job_id)
    assert due is not None
    assert due["run_at"] < waiting["run_at"]
    assert promote_due(conn) == 1
    assert job(conn, job_id)["state"] == "available"  # type: ignore[index]
