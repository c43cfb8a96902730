"""Scenario 1: SIGKILL a worker that holds dozens of leased jobs mid-run.

Every job it held runs again elsewhere once its lease runs out (within the
lease plus one scan, plus the poll interval), with attempt + 1 and a new
token; nothing is lost and no effect happens twice.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass

import pytest

from tests.chaos.conftest import Env, wait_until


@dataclass
class Kill:
    jobs: int
    victim_concurrency: int
    lease: float
    kills: int
    sleep: float


def held_by(env: Env, worker: str) -> list[int]:
    with env.connect() as conn:
        rows = conn.execute(
            "SELECT id FROM pgsched.jobs WHERE state = 'running' AND leased_by = %s ORDER BY id", [worker]
        ).fetchall()
    return [r[0] for r in rows]


def run_kill(env: Env, cfg: Kill, *, dsn: str | None = None, extra: tuple[str, ...] = (), label: str = "") -> None:
    poll = 0.5
    ids = env.enqueue(cfg.jobs, "kill", sleep=cfg.sleep, sleep_after=0.05)
    env.scanner("scanner-1", dsn=dsn, lease=3.0, extra=extra)
    victim = env.worker(
        "victim", dsn=dsn, concurrency=cfg.victim_concurrency, lease=cfg.lease, poll=poll, extra=extra, start=False
    )
    recoveries: list[float] = []
    killed_holding: list[int] = []
    others_started = False
    for round_no in range(cfg.kills):
        victim.start()
        need = min(cfg.victim_concurrency, 24)
        wait_until(lambda need=need: len(held_by(env, "victim")) >= need, 60, f"victim holding {need} jobs", env)
        if not others_started:
            env.worker("survivor-1", dsn=dsn, concurrency=8, lease=cfg.lease, poll=poll, extra=extra)
            env.worker("survivor-2", dsn=dsn, concurrency=8, lease=cfg.lease, poll=poll, extra=extra)
            others_started = True
        time.sleep(0.3)  # mid-run
        held = held_by(env, "victim")
        killed_at = env.scalar("SELECT clock_timestamp()")
        victim.signal(signal.SIGKILL)
        victim.wait(10)
        killed_holding += held

        # Recovery: every job it held is handed back by lease expiry (then re-run by a survivor).
        def rescued(held: list[int] = held, killed_at: object = killed_at) -> float | None:
            row = env.scalar(
                "SELECT CASE WHEN count(DISTINCT job_id) = %s THEN extract(epoch FROM max(at) - %s) END"
                " FROM pgsched.job_events WHERE job_id = ANY(%s) AND kind = 'lease_expired' AND worker = 'victim'",
                [len(held), killed_at, held],
            )
            return None if row is None else max(0.001, float(row))

        recovery = wait_until(rescued, 120, "the victim's jobs handed back", env)
        recoveries.append(float(recovery))
        print(f"[chaos] kill #{round_no + 1}: victim held {len(held)} jobs; all handed back after {recovery:.1f}s")
    env.wait_finished(ids, 300, "the whole backlog")
    report = env.check(
        f"1. SIGKILL a worker holding leased jobs{label}",
        ids,
        recovery_s=max(recoveries),
        notes={
            "kills / jobs held at the kills": f"{cfg.kills} / {len(killed_holding)}",
            "recovery = kill -> all handed back; bound": f"lease + scan + 1s = {cfg.lease + 2.0:.1f}s",
        },
    )
    assert report.ok, report.table()
    assert len(killed_holding) >= min(cfg.victim_concurrency, 24)
    # Each killed job ran again, with attempt 2 or more, in a later run.
    reruns = env.scalar(
        "SELECT count(DISTINCT job_id) FROM chaos.runs WHERE job_id = ANY(%s) AND attempt >= 2", [killed_holding]
    )
    assert reruns == len(set(killed_holding))
    assert max(recoveries) <= cfg.lease + 2.0, recoveries
    assert not report.still_leased


def test_sigkill_quick(env: Env) -> None:
    run_kill(env, Kill(jobs=100, victim_concurrency=24, lease=2.0, kills=1, sleep=1.0))


@pytest.mark.chaos
@pytest.mark.timeout(600)
def test_sigkill(env: Env) -> None:
    run_kill(env, Kill(jobs=3000, victim_concurrency=32, lease=5.0, kills=3, sleep=1.0))
