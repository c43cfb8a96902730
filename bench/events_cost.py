"""What status events cost the completion path: claim(100) + complete() loops, jobs/s.

Three schemas side by side on one private PostgreSQL 15 cluster (durable
commits), in interleaved rounds: the schema before status events (``--before
DIR``, a sql/ directory), this checkout with ``pgsched.config.events`` off,
and with it on. Each round drains the same backlog with ``--clients``
concurrent loops of ``SELECT ... FROM pgsched.claim(..., 100, ...)`` and one
``pgsched.complete(ids, tokens)`` per batch; reports jobs/s (wall clock)
and the CPU time the server's backends spent per job (from
/proc/PID/schedstat), which a busy machine disturbs far less.

    .venv/bin/python -m bench.events_cost --before /path/to/old/sql
"""

from __future__ import annotations

import argparse
import re
import statistics
import threading
import time
from pathlib import Path

import psycopg

from bench.harness.postgres import LocalCluster, create_databases

HERE = Path(__file__).resolve().parent.parent / "sql"


def install(dsn: str, sql_dir: Path) -> None:
    names = re.findall(r"^\\ir\s+(\S+)\s*$", (sql_dir / "install.sql").read_text(), flags=re.MULTILINE)
    script = "\n".join((sql_dir / name).read_text() for name in names)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT set_config('pgsched.install_shards', '8', false)")
        with conn.transaction():
            conn.execute(script.encode())


def _cpu_ns(pid: int) -> int:
    """Time the backend spent on a CPU (ns): steadier than wall time on a shared machine."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def round_(dsn: str, jobs: int, clients: int) -> tuple[float, float]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT pgsched.enqueue_many(array_fill('t'::text, ARRAY[%s]), array_fill('{}'::jsonb, ARRAY[%s]))",
            (jobs, jobs),
        )
        conn.execute("VACUUM ANALYZE pgsched.jobs")
    done = [0] * clients
    cpu = [0] * clients

    def loop(i: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            pid = conn.info.backend_pid
            start = _cpu_ns(pid)
            while True:
                rows = conn.execute(
                    "SELECT id, lease_token FROM pgsched.claim(%s, ARRAY['default'], 100, interval '1 minute')",
                    (f"w{i}",),
                ).fetchall()
                if not rows:
                    cpu[i] = _cpu_ns(pid) - start
                    return
                conn.execute(
                    "SELECT count(*) FROM pgsched.complete(%s::bigint[], %s::bigint[])",
                    ([r[0] for r in rows], [r[1] for r in rows]),
                )
                done[i] += len(rows)

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    assert sum(done) == jobs, (sum(done), jobs)
    return jobs / elapsed, sum(cpu) / jobs / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, help="sql/ directory of the schema before status events")
    parser.add_argument("--also", type=Path, nargs="*", default=[], help="more sql/ directories to compare")
    parser.add_argument("--jobs", type=int, default=3000, help="jobs per round")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--rounds", type=int, default=15)
    opts = parser.parse_args()
    variants: dict[str, tuple[Path, str | None]] = {}
    if opts.before:
        variants["before"] = (opts.before, None)
    variants["events off"] = (HERE, "UPDATE pgsched.config SET events = false")
    variants["events on"] = (HERE, None)
    for extra in opts.also:
        variants[extra.name] = (extra, None)
    server = LocalCluster()
    server.start()
    try:
        names = [f"ev{i}" for i in range(len(variants))]
        create_databases(server, names)
        dsns = {}
        for name, (label, (sql_dir, setup)) in zip(names, variants.items(), strict=True):
            dsns[label] = server.dsn(name)
            install(dsns[label], sql_dir)
            if setup:
                with psycopg.connect(dsns[label], autocommit=True) as conn:
                    conn.execute(setup)
        for clients in opts.clients:
            rates: dict[str, list[float]] = {label: [] for label in variants}
            cpus: dict[str, list[float]] = {label: [] for label in variants}
            round_(dsns[next(iter(variants))], opts.jobs // 4, clients)  # warm-up
            for _ in range(opts.rounds):
                for label in variants:
                    rate, cpu = round_(dsns[label], opts.jobs, clients)
                    rates[label].append(rate)
                    cpus[label].append(cpu)
            first = next(iter(variants))
            for label, found in rates.items():
                # Rounds are interleaved, so a round's ratio compares runs made moments apart.
                ratios = [r / b for r, b in zip(found, rates[first], strict=True)]
                print(
                    f"clients={clients} {label:>10}: {statistics.median(found):8.0f} jobs/s"
                    f" (median of {len(found)} rounds of {opts.jobs} jobs)"
                    f"  paired ratio to {first}: median {statistics.median(ratios):.3f}"
                    f" [{min(ratios):.2f}..{max(ratios):.2f}];"
                    f" server CPU {statistics.median(cpus[label]):.1f} us/job"
                    f" ({statistics.median(cpus[label]) / statistics.median(cpus[first]):.3f}x)",
                    flush=True,
                )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
