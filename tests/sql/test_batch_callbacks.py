"""on_dependency_failure => 'run' (batch callbacks) and pgsched.dependency_outcomes(): a job that runs once its
dependencies finished, whatever their outcome, and reads each one's state and result or error."""

from __future__ import annotations

from tests.sql.helpers import (
    Conn,
    cancel,
    claim,
    claim_one,
    complete,
    enqueue,
    enqueue_many,
    fail,
    job,
    pair,
    refused,
    retry,
    state,
)


def outcomes(conn: Conn, job_id: int) -> list[tuple[int, str, object, str | None]]:
    rows = conn.execute("SELECT * FROM pgsched.dependency_outcomes(%s)", [job_id]).fetchall()
    return [(r["id"], r["state"], r["result"], r["error"]) for r in rows]


def test_a_callback_over_three_jobs_runs_once_after_one_went_dead(conn: Conn) -> None:
    a, b, c = (enqueue(conn, "member", {"n": n}, max_attempts=1) for n in range(3))
    callback = enqueue(conn, "callback", {}, depends_on=[a, b, c], on_dependency_failure="run")
    by_id = {r["id"]: r for r in claim(conn, 3, start_shard=None)}
    complete(conn, [pair(by_id[a])], results=[{"ok": 1}])
    fail(conn, *pair(by_id[b]), "no disk")
    assert state(conn, b) == "dead"
    assert state(conn, callback) == "waiting"  # c is still running
    complete(conn, [pair(by_id[c])], results=[{"ok": 3}])
    assert state(conn, callback) == "available"
    ran = claim(conn, 10, start_shard=None)
    assert [r["id"] for r in ran] == [callback]
    assert outcomes(conn, callback) == [
        (a, "completed", {"ok": 1}, None),
        (b, "dead", None, "no disk"),
        (c, "completed", {"ok": 3}, None),
    ]
    complete(conn, [pair(ran[0])])
    # A redrive of the dead member that then completes runs nothing again.
    retry(conn, b)
    complete(conn, [pair(claim_one(conn, start_shard=None))])
    assert claim(conn, 10, start_shard=None) == []
    assert state(conn, callback) == "completed"


def test_a_cancelled_dependency_counts_as_finished(conn: Conn) -> None:
    a = enqueue(conn, "member", {})
    callback = enqueue(conn, "callback", {}, depends_on=[a], on_dependency_failure="run")
    cancel(conn, a)
    assert state(conn, callback) == "available"
    assert outcomes(conn, callback) == [(a, "cancelled", None, "cancelled before it ran")]


def test_a_dependency_that_ended_before_the_enqueue_is_met(conn: Conn) -> None:
    dead = enqueue(conn, "member", {}, max_attempts=1)
    fail(conn, *pair(claim_one(conn)))
    callback = enqueue(conn, "callback", {}, depends_on=[dead], on_dependency_failure="run")
    assert state(conn, callback) == "available"


def test_a_cancel_policy_still_cancels_and_the_callback_below_it_runs(conn: Conn) -> None:
    a = enqueue(conn, "member", {}, max_attempts=1)
    middle = enqueue(conn, "middle", {}, depends_on=[a])
    callback = enqueue(conn, "callback", {}, depends_on=[middle], on_dependency_failure="run")
    fail(conn, *pair(claim_one(conn)))
    assert state(conn, middle) == "cancelled"
    assert state(conn, callback) == "available"
    assert [o[:2] for o in outcomes(conn, callback)] == [(middle, "cancelled")]


def test_a_batch_with_its_callback_in_one_enqueue_many(conn: Conn) -> None:
    ids = enqueue_many(
        conn,
        ["member", "member", "callback"],
        depends_on=[None, None, [-1, -2]],
        on_dependency_failure=[None, None, "run"],
    )
    assert state(conn, ids[2]) == "waiting"
    row = job(conn, ids[2])
    assert row is not None
    assert sorted(row["depends_on"]) == ids[:2]
    assert [o[:2] for o in outcomes(conn, ids[2])] == [(ids[0], "available"), (ids[1], "available")]


def test_outcomes_of_a_job_without_dependencies_are_empty_and_a_bad_policy_is_refused(conn: Conn) -> None:
    plain = enqueue(conn, "t", {})
    assert outcomes(conn, plain) == []
    assert outcomes(conn, 999999) == []
    with refused("22023") as info:
        enqueue(conn, "t", {}, depends_on=[plain], on_dependency_failure="skip")
    assert "'cancel', 'wait' or 'run'" in str(info.value)


def test_finishing_a_member_of_a_10000_job_batch_writes_and_reads_what_the_first_did(conn: Conn) -> None:
    """10,000 members (the size the contract names): about 5 s on a loaded machine, most of it the batch's enqueue."""
    members = 10_000
    ids = enqueue_many(
        conn,
        ["member"] * members + ["callback"],
        depends_on=[None] * members + [[-(n + 1) for n in range(members)]],
        on_dependency_failure=[None] * members + ["run"],
    )
    claimed = {r["id"]: r for r in claim(conn, members, start_shard=None)}
    assert len(claimed) == members
    # As autovacuum would after such a batch: the statistics then say every row waits for one job,
    # and that the history is small; the plans must still probe, never read the batch.
    conn.execute("ANALYZE pgsched.job_dependencies, pgsched.job_history, pgsched.jobs")

    def counters() -> tuple[int, int]:
        # This backend's row writes and reads not yet reported: a difference inside one transaction is its own.
        row = conn.execute(
            "SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) AS written,"
            " coalesce(sum(seq_tup_read + idx_tup_fetch), 0) AS read"
            " FROM pg_stat_xact_user_tables WHERE schemaname = 'pgsched'"
        ).fetchone()
        assert row is not None
        return int(row["written"]), int(row["read"])

    def finish(job_id: int, dead: bool) -> tuple[int, int]:
        with conn.transaction():
            before = counters()
            if dead:
                fail(conn, *pair(claimed[job_id]), "gave up", final=True)
            else:
                complete(conn, [pair(claimed[job_id])])
            after = counters()
        return after[0] - before[0], after[1] - before[1]

    first, first_read = finish(ids[0], dead=False)
    middle, middle_read = finish(ids[members // 2], dead=False)
    complete(conn, [pair(claimed[job_id]) for job_id in ids[1 : members - 1] if job_id != ids[members // 2]])
    last, last_read = finish(ids[members - 1], dead=True)
    assert state(conn, ids[-1]) == "available"
    # The last one also releases the callback (one update) and, ending dead, records its events.
    assert 0 < first == middle <= last <= first + 4, (first, middle, last)
    # No read of the batch either: a handful of rows, not thousands.
    assert max(first_read, middle_read, last_read) < 50, (first_read, middle_read, last_read)
