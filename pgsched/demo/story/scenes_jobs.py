"""Scenes of one job's life: due on the dot, a crashed worker fenced off, one job per idempotency key."""

from __future__ import annotations

from datetime import timedelta

from pgsched.demo.story.stage import Stage, day, hms, stamp


def delayed_job(stage: Stage) -> None:
    """A job enqueued for later is not promoted or claimed a moment early, and starts on the dot."""
    due = stage.now + timedelta(minutes=5)
    job_id = stage.enqueue("story.report", "report-2099-03-28", run_at=due, args={"day": "2099-03-28"})
    job = stage.job(job_id)
    stage.say(
        f"the application enqueues task story.report due at {hms(due)}: job {job_id}, state {job['state']}, "
        f"shard {job['shard']}",
        job_id=job_id,
        state=job["state"],
        shard=job["shard"],
        run_at=stamp(due),
    )

    stage.at(due - timedelta(seconds=1))
    promoted = stage.promote()
    claimed = stage.claim("worker-1")
    state = stage.job(job_id)["state"]
    stage.say(
        f"one second early: promote_due promotes {promoted} jobs, worker-1's claim gets {len(claimed)}; "
        f"job {job_id} is still {state}",
        promoted=promoted,
        claimed=len(claimed),
        state=state,
    )
    early_ok = promoted == 0 and not claimed and state == "scheduled"

    stage.at(due)
    promoted = stage.promote()
    state = stage.job(job_id)["state"]
    stage.say(
        f"on the dot: promote_due promotes {promoted} job; job {job_id} is {state}", promoted=promoted, state=state
    )
    (lease,) = stage.claim("worker-1")
    lag = (stage.now - lease["run_at"]).total_seconds()
    stage.say(
        f"worker-1 claims job {lease['id']}: attempt {lease['attempt']}, fencing token {lease['lease_token']}, "
        f"lease until {hms(lease['lease_expires_at'])}; start lag {lag:g} s",
        job_id=lease["id"],
        attempt=lease["attempt"],
        token=lease["lease_token"],
        lease_expires_at=stamp(lease["lease_expires_at"]),
        start_lag_s=lag,
    )
    stage.wait(0.25)
    accepted = stage.complete(job_id, lease["lease_token"])
    final = stage.job(job_id)
    stage.say(
        f"worker-1 completes job {job_id} with token {lease['lease_token']}: "
        f"{'accepted' if accepted else 'refused'}; job {job_id} is {final['state']}",
        accepted=accepted,
        state=final["state"],
    )
    stage.fact(job_id=job_id, run_at=stamp(due), token=lease["lease_token"])
    stage.check("nothing was promoted or claimed before the job's time", early_ok)
    stage.check(
        f"job {job_id} started at {hms(due)}, its due time, and completed",
        final["started_at"] == due and final["state"] == "completed",
    )


def crashed_worker(stage: Stage) -> None:
    """A worker stalls past its lease; the job is handed out again under a larger token, and the stale
    worker's late effect and completion are refused: two runs, one effect."""
    key = "charge-order-1001"
    job_id = stage.enqueue("story.charge", key, args={"order": 1001, "amount": 25})
    promoted = stage.promote()
    stage.say(
        f"the application enqueues story.charge (order 1001, 25 EUR) with idempotency key {key}: job {job_id}; "
        f"promote_due makes it available ({promoted} promoted)",
        job_id=job_id,
        key=key,
    )
    (first,) = stage.claim("worker-1", lease=30)
    stage.say(
        f"worker-1 claims job {job_id}: attempt {first['attempt']}, fencing token {first['lease_token']}, "
        f"lease until {hms(first['lease_expires_at'])}",
        worker="worker-1",
        attempt=first["attempt"],
        token=first["lease_token"],
        lease_expires_at=stamp(first["lease_expires_at"]),
    )
    stage.wait(2)
    stage.say("worker-1 stalls before charging (a long pause, a cut network): it sends no more heartbeats")

    stage.at(first["lease_expires_at"])
    expired_early = stage.expire()
    stage.wait(1)
    expired = stage.expire()
    job = stage.job(job_id)
    stage.say(
        f"at {hms(first['lease_expires_at'])} the lease is still held ({expired_early} expired); one second later "
        f"expire_leases hands it back ({expired} expired): job {job_id} is {job['state']} again, "
        f"attempt {job['attempt']} used",
        expired=expired,
        state=job["state"],
    )
    (second,) = stage.claim("worker-2", lease=30)
    stage.say(
        f"worker-2 claims job {job_id}: attempt {second['attempt']}, fencing token {second['lease_token']} "
        f"(larger than {first['lease_token']})",
        worker="worker-2",
        attempt=second["attempt"],
        token=second["lease_token"],
    )
    stage.wait(1)
    charged = stage.all("charge", key=key, token=second["lease_token"], amount=25, worker="worker-2")
    stage.say(
        f"worker-2 charges the order in story.charges under token {second['lease_token']}: "
        f"{'written' if charged else 'refused'}",
        written=bool(charged),
    )
    accepted = stage.complete(job_id, second["lease_token"])
    stage.say(
        f"worker-2 completes job {job_id} with token {second['lease_token']}: {'accepted' if accepted else 'refused'}",
        accepted=accepted,
    )
    before = stage.job(job_id)

    stage.wait(5)
    beat = stage.heartbeat(job_id, first["lease_token"])
    stage.say(
        f"worker-1 wakes up; its heartbeat with token {first['lease_token']} says the lease is "
        f"{'held' if beat['held'] else 'lost'}",
        held=beat["held"],
    )
    late = stage.all("charge", key=key, token=first["lease_token"], amount=25, worker="worker-1")
    stage.say(
        f"worker-1 tries its charge anyway under token {first['lease_token']}: "
        f"{'written' if late else 'refused (story.charges has seen token ' + str(second['lease_token']) + ')'}",
        written=bool(late),
    )
    stale = stage.complete(job_id, first["lease_token"])
    after = stage.job(job_id)
    stage.say(
        f"worker-1 completes job {job_id} with token {first['lease_token']}: "
        f"{'accepted' if stale else 'refused'}; the job stays {after['state']} by {after['leased_by']} "
        f"under token {after['lease_token']}",
        accepted=stale,
        state=after["state"],
        leased_by=after["leased_by"],
        token=after["lease_token"],
    )
    events = stage.events(job_id)
    runs = [e for e in events if e["kind"] == "claimed"]
    charges = stage.all("charges")
    trail = ", ".join(f"{e['kind']} (token {e['token']}, {e['worker']})" for e in events)
    stage.say(f"job {job_id}'s audit trail: {trail}", events=[e["kind"] for e in events])
    stage.say(
        f"story.charges holds {len(charges)} row: "
        + "; ".join(f"{c['key']} charged by {c['charged_by']} under token {c['token']}" for c in charges),
        rows=len(charges),
    )
    stage.fact(job_id=job_id, key=key, stale_token=first["lease_token"], token=second["lease_token"])
    stage.check(f"job {job_id} ran twice (two claims, tokens {first['lease_token']} and {second['lease_token']})",
                [r["token"] for r in runs] == [first["lease_token"], second["lease_token"]])  # fmt: skip
    stage.check("its effect happened once: one row in story.charges, under the newer token",
                len(charges) == 1 and charges[0]["token"] == second["lease_token"])  # fmt: skip
    stage.check("the stale worker's heartbeat, charge and completion were refused and changed nothing",
                not beat["held"] and not late and not stale and before == after)  # fmt: skip


def idempotency(stage: Stage) -> None:
    """One idempotency key, one job: while it waits, and after it completed."""
    key = "welcome-user-42"
    first = stage.enqueue("story.welcome", key, args={"user": 42})
    stage.say(f"the application enqueues story.welcome with idempotency key {key}: job {first}", job_id=first)
    stage.wait(1)
    again = stage.enqueue("story.welcome", key, args={"user": 42})
    count = stage.one("jobs_with_key", key=key)["n"]
    stage.say(
        f"a retry of the same request enqueues the same key: job {again} again; {count} job holds the key",
        job_id=again,
        jobs=count,
    )
    stage.promote()
    (lease,) = stage.claim("worker-1")
    stage.wait(1)
    accepted = stage.complete(first, lease["lease_token"])
    held = stage.one("key", key=key)
    stage.say(
        f"worker-1 runs job {first} (token {lease['lease_token']}) and completes it: "
        f"{'accepted' if accepted else 'refused'}; the key is kept until "
        f"{day(held['expires_at'])} {hms(held['expires_at'])} (retention {held['retention'].days} days)",
        accepted=accepted,
        key_expires_at=stamp(held["expires_at"]),
    )
    stage.wait(60)
    late = stage.enqueue("story.welcome", key, args={"user": 42})
    count_after = stage.one("jobs_with_key", key=key)["n"]
    job = stage.job(late)
    stage.say(
        f"a minute later the request arrives once more: job {late}, which is {job['state']}; "
        f"still {count_after} job with this key, run {job['attempt']} time",
        job_id=late,
        state=job["state"],
        jobs=count_after,
    )
    stage.fact(job_id=first, key=key)
    stage.check("the repeated key returned the same job while it waited", again == first and count == 1)
    stage.check(
        "and after it completed: no second job, no second run",
        late == first and count_after == 1 and job["state"] == "completed" and job["attempt"] == 1,
    )
