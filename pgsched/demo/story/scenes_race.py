"""Scenes of contention: scanners splitting shards and taking over a dead one's, a cancel racing a claim."""

from __future__ import annotations

from datetime import timedelta

import psycopg

from pgsched.demo.story.stage import Stage, hms, holdings

LEASE = 10.0  # the scanners' shard lease, seconds
RENEW = 3.0  # how often a scanner renews (a running scanner renews every lease / 3)


def scanner_takeover(stage: Stage) -> None:
    """Two scanners split the shards; one dies; the other takes its shards with a larger epoch, and
    the dead one's late write under its old epoch is refused (SQLSTATE PS409)."""
    start = stage.now
    held_a = stage.acquire("scanner-a", LEASE)
    stage.say(f"scanner-a starts alone and takes {holdings(held_a)}", scanner="scanner-a", shards=held_a)
    stage.wait(1)
    held_b = stage.acquire("scanner-b", LEASE)
    stage.say(
        f"scanner-b starts: its fair share is half, but every shard is leased, so it holds {holdings(held_b)}",
        scanner="scanner-b",
        shards=held_b,
    )
    stage.at(start + timedelta(seconds=RENEW))
    held_a = stage.acquire("scanner-a", LEASE)
    stage.say(
        f"scanner-a renews and gives back what is beyond its share: it keeps {holdings(held_a)}",
        scanner="scanner-a",
        shards=held_a,
    )
    stage.at(start + timedelta(seconds=RENEW + 1))
    held_b = stage.acquire("scanner-b", LEASE)
    stage.say(f"scanner-b renews and takes the freed ones: {holdings(held_b)}", scanner="scanner-b", shards=held_b)
    a_shards = sorted(held_a)
    old_epoch = held_a[a_shards[0]]

    key = stage.key_on_shard("nightly-export", a_shards)
    due = start + timedelta(seconds=8)
    job_id = stage.enqueue("story.export", key, run_at=due)
    shard = stage.job(job_id)["shard"]
    stage.say(
        f"the application enqueues job {job_id} due at {hms(due)}; its key {key} puts it on shard {shard}, scanner-a's",
        job_id=job_id,
        shard=shard,
    )
    stage.at(start + timedelta(seconds=5))
    stage.say("scanner-a freezes (a long pause, a lost network): it renews nothing from now on")

    for k in (2, 3, 4):
        stage.at(start + timedelta(seconds=RENEW * k + 1))
        held_b = stage.acquire("scanner-b", LEASE)
        _expired, promoted = stage.scan("scanner-b", held_b)
        state = stage.job(job_id)["state"]
        stage.say(
            f"scanner-b renews: {holdings(held_b)}; its scans promote {promoted}; job {job_id} is {state}",
            scanner="scanner-b",
            shards=held_b,
            promoted=promoted,
            state=state,
        )
    took_over = held_b.get(shard)
    job = stage.job(job_id)
    late_s = (stage.now - due).total_seconds()
    stage.say(
        f"scanner-a's lease ran out at {hms(start + timedelta(seconds=RENEW + LEASE))}: scanner-b took shard {shard} "
        f"over at epoch {took_over} (was {old_epoch}) and promoted job {job_id}, {late_s:g} s after its due time",
        shard=shard,
        epoch=took_over,
        old_epoch=old_epoch,
    )

    stage.wait(1)
    second = stage.enqueue("story.export", stage.key_on_shard(f"{key}-again", [shard]), run_at=stage.now)
    stage.say(f"job {second} becomes due on shard {shard}", job_id=second)
    refused: psycopg.Error | None = None
    try:
        stage.scan("scanner-a", {shard: old_epoch})
    except psycopg.Error as exc:
        refused = exc
    still = stage.job(second)["state"]
    sqlstate = refused.sqlstate if refused else None
    message = refused.diag.message_primary if refused else None
    stage.say(
        f"scanner-a wakes up and scans shard {shard} under its old epoch {old_epoch}: "
        + (f"refused, SQLSTATE {sqlstate}: {message}" if refused else "accepted")
        + f"; job {second} is still {still}",
        sqlstate=sqlstate,
        message=message,
        state=still,
    )
    _expired, promoted = stage.scan("scanner-b", {shard: took_over} if took_over is not None else {})
    stage.say(f"scanner-b's next scan of shard {shard} promotes it ({promoted} promoted)", promoted=promoted)
    stage.wait(1)
    held_a = stage.acquire("scanner-a", LEASE)
    stage.wait(RENEW - 1)
    held_b = stage.acquire("scanner-b", LEASE)
    stage.wait(1)
    held_a = stage.acquire("scanner-a", LEASE)
    stage.say(
        f"scanner-a rejoins; scanner-b gives half back at its next renewal; scanner-a now holds {holdings(held_a)}, "
        f"scanner-b {holdings(held_b)}",
        scanner_a=held_a,
        scanner_b=held_b,
    )
    stage.fact(shard=shard, old_epoch=old_epoch, new_epoch=took_over, job_id=job_id, refused_job_id=second)
    stage.check(
        f"scanner-b took shard {shard} over with a larger epoch ({old_epoch} -> {took_over}) and nothing was lost",
        took_over is not None and took_over > old_epoch and job["state"] == "available",
    )
    stage.check(
        "scanner-a's write under the old epoch was refused with SQLSTATE PS409 and changed nothing",
        sqlstate == "PS409" and still == "scheduled",
    )


def cancel_races_claim(stage: Stage) -> None:
    """A cancel and a claim reach one job at the same moment, in both orders: the job either never
    starts, or is told to stop at its next heartbeat; never both, never neither."""
    first = stage.enqueue("story.resize", "resize-photo-1")
    second = stage.enqueue("story.resize", "resize-photo-2")
    stage.promote()
    stage.say(f"jobs {first} and {second} (story.resize) are due and available", jobs=[first, second])

    # The claim's transaction holds the job's row; the cancel arrives and waits for it.
    worker = stage.connect()
    operator = stage.connect()
    try:
        worker.execute("BEGIN")
        (lease,) = stage.claim("worker-1", conn=worker)
        stage.say(
            f"worker-1's claim takes job {lease['id']} (token {lease['lease_token']}) but has not committed yet",
            job_id=lease["id"],
            token=lease["lease_token"],
        )
        other = second if lease["id"] == first else first
        with stage.blocked_call(operator, "cancel", id=lease["id"]) as answer:
            stage.say(f"the operator cancels job {lease['id']}: the cancel waits for the claim's row lock")
            worker.execute("COMMIT")
        (outcome,) = answer
        stage.say(
            f"the claim commits; the cancel then finds job {lease['id']} running and answers {outcome['outcome']}",
            outcome=outcome["outcome"],
        )
        stage.wait(1)
        beat = stage.heartbeat(lease["id"], lease["lease_token"])
        failed = stage.one("fail", id=lease["id"], token=lease["lease_token"], error="cancelled: stopped on request")
        claimed_first = stage.job(lease["id"])
        stage.say(
            f"worker-1's heartbeat reports cancel_requested={str(beat['cancel_requested']).lower()}; the handler "
            f"stops and reports it: job {lease['id']} is {failed['state']} after attempt {claimed_first['attempt']}",
            cancel_requested=beat["cancel_requested"],
            state=failed["state"],
        )

        # The other order: the cancel's transaction holds the row; the claim skips it.
        stage.wait(1)
        with operator.transaction():
            (cancelled,) = stage.all("cancel", operator, id=other)
            stage.say(
                f"the operator cancels job {other}: {cancelled['outcome']}, not committed yet",
                outcome=cancelled["outcome"],
            )
            during = stage.claim("worker-2", conn=worker)
            stage.say(
                f"worker-2 claims at the same moment: it skips the locked row and gets {len(during)} jobs",
                claimed=len(during),
            )
        after = stage.claim("worker-2", conn=worker)
        never = stage.job(other)
        stage.say(
            f"the cancel commits; worker-2 claims again and gets {len(after)}: job {other} is {never['state']} "
            f"with {never['attempt']} attempts, it never started",
            claimed=len(after),
            state=never["state"],
            attempt=never["attempt"],
        )
    finally:
        worker.close()
        operator.close()
    stage.fact(claimed_then_cancelled=lease["id"], cancelled_before_claim=other)
    stage.check(
        f"claim first: job {lease['id']} ran once and ended cancelled at the worker's next heartbeat",
        outcome["outcome"] == "cancel_requested" and failed["state"] == "cancelled" and claimed_first["attempt"] == 1,
    )
    stage.check(
        f"cancel first: job {other} was never claimed, not even while the cancel was uncommitted",
        not during and not after and never["state"] == "cancelled" and never["attempt"] == 0,
    )
