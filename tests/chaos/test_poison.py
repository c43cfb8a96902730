"""Scenario 5: a poison job that kills its own process on every attempt.

A supervisor restarts the killed workers. Each crash costs the job one
attempt (its lease expires); after max_attempts it is dead, with every
attempt on record (runs, claim and lease-expiry events), and other jobs keep
flowing meanwhile.
"""

from __future__ import annotations

import time

import pytest

from tests.chaos.conftest import Env, Producer
from tests.chaos.procs import Supervisor


def run_poison(env: Env, *, poisons: int, max_attempts: int, lease: float) -> None:
    env.scanner("scanner-1", lease=3.0)
    workers = [env.worker(f"w{i}", concurrency=3, lease=lease, poll=0.5) for i in range(2)]
    supervisor = Supervisor(workers).start()
    env.closers.append(supervisor.close)
    producer = Producer(env.dsn, "flow", rate=10, sleep=0.1).start()
    env.closers.append(producer.stop)
    time.sleep(1.0)
    poison = env.enqueue(poisons, "poison", max_attempts=max_attempts, crash=1000)
    began = env.scalar("SELECT clock_timestamp()")
    env.wait_finished(poison, max_attempts * (lease + 3) * 2 + 30, "poison jobs dead")
    ended = env.scalar("SELECT clock_timestamp()")
    flowed = env.scalar(
        "SELECT count(*) FROM pgsched.job_history WHERE state = 'completed' AND finished_at BETWEEN %s AND %s",
        [began, ended],
    )
    acked = producer.stop()
    supervisor.close()
    env.wait_finished(acked, 60, "the other jobs")
    report = env.check(
        "5. poison job killing its process every attempt",
        acked + poison,
        expect={p: "dead" for p in poison},
        notes={
            "poison jobs x max_attempts": f"{poisons} x {max_attempts}",
            "worker restarts by the supervisor": supervisor.restarts,
            "other jobs completed meanwhile": flowed,
        },
    )
    assert report.ok
    with env.connect() as conn:
        for job_id in poison:
            runs = conn.execute(
                "SELECT attempt FROM chaos.runs WHERE job_id = %s ORDER BY attempt", [job_id]
            ).fetchall()
            # Every run is recorded; a run can be missing only when another poison job on the same worker
            # crashed it first (the attempt was claimed, and its claim and expiry are in the events).
            attempts = [r[0] for r in runs]
            assert attempts == sorted(set(attempts)), attempts
            assert set(attempts) <= set(range(1, max_attempts + 1)), attempts
            kinds = conn.execute(
                "SELECT kind, count(*) FROM pgsched.job_timeline WHERE job_id = %s GROUP BY kind", [job_id]
            ).fetchall()
            assert dict(kinds) == {"claimed": max_attempts, "lease_expired": max_attempts, "dead": 1}
            error = conn.execute("SELECT error FROM pgsched.job_history WHERE id = %s", [job_id]).fetchone()
            assert error is not None
            assert f"after attempt {max_attempts} of {max_attempts}" in error[0]
    assert supervisor.restarts >= max_attempts
    assert flowed > 0, "other jobs must keep completing while the poison job crashes workers"


def test_poison_quick(env: Env) -> None:
    run_poison(env, poisons=1, max_attempts=2, lease=1.5)


@pytest.mark.chaos
@pytest.mark.timeout(600)
def test_poison(env: Env) -> None:
    run_poison(env, poisons=3, max_attempts=5, lease=3.0)
