"""What job dependencies cost: completions with and without dependents, and enqueueing a graph.

Claim(100) + complete() loops drain the same number of jobs in each variant,
on one private PostgreSQL 15 cluster (durable commits), in interleaved rounds:

- ``before``        the schema without dependencies (``--before DIR``, a sql/ directory), independent jobs;
- ``no dependents`` this checkout, independent jobs: what every completion now pays (one index probe);
- ``graph``         this checkout, a layered graph (layers of ``--width`` jobs, each depending on
                    ``--fan-in`` jobs of the layer before): each completion drops dependency rows
                    and releases the jobs whose last dependency it was, in its own transaction.

Reports jobs/s (wall clock) and the server backends' CPU time per job (from
/proc/PID/schedstat, steadier on a shared machine), and the time of the
enqueue_many call that wrote the round's jobs (one call for the whole graph).

    .venv/bin/python -m bench.dependencies_cost --before /path/to/old/sql
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import threading
import time
from pathlib import Path

import psycopg

from bench.events_cost import HERE, _cpu_ns, install
from bench.harness.postgres import LocalCluster, create_databases


def graph(jobs: int, width: int, fan_in: int, seed: int) -> list[list[int]]:
    """depends_on per job, as enqueue_many takes them: -n is the n-th (1-based) row of the batch."""
    rng = random.Random(seed)
    deps: list[list[int]] = []
    for i in range(jobs):
        layer = i // width
        if layer == 0:
            deps.append([])
            continue
        previous = range((layer - 1) * width, layer * width)
        deps.append([-(p + 1) for p in sorted(rng.sample(previous, min(fan_in, len(previous))))])
    return deps


def round_(dsn: str, jobs: int, clients: int, deps: list[list[int]] | None) -> tuple[float, float, float]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        started = time.perf_counter()
        if deps is None:
            conn.execute(
                "SELECT pgsched.enqueue_many(array_fill('t'::text, ARRAY[%s]), array_fill('{}'::jsonb, ARRAY[%s]))",
                (jobs, jobs),
            )
        else:
            conn.execute(
                "SELECT count(*) FROM pgsched.enqueue_many(array_fill('t'::text, ARRAY[%s]),"
                " depends_on => ARRAY(SELECT jsonb_array_elements(%s::jsonb)))",
                (jobs, json.dumps(deps)),
            )
        enqueue_s = time.perf_counter() - started
        conn.execute("VACUUM ANALYZE pgsched.jobs")
        if deps is not None:
            conn.execute("VACUUM ANALYZE pgsched.job_dependencies")
    done = [0] * clients
    cpu = [0] * clients

    def loop(i: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("LISTEN pgsched_jobs")
            pid = conn.info.backend_pid
            start = _cpu_ns(pid)
            while True:
                rows = conn.execute(
                    "SELECT id, lease_token FROM pgsched.claim(%s, ARRAY['default'], 100, interval '1 minute')",
                    (f"w{i}",),
                ).fetchall()
                if not rows:
                    # Waiting jobs may still be released by another loop's completion:
                    # wait for its wake-up (or 50 ms) instead of spinning on claims.
                    if conn.execute("SELECT EXISTS (SELECT 1 FROM pgsched.jobs)").fetchone() == (True,):
                        for _ in conn.notifies(timeout=0.05, stop_after=1):
                            pass
                        continue
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
    return jobs / elapsed, sum(cpu) / jobs / 1000, enqueue_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, help="sql/ directory of the schema before dependencies")
    parser.add_argument("--jobs", type=int, default=3000, help="jobs per round")
    parser.add_argument("--width", type=int, default=100, help="jobs per layer of the graph")
    parser.add_argument("--fan-in", type=int, default=2, help="dependencies of each job past the first layer")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--rounds", type=int, default=9)
    opts = parser.parse_args()
    deps = graph(opts.jobs, opts.width, opts.fan_in, seed=7)
    variants: dict[str, tuple[Path, list[list[int]] | None]] = {}
    if opts.before:
        variants["before"] = (opts.before, None)
    variants["no dependents"] = (HERE, None)
    variants["graph"] = (HERE, deps)
    server = LocalCluster()
    server.start()
    try:
        names = [f"dep{i}" for i in range(len(variants))]
        create_databases(server, names)
        dsns = {}
        for name, (label, (sql_dir, _)) in zip(names, variants.items(), strict=True):
            dsns[label] = server.dsn(name)
            install(dsns[label], sql_dir)
        edges = sum(len(d) for d in deps)
        print(f"graph: {opts.jobs} jobs in layers of {opts.width}, {edges} dependencies", flush=True)
        for clients in opts.clients:
            rates: dict[str, list[float]] = {label: [] for label in variants}
            cpus: dict[str, list[float]] = {label: [] for label in variants}
            enqueues: dict[str, list[float]] = {label: [] for label in variants}
            round_(dsns[next(iter(variants))], opts.jobs // 4, clients, None)  # warm-up
            for _ in range(opts.rounds):
                for label, (_, shape) in variants.items():
                    rate, cpu, enqueue_s = round_(dsns[label], opts.jobs, clients, shape)
                    rates[label].append(rate)
                    cpus[label].append(cpu)
                    enqueues[label].append(enqueue_s)
            first = next(iter(variants))
            for label, found in rates.items():
                ratios = [r / b for r, b in zip(found, rates[first], strict=True)]
                print(
                    f"clients={clients} {label:>13}: {statistics.median(found):7.0f} jobs/s"
                    f" (median of {len(found)} rounds of {opts.jobs})"
                    f"  paired ratio to {first}: median {statistics.median(ratios):.3f}"
                    f" [{min(ratios):.2f}..{max(ratios):.2f}];"
                    f" server CPU {statistics.median(cpus[label]):.1f} us/job"
                    f" ({statistics.median(cpus[label]) / statistics.median(cpus[first]):.3f}x);"
                    f" enqueue_many {statistics.median(enqueues[label]) * 1000:.0f} ms",
                    flush=True,
                )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
