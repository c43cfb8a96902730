"""Scenario 2: SIGSTOP a worker past its lease, let others finish its jobs, then SIGCONT.

On waking, the paused worker's heartbeat finds its leases gone and tells its
handlers so; completions it still sends are refused by the token fence, and
so is every effect its handlers try. Each job is completed once, by the
worker that took it over, with one effect.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.chaos.conftest import Env, wait_until


def run_pause(env: Env, *, rounds: int, lease: float) -> None:
    acked: list[int] = []
    scanner = env.scanner("scanner-1", lease=3.0)
    paused = env.worker("paused", concurrency=16, lease=lease, extra=("--prefetch", "0"), start=False)
    other = env.worker("other", concurrency=8, lease=lease, start=False)
    totals = {"told": 0, "refused_completions": 0, "discarded": 0, "stale_effects": 0}
    pause_s = 0.0
    for round_no in range(rounds):
        # 8 long runs (still going when the worker wakes: the heartbeat must tell them), and 8 short ones
        # (finished while it slept: their completions race the heartbeat and must be refused or discarded).
        # All are stubborn: they ignore cancellation and try their effect anyway. The long ones' clock runs on
        # while the process is stopped, and the pause lasts as long as the other worker takes to start and
        # finish all 16 (seconds on a loaded machine): 20 s beyond the minimal pause keep them running past it.
        long_ids = env.enqueue(
            8, f"pause{round_no}-long", sleep=2 * lease + 20, sleep_after=0.1, stubborn=True, ignore_stale=True
        )
        short_ids = env.enqueue(
            8, f"pause{round_no}-short", sleep=lease, sleep_after=0.1, stubborn=True, ignore_stale=True
        )
        ids = long_ids + short_ids
        acked += ids
        if not paused.alive():
            paused.start()
        wait_until(
            lambda ids=ids: (
                env.scalar("SELECT count(*) FROM chaos.runs WHERE job_id = ANY(%s) AND worker = 'paused'", [ids]) == 16
            ),
            30,
            "the paused worker running all 16 jobs",
            env,
        )
        paused.signal(signal.SIGSTOP)
        stopped = time.monotonic()
        if not other.alive():
            other.start()
        env.wait_finished(ids, 60, "the other worker finishing the paused worker's jobs")
        # Stay paused for at least twice the lease.
        time.sleep(max(0.0, 2 * lease - (time.monotonic() - stopped)))
        pause_s = max(pause_s, time.monotonic() - stopped)
        before = paused.text()
        paused.signal(signal.SIGCONT)
        wait_until(
            lambda ids=ids: (
                env.scalar(
                    "SELECT count(*) FROM chaos.runs"
                    " WHERE job_id = ANY(%s) AND worker = 'paused' AND ended_at IS NOT NULL",
                    [ids],
                )
                == 16
            ),
            60,
            "the paused worker's handlers ending",
            env,
        )
        # Its completer writes what they returned: each of the 16 is refused by the database or discarded.
        wait_until(
            lambda before=before: (
                paused.text()[len(before) :].count("rejected, the lease had moved on")
                + paused.text()[len(before) :].count("finished after its lease was lost; result discarded")
                >= 16
            ),
            30,
            "the paused worker's 16 stale outcomes refused or discarded",
            env,
        )
        log = paused.text()[len(before) :]
        told = env.scalar(
            "SELECT count(*) FROM chaos.runs WHERE job_id = ANY(%s) AND worker = 'paused' AND lease_lost IS NOT NULL",
            [long_ids],
        )
        totals["told"] += told
        totals["refused_completions"] += log.count("rejected, the lease had moved on")
        totals["discarded"] += log.count("finished after its lease was lost; result discarded")
        totals["stale_effects"] += env.scalar(
            "SELECT count(*) FROM chaos.runs WHERE job_id = ANY(%s) AND worker = 'paused' AND effect = 'stale'",
            [ids],
        )
        assert told == 8, f"long handlers told their lease was lost: {told} of 8"
        assert "lease lost; telling its handler to stop" in log
        # Every job was completed by the other worker, under its own token.
        wrong = env.scalar(
            "SELECT count(*) FROM pgsched.job_history"
            " WHERE id = ANY(%s) AND (state <> 'completed' OR leased_by <> 'other')",
            [ids],
        )
        assert wrong == 0
        assert paused.alive(), "the paused worker must keep running"
        other.stop()  # the next round's jobs must all go to the worker that is paused next
    report = env.check(
        "2. SIGSTOP a worker past its lease, then SIGCONT",
        acked,
        notes={
            "pauses / longest pause": f"{rounds} / {pause_s:.1f}s (lease {lease:.0f}s)",
            "handlers told lease lost (long runs)": f"{totals['told']} of {8 * rounds}",
            "stale completions refused by the db": totals["refused_completions"],
            "outcomes discarded by the worker": totals["discarded"],
            "stale effects refused": totals["stale_effects"],
        },
    )
    assert report.ok
    assert totals["stale_effects"] == 16 * rounds, "every effect the paused worker tried must be refused"
    assert totals["refused_completions"] + totals["discarded"] == 16 * rounds
    assert scanner.alive()


def test_sigstop_quick(env: Env) -> None:
    """Slow (~25 s): a worker frozen by SIGSTOP past its real lease, then thawed; the lease must run out on
    the wall clock, since the frozen process is the thing under test."""
    run_pause(env, rounds=1, lease=2.0)


@pytest.mark.chaos
@pytest.mark.timeout(600)
def test_sigstop(env: Env) -> None:
    run_pause(env, rounds=4, lease=3.0)
