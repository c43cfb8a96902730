"""pgsched.heartbeat(): extends leases still held under their token and reports cancel requests."""

from __future__ import annotations

from datetime import datetime, timedelta

from tests.sql.helpers import (
    Conn,
    cancel,
    claim,
    claim_one,
    complete,
    enqueue,
    enqueue_many,
    expire_leases,
    heartbeat,
    job,
    pair,
    reads_of_a_few_jobs,
    running_behind_empty_statistics,
    scalar,
    snapshot,
)


def test_heartbeat_extends_the_lease_from_now(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn)
    got = claim_one(conn, now=now)
    later = now + timedelta(seconds=20)
    assert heartbeat(conn, [pair(got)], lease=timedelta(minutes=2), now=later) == {job_id: (True, False)}
    row = job(conn, job_id)
    assert row is not None
    assert row["lease_expires_at"] == later + timedelta(minutes=2)
    assert (row["state"], row["lease_token"], row["leased_by"], row["attempt"]) == (
        "running",
        got["lease_token"],
        "w1",
        1,
    )


def test_a_heartbeat_keeps_the_job_from_expiring(conn: Conn, now: datetime) -> None:
    enqueue(conn)
    got = claim_one(conn, now=now)  # lease until now + 30 s
    heartbeat(conn, [pair(got)], now=now + timedelta(seconds=25))
    assert expire_leases(conn, now=now + timedelta(seconds=40)) == 0
    assert expire_leases(conn, now=now + timedelta(seconds=56)) == 1


def test_a_stale_token_changes_nothing_and_reports_the_lease_lost(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn)
    old = claim_one(conn, worker="w1", now=now)
    expire_leases(conn, now=now + timedelta(minutes=1))
    new = claim_one(conn, worker="w2", now=now + timedelta(minutes=1))
    before = snapshot(conn)
    assert heartbeat(conn, [pair(old)], now=now + timedelta(minutes=1, seconds=5)) == {job_id: (False, False)}
    assert snapshot(conn) == before
    assert heartbeat(conn, [pair(new)], now=now + timedelta(minutes=1, seconds=5)) == {job_id: (True, False)}


def test_a_finished_or_unknown_job_is_not_held(conn: Conn) -> None:
    job_id = enqueue(conn)
    got = claim_one(conn)
    complete(conn, [pair(got)])
    before = snapshot(conn)
    assert heartbeat(conn, [pair(got), (987654, 1)]) == {job_id: (False, False), 987654: (False, False)}
    assert snapshot(conn) == before


def test_a_waiting_job_cannot_be_heartbeaten_into_running(conn: Conn) -> None:
    job_id = enqueue(conn)
    token = scalar(conn, "SELECT pg_catalog.nextval('pgsched.lease_token_seq')")
    before = snapshot(conn)
    assert heartbeat(conn, [(job_id, token)]) == {job_id: (False, False)}
    assert snapshot(conn) == before


def test_heartbeat_reports_a_cancel_request(conn: Conn) -> None:
    job_id = enqueue(conn)
    got = claim_one(conn)
    assert heartbeat(conn, [pair(got)]) == {job_id: (True, False)}
    assert cancel(conn, job_id) == "cancel_requested"
    assert heartbeat(conn, [pair(got)]) == {job_id: (True, True)}
    assert heartbeat(conn, [pair(got)]) == {job_id: (True, True)}  # it stays requested


def test_one_row_per_job_of_a_batch(conn: Conn, now: datetime) -> None:
    enqueue_many(conn, ["t"] * 4)
    got = claim(conn, 4, now=now)
    held, lost, cancelled, finished = got
    complete(conn, [pair(finished)])
    cancel(conn, cancelled["id"])
    stale = (lost["id"], lost["lease_token"] - 1000)
    result = heartbeat(conn, [pair(held), stale, pair(cancelled), pair(finished)], now=now + timedelta(seconds=1))
    assert result == {
        held["id"]: (True, False),
        lost["id"]: (False, False),
        cancelled["id"]: (True, True),
        finished["id"]: (False, False),
    }
    row = job(conn, lost["id"])
    assert row is not None
    assert row["lease_expires_at"] == now + timedelta(seconds=30)


def test_heartbeat_with_a_worker_name_marks_the_worker_seen(conn: Conn, now: datetime) -> None:
    conn.execute("SELECT pgsched.register_worker('w1', queues => ARRAY['default'])")
    enqueue_many(conn, ["t"] * 2)
    got = claim(conn, 2, worker="w1")
    later = now + timedelta(minutes=3)
    heartbeat(conn, [pair(g) for g in got], worker="w1", now=later)
    row = conn.execute("SELECT last_seen, running FROM pgsched.workers WHERE name = 'w1'").fetchone()
    assert row == {"last_seen": later, "running": 2}


def test_heartbeat_probes_its_jobs_by_id_whatever_the_statistics_say(conn: Conn, now: datetime) -> None:
    """Each partition of pgsched.jobs is read through its primary key, for the ids given: a plan that read the
    partitions whole (statistics that call them small, as just after an ANALYZE while something pins the xmin
    horizon and they hold hundreds of thousands of dead row versions) made heartbeats take a second."""
    got = running_behind_empty_statistics(conn, now)

    def beat() -> None:
        result = heartbeat(conn, [pair(r) for r in got], now=now + timedelta(seconds=1))
        assert all(held for held, _ in result.values())

    reads_of_a_few_jobs(conn, beat)


def test_jobs_of_every_shard_are_extended_and_their_progress_kept_each_its_own(conn: Conn, now: datetime) -> None:
    # Rows are found by id alone, never paired with their shard row by row (that pairing made PostgreSQL 18
    # prune the partitions per row, a path that crashed a backend): jobs spread over the shards each get
    # their own lease and their own report.
    ids = [enqueue(conn, idempotency_key=f"spread-{i}") for i in range(24)]
    got = claim(conn, 24, now=now)
    assert {g["id"] for g in got} == set(ids)
    shards = {int(scalar(conn, "SELECT shard FROM pgsched.jobs WHERE id = %s", [i])) for i in ids}
    assert len(shards) >= 4, shards
    later = now + timedelta(seconds=5)
    assert heartbeat(conn, [pair(g) for g in got], now=later) == {g["id"]: (True, False) for g in got}
    fractions = {g["id"]: (k + 1) / 32 for k, g in enumerate(got)}
    kept = conn.execute(
        "SELECT * FROM pgsched.report_progress(%s::bigint[], %s::bigint[], %s::real[], %s::text[], %s)",
        [
            [g["id"] for g in got],
            [g["lease_token"] for g in got],
            [fractions[g["id"]] for g in got],
            [f"note {g['id']}" for g in got],
            later,
        ],
    ).fetchall()
    assert {r["job_id"]: r["kept"] for r in kept} == {g["id"]: True for g in got}
    for g in got:
        row = job(conn, g["id"])
        assert row is not None
        assert row["lease_expires_at"] == later + timedelta(seconds=30)
        assert (row["progress"], row["progress_note"]) == (fractions[g["id"]], f"note {g['id']}")
