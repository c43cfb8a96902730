"""Scenario 3: cut a worker's connections, by pg_terminate_backend, by resetting them at a proxy, and by a
partition (the proxy holds all traffic, so nothing errors: the half-open case).

The worker reconnects with backoff and keeps working without a restart; its
jobs are rescued by lease expiry while it is cut off; after the partition
heals its stale heartbeats and completions are refused, and its handlers
learn they lost their lease (during the partition already: a heartbeat that
hangs must not keep them believing they hold it).
"""

from __future__ import annotations

import time

import pytest

from tests.chaos.conftest import Env, Producer, wait_until

APP = "chaos-cut"


def completions_by(env: Env, worker: str, since: object) -> int:
    return int(
        env.scalar("SELECT count(*) FROM pgsched.job_history WHERE leased_by = %s AND started_at > %s", [worker, since])
    )


def told_since(env: Env, since: object) -> int:
    """Runs of the cut worker whose handler saw ctx.lease_lost after `since` (db time)."""
    return int(env.scalar("SELECT count(*) FROM chaos.runs WHERE worker = 'cut' AND lease_lost > %s", [since]))


def back_to_work(env: Env, since: object, timeout: float = 30.0) -> float:
    """Seconds from `since` (db time) until the cut worker completes a job it claimed afterwards."""
    wait_until(lambda: completions_by(env, "cut", since) > 0, timeout, "the cut worker completing work again", env)
    return float(
        env.scalar(
            "SELECT extract(epoch FROM min(finished_at) - %s) FROM pgsched.job_history"
            " WHERE leased_by = 'cut' AND started_at > %s",
            [since, since],
        )
    )


def run_cuts(env: Env, *, terminations: int, resets: int, partitions: int, partition_s: float, lease: float) -> None:
    proxy = env.proxy()
    producer = Producer(env.dsn, "cut", rate=8, sleep=0.4, sleep_after=0.1).start()
    env.closers.append(producer.stop)
    env.scanner("scanner-1", lease=3.0)
    cut = env.worker("cut", dsn=env.tcp_dsn(proxy.port, APP), concurrency=4, lease=lease, poll=0.5)
    env.worker("other", concurrency=4, lease=lease, poll=0.5, extra=("--prefetch", "0"))
    env.wait_workers("cut", "other")
    recover: list[float] = []
    since = env.scalar("SELECT clock_timestamp()")
    back_to_work(env, since)

    for _ in range(terminations):
        # Its connections back from the last cut first (reconnects back off; a loaded machine is slower).
        wait_until(
            lambda: env.scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [APP]) >= 3,
            30,
            "the cut worker's connections open",
            env,
        )
        since = env.scalar("SELECT clock_timestamp()")
        killed = env.scalar(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = %s", [APP]
        )
        assert killed >= 3, (
            f"expected the worker's connections (claim, completer, heartbeat, listener), terminated {killed}"
        )
        recover.append(back_to_work(env, since))
        time.sleep(0.5)

    for _ in range(resets):
        wait_until(lambda: proxy.connections >= 3, 30, "the cut worker's connections open through the proxy", env)
        since = env.scalar("SELECT clock_timestamp()")
        # claim, heartbeat and listener at least (the completer may be between connections)
        assert proxy.cut() >= 3
        recover.append(back_to_work(env, since))
        time.sleep(0.5)

    told_in_partition = 0
    acked_long: list[int] = []
    for i in range(partitions):
        log_before = len(cut.text())
        # Make sure it is running long handlers when the partition starts: they must be told.
        # (8: the other worker takes at most 4, it does not prefetch.) Ten seconds beyond the partition and a
        # lease, so they are still running when the watchdog tells them even on a loaded machine.
        long_ids = env.enqueue(8, f"cut-long{i}", sleep=partition_s + lease + 10, sleep_after=0.1)
        acked_long += long_ids
        wait_until(
            lambda long_ids=long_ids: (
                env.scalar("SELECT count(*) FROM chaos.runs WHERE worker = 'cut' AND job_id = ANY(%s)", [long_ids]) >= 1
            ),
            30,
            "cut running long jobs",
            env,
        )
        held = list(
            env.scalar(
                "SELECT coalesce(array_agg(id), '{}') FROM pgsched.jobs WHERE leased_by = 'cut' AND state = 'running'"
            )
        )
        if i == partitions - 1 and partitions > 1:
            proxy.down()  # the last one also refuses new connections: reconnects must back off and retry
        proxy.hold()
        held_at = env.scalar("SELECT clock_timestamp()")
        time.sleep(partition_s)
        # The jobs it held were rescued and finished elsewhere meanwhile.
        env.wait_finished(held, 60, "jobs of the partitioned worker rescued")
        # Still partitioned: a loaded machine may take a while to run the watchdog and the handlers (the cut
        # worker never hears from the database meanwhile, so only the watchdog can tell them).
        wait_until(
            lambda held_at=held_at: told_since(env, held_at) > 0,
            30,
            "handlers of the partitioned worker told of the lost lease",
            env,
        )
        healed_at = env.scalar("SELECT clock_timestamp()")  # the partition lasts until the heal just below
        told_in_partition += int(
            env.scalar(
                "SELECT count(*) FROM chaos.runs WHERE worker = 'cut' AND lease_lost BETWEEN %s AND %s",
                [held_at, healed_at],
            )
        )
        proxy.heal()
        recover.append(back_to_work(env, env.scalar("SELECT clock_timestamp()"), timeout=40))
        log = cut.text()[log_before:]
        assert cut.alive()
        print(
            f"[chaos] partition {i + 1}: held {len(held)} jobs; after healing: "
            f"{log.count('lease lost; telling its handler')} told, "
            f"{log.count('rejected, the lease had moved on')} stale outcomes refused"
        )

    acked = producer.stop() + acked_long
    env.wait_finished(acked, 90, "the backlog")
    log = cut.text()
    report = env.check(
        "3. connections cut (terminate / reset / partition)",
        acked,
        recovery_s=max(recover),
        notes={
            "terminations / resets / partitions": f"{terminations} / {resets} / {partitions} x {partition_s:.0f}s",
            "back to work after each cut (s)": " ".join(f"{r:.1f}" for r in recover),
            "handlers told during partitions": told_in_partition,
            "stale outcomes refused (log)": log.count("rejected, the lease had moved on"),
            "producer retries": producer.retries,
        },
    )
    assert report.ok
    assert cut.alive(), "the cut worker died"
    assert cut.starts == 1, "the worker must recover without a restart"
    if partitions:
        assert told_in_partition > 0, "handlers must learn of the lost lease while partitioned"


def test_connection_cuts_quick(env: Env) -> None:
    """Slow (~20 s): real connection cuts through a proxy, including a 4 s partition that leases must outlive."""
    run_cuts(env, terminations=1, resets=1, partitions=1, partition_s=4.0, lease=2.0)


@pytest.mark.chaos
@pytest.mark.timeout(600)
def test_connection_cuts(env: Env) -> None:
    run_cuts(env, terminations=4, resets=4, partitions=3, partition_s=8.0, lease=3.0)
