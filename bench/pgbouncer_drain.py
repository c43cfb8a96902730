"""Many worker processes through PgBouncer (transaction pooling) against max_connections = 50, vs direct.

    .venv/bin/python bench/pgbouncer_drain.py [--jobs 3000] [--processes 40] [--direct-processes 8]

A private server (tests/chaos/cluster.py, max_connections = 50) and a
PgBouncer in front of it (tests/chaos/test_pgbouncer.py, default_pool_size
= 40). Each run enqueues --jobs probe jobs (tests/chaos/probe.py: a fenced
effect per job), starts the worker processes with --burst (each exits once
no due work is left), and times the drain. The checker then counts lost,
unexpected and duplicate effects, and the worker logs are searched for
errors. Through PgBouncer the workers run with --no-listen --no-prepare;
direct, only as many processes as fit under max_connections (each holds
its claim, heartbeat, completer, listener and vacuum connections, and one
per concurrent job for the probe's bookkeeping).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pgsched.db import schema
from tests.chaos.checker import check
from tests.chaos.cluster import Cluster, wait_ready
from tests.chaos.conftest import Env
from tests.chaos.probe import SCHEMA
from tests.chaos.test_pgbouncer import PgBouncer, _pgbouncer_binary

ERRORS = ("Traceback", "ERROR", "too many clients", "FATAL")


def peak_connections(dsn: str, stop: threading.Event, out: list[int]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.wait(0.2):
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'").fetchone()
            out.append(int(row[0]) if row else 0)


def drain(
    cluster: Cluster, db: str, log_dir: Path, label: str, dsn: str, processes: int, jobs: int, flags: tuple[str, ...]
) -> dict[str, object]:
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {db} TEMPLATE bench_template")
    env = Env(cluster, db, log_dir)
    env.env["CHAOS_PROBE_DSN"] = dsn
    if "--no-prepare" in flags:
        env.env["CHAOS_PROBE_NO_PREPARE"] = "1"
    acked = env.enqueue(jobs, label)
    stop = threading.Event()
    samples: list[int] = []
    sampler = threading.Thread(target=peak_connections, args=(cluster.dsn(db), stop, samples), daemon=True)
    sampler.start()
    started = time.monotonic()
    procs = []
    try:
        for i in range(processes):
            procs.append(
                env.worker(f"{label}-{i}", dsn=dsn, concurrency=1, lease=10.0, poll=0.2, extra=("--burst", *flags))
            )
        deadline = time.monotonic() + 600
        while env.finished(acked) < len(acked) and time.monotonic() < deadline:
            time.sleep(0.2)
        seconds = time.monotonic() - started
    finally:
        for proc in procs:
            proc.stop(30)
        stop.set()
        sampler.join(5)
    report = check(cluster.dsn(db), label, acked)
    errors = sum(proc.text().count(word) for proc in procs for word in ERRORS)
    return {
        "mode": label,
        "processes": processes,
        "server conns (peak)": max(samples, default=0),
        "jobs": len(acked),
        "seconds": round(seconds, 1),
        "jobs/s": round(report.completed / seconds, 1),
        "lost": len(report.lost),
        "dup effects": len(report.duplicate_effects),
        "errors in logs": errors,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--processes", type=int, default=40)
    parser.add_argument("--direct-processes", type=int, default=6)
    args = parser.parse_args()
    binary = _pgbouncer_binary()
    if binary is None:
        print("PgBouncer is not installed (apt-get install pgbouncer)")
        return 1
    cluster = Cluster()
    with open(cluster.data / "postgresql.auto.conf", "a") as conf:
        conf.write("max_connections = 50\nsuperuser_reserved_connections = 3\n")
    root = Path(tempfile.mkdtemp(prefix="pgsched-bouncer-"))
    root.chmod(0o755)
    logs = Path(tempfile.mkdtemp(prefix="pgsched-bench-logs-"))
    bouncer: PgBouncer | None = None
    rows = []
    try:
        cluster.start()
        wait_ready(cluster.dsn())
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE bench_template")
        schema.migrate(cluster.dsn("bench_template"))
        with psycopg.connect(cluster.dsn("bench_template"), autocommit=True) as conn:
            conn.execute(SCHEMA)
        # Direct first: a pooler keeps its server connections open after its clients leave.
        rows.append(
            drain(
                cluster,
                "bench_direct",
                logs,
                "direct",
                cluster.tcp_dsn("bench_direct"),
                args.direct_processes,
                args.jobs,
                (),
            )
        )
        bouncer = PgBouncer(binary, cluster, root)
        wait_ready(bouncer.dsn("postgres"), timeout=20)
        for n in (args.direct_processes, args.processes):  # the pooler's cost, then many processes
            rows.append(
                drain(
                    cluster,
                    f"bench_bouncer_{n}",
                    logs,
                    f"pgbouncer-{n}",
                    bouncer.dsn(f"bench_bouncer_{n}"),
                    n,
                    args.jobs,
                    ("--no-listen", "--no-prepare"),
                )
            )
    finally:
        if bouncer is not None:
            bouncer.close()
        cluster.destroy()
        shutil.rmtree(root, ignore_errors=True)
    keys = list(rows[0]) if rows else []
    print("| " + " | ".join(keys) + " |")
    print("|" + "|".join("---" for _ in keys) + "|")
    for row in rows:
        print("| " + " | ".join(str(row[k]) for k in keys) + " |")
    ok = all(r["lost"] == 0 and r["dup effects"] == 0 and r["errors in logs"] == 0 for r in rows)
    if ok:
        shutil.rmtree(logs, ignore_errors=True)
    else:
        print(f"(worker logs: {logs})")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
