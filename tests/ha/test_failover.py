"""High availability: a Patroni cluster loses its primary mid-drain, and later switches over under load.

Three PostgreSQL 15 nodes under Patroni (etcd as the store), synchronous
replication. Workers, scanners, the producer, the probe's bookkeeping and the
dashboard all connect through one multi-host DSN with
target_session_attrs=read-write, so after a failover they find the new
primary by themselves; nothing is restarted by the test. The checker then
counts acknowledged, lost, unexpected and duplicate effects, and the test
shows that LISTEN, the scanners' shard leases and the metrics endpoint came
back on the new primary.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgsched.db import schema
from tests.chaos.checker import Report
from tests.chaos.cluster import free_port
from tests.chaos.conftest import Env, Producer, wait_until
from tests.chaos.probe import SCHEMA
from tests.chaos.procs import Proc
from tests.ha.cluster import HACluster, Node, missing

TEMPLATE = "ha_template"
POLL = 5.0  # workers' poll interval: a pickup well under it was woken by NOTIFY


class _Target:
    """What tests.chaos.conftest.Env needs of a cluster, answered with the multi-host DSN."""

    def __init__(self, ha: HACluster) -> None:
        self.ha = ha

    def dsn(self, dbname: str = "postgres") -> str:
        return self.ha.multi_dsn(dbname)

    def tcp_dsn(self, dbname: str = "postgres", port: int | None = None) -> str:
        return self.ha.multi_dsn(dbname)

    def log_tail(self, lines: int = 20) -> str:
        return self.ha.log_tails(lines)


@pytest.fixture(scope="module")
def ha() -> Iterator[HACluster]:
    why = missing()
    if why is not None:
        pytest.skip(why)
    c = HACluster()
    try:
        c.start()
        with psycopg.connect(c.multi_dsn(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {TEMPLATE}")
        schema.migrate(c.multi_dsn(TEMPLATE))
        with psycopg.connect(c.multi_dsn(TEMPLATE), autocommit=True) as conn:
            conn.execute(SCHEMA)
        yield c
    except Exception:
        print(c.log_tails(30))
        raise
    finally:
        c.destroy()


_counter = iter(range(1, 1000))


@pytest.fixture
def env(ha: HACluster, tmp_path: Path) -> Iterator[Env]:
    ha.wait_healthy(180)
    name = f"ha_{next(_counter)}"
    with psycopg.connect(ha.multi_dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
    e = Env(_Target(ha), name, tmp_path)  # type: ignore[arg-type]
    try:
        yield e
    except BaseException:
        e.dump_logs()
        raise
    finally:
        e.close()


@dataclass
class World:
    workers: list[Proc]
    scanners: list[Proc]
    dashboard: Proc
    metrics_url: str


def start_world(env: Env, workers: int = 2, scanners: int = 2) -> World:
    port = free_port()
    dashboard = Proc(
        "dashboard",
        ["--dsn", env.dsn, "dashboard", "--port", str(port), "--read-only"],
        env.log_dir,
        env.env,
    )
    env.procs.append(dashboard.start())
    w = [env.worker(f"ha-w{i}", concurrency=4, lease=3.0, poll=POLL) for i in range(workers)]
    s = [env.scanner(f"ha-s{i}", lease=3.0) for i in range(scanners)]
    env.wait_workers(*(p.name for p in w), timeout=60)
    world = World(w, s, dashboard, f"http://127.0.0.1:{port}/metrics")
    wait_until(lambda: scrape_up(world), 60, "the dashboard's /metrics reading the database", env)
    wait_until(lambda: leases(env) and all(r[1] for r in leases(env)), 60, "scanners owning every shard", env)
    return world


def scrape_up(world: World) -> bool:
    try:
        with urllib.request.urlopen(world.metrics_url, timeout=5) as resp:
            return "pgsched_database_up 1.0" in resp.read().decode()
    except OSError:
        return False


def leases(env: Env) -> list[tuple[int, bool, int]]:
    """(shard, owned and unexpired, epoch) per shard."""
    try:
        with psycopg.connect(env.dsn, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT shard, owner IS NOT NULL AND expires_at > now(), epoch FROM pgsched.shard_leases ORDER BY 1"
            ).fetchall()
    except psycopg.OperationalError:
        return []
    return [(int(a), bool(b), int(c)) for a, b, c in rows]


def completed_since(env: Env, epoch_s: float) -> float | None:
    """Wall-clock time of the first job finished after epoch_s (the database's clock, same machine)."""
    value = env.scalar(
        "SELECT extract(epoch FROM min(finished_at)) FROM pgsched.job_history"
        " WHERE finished_at > to_timestamp(%s) AND state = 'completed'",
        [epoch_s],
    )
    return None if value is None else float(value)


def longest_gap(env: Env, since: float, until: float) -> float:
    """The longest time without a job completing between since and until (wall clock, in seconds)."""
    value = env.scalar(
        "SELECT max(extract(epoch FROM t - prev)) FROM ("
        "  SELECT t, lag(t) OVER (ORDER BY t) AS prev FROM ("
        "    SELECT finished_at AS t FROM pgsched.job_history"
        "    WHERE state = 'completed' AND finished_at BETWEEN to_timestamp(%s) AND to_timestamp(%s)"
        "    UNION ALL SELECT to_timestamp(%s)) c) g",
        [since, until, since],
    )
    return float(value or 0.0)


def notify_pickups(env: Env, n: int = 3) -> list[float]:
    """Seconds from enqueue to the start of the run, for n single jobs enqueued while the workers are idle."""
    out = []
    for i in range(n):
        (job,) = env.enqueue(1, f"wake-{time.monotonic_ns()}-{i}")
        env.wait_finished([job], 30, "a job enqueued after the failover")
        seconds = env.scalar(
            "SELECT extract(epoch FROM min(r.started_at) - min(h.created_at)) FROM chaos.runs r"
            " JOIN pgsched.job_history h ON h.id = r.job_id WHERE r.job_id = %s",
            [job],
        )
        out.append(float(seconds))
    return out


def assert_recovered(env: Env, world: World, before: dict[int, int], *, lapsed: bool) -> dict[str, Any]:
    """Everything came back on the new primary by itself: leases, LISTEN, metrics, the same processes.

    lapsed: the outage outlasted the scanners' leases, so every shard must have been re-acquired under a
    higher epoch (after a short switchover a lease still valid is renewed under its epoch)."""
    wait_until(
        lambda: (
            (rows := leases(env))
            and all(
                owned and (epoch > before[shard] if lapsed else epoch >= before[shard]) for shard, owned, epoch in rows
            )
        ),
        60,
        "every shard lease re-acquired under a higher epoch" if lapsed else "every shard lease owned",
        env,
    )
    wait_until(lambda: scrape_up(world), 60, "the dashboard's /metrics reading the new primary", env)
    # Idle workers: a pickup well under the poll interval was woken by NOTIFY on the new primary.
    wait_until(
        lambda: env.scalar("SELECT count(*) FROM pgsched.jobs WHERE state IN ('available', 'running')") == 0,
        60,
        "the workers idle",
        env,
    )
    pickups = notify_pickups(env)
    assert max(pickups) < POLL / 2, f"pickups after failover {pickups} s: LISTEN was not re-established"
    stuck = env.scalar(
        "SELECT count(*) FROM pgsched.shard_leases WHERE owner IS NULL OR expires_at < now() - interval '5 seconds'"
    )
    assert stuck == 0, "a shard lease was left expired or unowned"
    for proc in [*world.workers, *world.scanners, world.dashboard]:
        assert proc.alive(), f"{proc.name} died"
        assert proc.starts == 1, f"{proc.name} had to be restarted"
    return {
        "NOTIFY pickups after (s)": " ".join(f"{p:.2f}" for p in pickups),
        "shard epochs before -> after": f"{sum(before.values())} -> {sum(e for _, _, e in leases(env))}",
        "metrics after": "database_up 1",
    }


def line(kind: str, report: Report, seconds: float) -> str:
    what = "failover" if kind == "ha" else "switchover"
    return (
        f"{kind}: acknowledged {report.enqueued}, lost {len(report.lost)},"
        f" duplicate effects {len(report.duplicate_effects)}, {what} {seconds:.1f} s"
    )


def run_failover(env: Env, ha: HACluster, backlog: int, rate: float) -> Report:
    world = start_world(env)
    acked = env.enqueue(backlog, "backlog", sleep=0.02)
    producer = Producer(env.dsn, "live", rate, sleep=0.02).start()
    wait_until(lambda: env.finished(acked) >= backlog // 3, 180, "a third of the backlog drained", env)
    before = {shard: epoch for shard, _, epoch in leases(env)}
    old = ha.primary()
    assert old is not None
    t0 = time.monotonic()
    old.kill()
    killed = time.time()  # the agent and every postgres process of the old primary are gone
    new = ha.wait_primary(120, other_than=old)
    promoted_s = time.monotonic() - t0
    first = wait_until(lambda: completed_since(env, killed), 120, "a job completed on the new primary", env)
    failover_s = first - killed
    old.start()  # back as a replica (pg_rewind, else a fresh copy)
    ha.wait_healthy(240)
    wait_until(lambda: completed_since(env, time.time() - 1), 60, "jobs still completing", env)
    acked += producer.stop()
    env.wait_finished(acked, 300, "every acknowledged job finished")
    notes = assert_recovered(env, world, before, lapsed=True)
    role = {m["name"]: m["role"] for m in ha.members()}
    notes.update(
        {
            "killed primary": f"{old.name} (now {role.get(old.name)})",
            "new primary": new.name,
            "new primary seen after (s)": f"{promoted_s:.1f}",
            "producer retries": producer.retries,
        }
    )
    report = env.check("ha: SIGKILL of the primary mid-drain", acked, recovery_s=failover_s, notes=notes)
    print(line("ha", report, failover_s), flush=True)
    assert report.ok
    assert not report.still_leased
    assert role.get(old.name) in ("replica", "sync_standby")
    return report


def run_switchover(env: Env, ha: HACluster, backlog: int, rate: float) -> Report:
    world = start_world(env)
    acked = env.enqueue(backlog, "backlog", sleep=0.02)
    producer = Producer(env.dsn, "live", rate, sleep=0.02).start()
    wait_until(lambda: env.finished(acked) >= backlog // 3, 180, "a third of the backlog drained", env)
    before = {shard: epoch for shard, _, epoch in leases(env)}
    old = ha.primary()
    assert old is not None
    started = time.time()
    result = ha.switchover()
    assert result.returncode == 0, result.stdout + result.stderr
    new: Node = ha.wait_primary(120, other_than=old)
    settled = time.time() + 5
    wait_until(lambda: completed_since(env, settled), 120, "jobs completing on the new primary", env)
    # No job can complete while neither node takes writes: the longest pause in completions is the outage.
    switch_s = longest_gap(env, started, settled)
    ha.wait_healthy(240)
    acked += producer.stop()
    env.wait_finished(acked, 300, "every acknowledged job finished")
    notes = assert_recovered(env, world, before, lapsed=False)
    notes.update({"old primary": old.name, "new primary": new.name, "producer retries": producer.retries})
    report = env.check("ha: planned switchover under load", acked, recovery_s=switch_s, notes=notes)
    print(line("ha switchover", report, switch_s), flush=True)
    assert report.ok
    assert not report.still_leased
    return report


@pytest.mark.chaos
@pytest.mark.timeout(900)
def test_failover(env: Env, ha: HACluster) -> None:
    run_failover(env, ha, backlog=1500, rate=20)


@pytest.mark.chaos
@pytest.mark.timeout(900)
def test_switchover(env: Env, ha: HACluster) -> None:
    run_switchover(env, ha, backlog=1000, rate=20)


def _stats(env: Env, read_dsn: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "pgsched", "--dsn", env.dsn, "stats", "--json", "--read-dsn", read_dsn],
        capture_output=True,
        text=True,
        env=env.env,
        timeout=60,
        check=True,
    )
    found: dict[str, Any] = json.loads(out.stdout)
    return found


def _available(snap: dict[str, Any]) -> int:
    return sum(int(q["available"]) for q in snap["queues"] if q["queue"] == "chaos")


def _scrape(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return str(resp.read().decode())
    except OSError:
        return ""


@pytest.mark.chaos
@pytest.mark.timeout(600)
def test_read_replica(env: Env, ha: HACluster) -> None:
    """stats and the dashboard (pages, JSON, /metrics) read from a streaming replica and say how stale it is."""
    replica = next(n for n in ha.replicas() if n is not ha.sync_standby())  # asynchronous: replay may pause
    read_dsn = replica.dsn(env.dbname)
    env.enqueue(25, "replica")
    wait_until(lambda: _available(_stats(env, read_dsn)) == 25, 60, "the replica replaying the enqueue", env)
    snap = _stats(env, read_dsn)
    assert snap["replica"]["in_recovery"] is True
    assert 0 <= snap["replica"]["lag_s"] < 5
    primary = ha.primary()
    assert primary is not None
    assert _stats(env, primary.dsn(env.dbname))["replica"] == {
        "in_recovery": False,
        "lag_s": None,
        "replay_age_s": None,
    }

    port = free_port()
    dashboard = Proc(
        "dashboard-read",
        ["--dsn", env.dsn, "dashboard", "--port", str(port), "--read-only", "--read-dsn", read_dsn],
        env.log_dir,
        env.env,
    )
    env.procs.append(dashboard.start())
    metrics = f"http://127.0.0.1:{port}/metrics"
    wait_until(lambda: "pgsched_read_replica 1.0" in _scrape(metrics), 60, "the dashboard reading the replica", env)
    with psycopg.connect(replica.dsn(), autocommit=True) as conn:
        readers = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgsched-dashboard-read'"
        ).fetchone()
        assert readers is not None
        assert readers[0] >= 1, "the dashboard's reads must go to the replica"
        # Stop replay (Patroni resumes a pg_wal_replay_pause() at once, so freeze the startup process that
        # replays WAL; the WAL receiver goes on): the replica falls behind, and every reader says so.
        row = conn.execute("SELECT pid FROM pg_stat_activity WHERE backend_type = 'startup'").fetchone()
        assert row is not None
        startup = int(row[0])
        os.kill(startup, signal.SIGSTOP)
        try:
            env.enqueue(10, "while-paused")
            wait_until(lambda: _stats(env, read_dsn)["replica"]["lag_s"] > 2.0, 60, "the replica's lag growing", env)
            snap = _stats(env, read_dsn)
            assert _available(snap) == 25, "a paused replica still shows the old numbers"
            wait_until(
                lambda: any(
                    line.startswith("pgsched_replica_lag_seconds ") and float(line.split()[1]) > 2.0
                    for line in _scrape(metrics).splitlines()
                ),
                30,
                "/metrics showing the lag",
                env,
            )
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/overview", timeout=5) as resp:
                overview = json.loads(resp.read())
            assert overview["replica"]["in_recovery"] is True
            assert overview["replica"]["lag_s"] > 2.0
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as resp:
                assert "replica behind by" in resp.read().decode()
        finally:
            os.kill(startup, signal.SIGCONT)
    wait_until(lambda: _available(_stats(env, read_dsn)) == 35, 60, "the replica catching up", env)
    assert _stats(env, read_dsn)["replica"]["lag_s"] < 5
