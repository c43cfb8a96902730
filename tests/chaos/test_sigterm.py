"""Scenario 6: SIGTERM with a grace period (--shutdown-timeout) shorter than the running jobs.

Jobs that finish within the grace period complete; the rest (cooperative
handlers that stop when asked, stubborn ones that do not, and jobs still
waiting for a slot) are handed back at once, without spending a failure;
nothing stays leased after the process exits, and another worker finishes
them all.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.chaos.conftest import Env, wait_until


def run_sigterm(env: Env, *, rounds: int, grace: float) -> None:
    lease = 30.0  # far longer than the test: only the hand-back can free these jobs
    acked: list[int] = []
    totals = {"completed": 0, "handed_back": 0}
    exit_codes: list[int | None] = []
    for round_no in range(rounds):
        # Each round's jobs outrank the ones earlier rounds handed back, so this round's worker takes them.
        first = {"priority": round_no, "sleep_after": 0.05}
        short = env.enqueue(4, f"term{round_no}-short", sleep=grace / 2, **first)
        coop = env.enqueue(4, f"term{round_no}-coop", sleep=60, **first)
        stubborn = env.enqueue(4, f"term{round_no}-stubborn", sleep=60, stubborn=True, **first)
        waiting = env.enqueue(4, f"term{round_no}-waiting", sleep=60, **first)
        ids = short + coop + stubborn + waiting
        acked += ids
        name = f"leaving-{round_no}"
        proc = env.worker(
            name, concurrency=12, lease=lease, extra=("--prefetch", "4", "--shutdown-timeout", str(grace))
        )
        wait_until(
            lambda name=name: env.scalar("SELECT count(*) FROM chaos.runs WHERE worker = %s", [name]) >= 12,
            30,
            "12 handlers running",
            env,
        )
        started = env.scalar("SELECT array_agg(job_id) FROM chaos.runs WHERE worker = %s", [name])
        signalled = time.monotonic()
        proc.signal(signal.SIGTERM)
        code = proc.wait(grace + 15)
        took = time.monotonic() - signalled
        exit_codes.append(code)
        assert code == 0, f"exit code {code}"
        assert took < grace + 5, f"took {took:.1f}s to exit with a {grace}s grace period"
        with env.connect() as conn:
            leased = conn.execute(
                "SELECT count(*) FROM pgsched.jobs WHERE state = 'running' AND leased_by = %s", [name]
            ).fetchone()
            assert leased == (0,), "jobs left leased by a worker that exited"
            done = conn.execute(
                "SELECT id FROM pgsched.job_history WHERE id = ANY(%s) AND state = 'completed'", [ids]
            ).fetchall()
            back = conn.execute(
                "SELECT id, attempt, max_attempts FROM pgsched.jobs WHERE id = ANY(%s) AND state = 'available'", [ids]
            ).fetchall()
        finished = {r[0] for r in done}
        assert {j for j in short if j in started} <= finished, "jobs that finish within the grace period complete"
        assert len(finished) + len(back) == len(ids)
        for job_id, attempt, max_attempts in back:
            # The claim counted an attempt (started or not); handing it back gave that attempt back to the
            # failure budget (max_attempts + 1), so the job keeps every retry it had.
            assert (attempt, max_attempts) == (1, 11), (job_id, attempt, max_attempts)
        totals["completed"] += len(finished)
        totals["handed_back"] += len(back)
        print(
            f"[chaos] SIGTERM #{round_no + 1}: exited {code} after {took:.1f}s (grace {grace}s):"
            f" {len(finished)} completed, {len(back)} handed back"
        )
    env.worker("finisher", concurrency=8, lease=5.0)
    env.wait_finished(acked, 60, "the handed-back jobs finished by another worker")
    report = env.check(
        "6. SIGTERM with a grace period shorter than the jobs",
        acked,
        notes={
            "grace / rounds / exit codes": f"{grace}s / {rounds} / {exit_codes}",
            "completed in grace / handed back": f"{totals['completed']} / {totals['handed_back']}",
        },
    )
    assert report.ok
    assert not report.still_leased


def test_sigterm_quick(env: Env) -> None:
    run_sigterm(env, rounds=1, grace=2.0)


@pytest.mark.chaos
@pytest.mark.timeout(600)
def test_sigterm(env: Env) -> None:
    run_sigterm(env, rounds=4, grace=3.0)
