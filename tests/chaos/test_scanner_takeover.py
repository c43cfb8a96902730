"""Scenario 8: a scanner is paused while it owns the shard of a schedule that fires every second.

Another scanner takes the shard over once the lease runs out; the paused
one, on waking, has its writes rejected by the epoch fence (PS409 in its
log). Over the whole window every second fires exactly once: one occurrence
record and one job each, none skipped, none doubled. Workers run without
housekeeping, so only scanners promote the occurrences.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from tests.chaos.conftest import Env, wait_until
from tests.chaos.procs import REPO


def owner_of_all(env: Env, name: str) -> bool:
    return bool(
        env.scalar(
            "SELECT count(*) = (SELECT shards FROM pgsched.config) FROM pgsched.shard_leases"
            " WHERE owner = %s AND expires_at > now()",
            [name],
        )
    )


def owns_any(env: Env, name: str) -> bool:
    return bool(env.scalar("SELECT count(*) FROM pgsched.shard_leases WHERE owner = %s AND expires_at > now()", [name]))


def wait_for(predicate: Callable[[], bool], timeout: float) -> bool:
    """Whether predicate() became true within timeout seconds (a deadline, not a sleep)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def run_takeover(env: Env, *, pauses: int, lease: float, every_round: bool) -> None:
    subprocess.run(
        [sys.executable, "-m", "pgsched", "--dsn", env.dsn, "schedules", "add", "tick", "* * * * * *", "chaos.probe",
         "{}", "--queue", "chaos", "--concurrency", "allow"],
        check=True, cwd=REPO, env=env.env, capture_output=True,
    )  # fmt: skip
    proxy = env.proxy()
    # Statement texts go over the wire on every call (no prepared statements), so the proxy
    # can freeze the old owner exactly as it sends a fenced write.
    old = env.scanner("old-owner", dsn=env.tcp_dsn(proxy.port), lease=lease, extra=("--no-prepare",))
    wait_until(lambda: owner_of_all(env, "old-owner"), 30, "old-owner holding every shard", env)
    env.worker("w1", concurrency=4, lease=5.0, poll=0.5, extra=("--no-housekeeping",))
    new = env.scanner("new-owner", lease=lease, start=False)
    window_start = env.scalar("SELECT date_trunc('second', clock_timestamp()) + interval '2 seconds'")
    rejected_rounds = 0
    for round_no in range(pauses):
        time.sleep(2.0)
        # After a takeover the two scanners split the shards again; the old owner needs one to
        # have a fenced write to send.
        if not wait_for(lambda: owns_any(env, "old-owner"), lease * 4 + 10):
            print(f"[chaos] pause {round_no + 1}: the old owner holds no shard again; stopping here")
            break
        before = len(old.text())
        # Freeze it mid-stride: its next fenced write (a shard scan, due every second for the
        # schedule) waits at the proxy, then the process stops.
        proxy.hold_on(b"pgsched.scan_shard")
        wait_until(lambda: proxy.held_requests > 0, 30, "the old owner sending a shard scan", env)
        old.signal(signal.SIGSTOP)
        if not new.alive():
            new.start()
        # The lease lapses and the other scanner takes every shard of the paused one.
        wait_until(lambda: owner_of_all(env, "new-owner"), lease * 4 + 10, "new-owner taking over", env)
        proxy.heal()  # the scan it had sent arrives now, under its old epoch
        old.signal(signal.SIGCONT)
        # The fence answers that scan with PS409, which the old owner logs; give a busy machine time.
        wait_for(lambda start=before: "PS409" in old.text()[start:], 30)
        log = old.text()[before:]
        if "PS409" in log:
            rejected_rounds += 1
        print(f"[chaos] pause {round_no + 1}: old owner's writes rejected: {log.count('PS409')} (PS409)")
        if rejected_rounds and not every_round:
            break
    time.sleep(2.0)
    window_end = env.scalar("SELECT date_trunc('second', clock_timestamp()) - interval '3 seconds'")
    wait_until(
        lambda: (
            env.scalar("SELECT count(*) FROM pgsched.jobs WHERE schedule = 'tick' AND run_at <= %s", [window_end]) == 0
        ),
        30,
        "every occurrence in the window run",
        env,
    )
    with env.connect() as conn:
        seconds = conn.execute("SELECT extract(epoch FROM %s - %s)::int + 1", [window_end, window_start]).fetchone()
        assert seconds is not None
        occurrences = conn.execute(
            "SELECT fire_at, count(*), array_agg(decision) FROM pgsched.schedule_occurrences"
            " WHERE schedule = 'tick' AND fire_at BETWEEN %s AND %s GROUP BY fire_at",
            [window_start, window_end],
        ).fetchall()
        jobs = conn.execute(
            "SELECT run_at, count(*), array_agg(state::text), array_agg(id) FROM pgsched.job_history"
            " WHERE schedule = 'tick' AND run_at BETWEEN %s AND %s GROUP BY run_at",
            [window_start, window_end],
        ).fetchall()
    doubled = [o for o in occurrences if o[1] != 1] + [j for j in jobs if j[1] != 1]
    not_fired = [o for o in occurrences if o[2][0] not in ("fire", "misfire_fired")]
    not_completed = [j for j in jobs if j[2] != ["completed"]]
    missing = seconds[0] - len(jobs)
    acked = [i for j in jobs for i in j[3]]
    report = env.check(
        "8. scanner takeover while the owner is paused",
        acked,
        notes={
            "window (s) / occurrences / jobs": f"{seconds[0]} / {len(occurrences)} / {len(jobs)}",
            "seconds skipped / doubled": f"{missing + len(not_fired)} / {len(doubled)}",
            "pauses / with PS409 rejections": f"{round_no + 1} / {rejected_rounds}",
            "old owner: rejected writes (log)": old.text().count("PS409"),
        },
    )
    assert report.ok
    assert not doubled, doubled
    assert not not_fired, not_fired
    assert not not_completed, not_completed
    assert missing == 0, f"{missing} seconds without a job"
    assert len(occurrences) == seconds[0], f"{seconds[0] - len(occurrences)} seconds without an occurrence record"
    assert rejected_rounds >= 1, "the paused scanner's stale writes must be rejected with PS409"
    assert old.alive()
    assert new.alive()


def test_scanner_takeover_quick(env: Env) -> None:
    run_takeover(env, pauses=3, lease=2.0, every_round=False)


@pytest.mark.chaos
@pytest.mark.timeout(600)
def test_scanner_takeover(env: Env) -> None:
    run_takeover(env, pauses=6, lease=3.0, every_round=True)
