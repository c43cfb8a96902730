"""A pinned xmin horizon under steady load: does pgsched keep up while VACUUM can remove nothing?

Three phases of ``--phase-s`` seconds each on a private PostgreSQL 15 cluster
(durable commits, Unix socket only, ``track_functions = pl``):

1. clean: a producer process enqueues ``--rate`` no-op jobs a second
   (``pgsched.enqueue_many`` every 10 ms) while ``pgsched worker`` processes
   (``--workers``, their defaults otherwise: listening, housekeeping and the
   vacuum thread on) run them;
2. pinned: the same, while one more session sits idle in a transaction that
   took an xid (``BEGIN; SELECT pg_current_xact_id();``), as an application
   that wrote and forgot to commit: every row version that dies from then on
   stays, in the tables and in their indexes;
3. released: that session rolls back; the load goes on.

Per phase, from the database's own clock (``pgsched.job_history``): jobs
finished a second, pickup latency p50/p99 (handler start - enqueue, i.e.
``started_at - created_at``) of the jobs enqueued in the phase; sampled every
second: due jobs waiting (depth: the rows of the ring of due jobs) and dead tuples summed over pgsched.jobs'
partitions; from pg_stat_user_functions: mean time per call of claim, start
and complete (nested calls counted too), and from pg_stat_statements (track
= all) the shared buffers the statement in each that finds the jobs reads,
per job finished (steadier than times on a busy machine); from pg_stat_wal: WAL bytes per job
finished (the whole cluster, housekeeping and vacuum included). Recovery: the pickup p50/p99 of
the jobs enqueued from 10 s after the release on, beside the clean phase's; and per phase, the
one-second buckets whose pickup p99 is over twice the clean phase's (how many, and the last), the
clean phase's own count being the noise floor of that test on this machine. Where the
server's time went: the top-level statements (pg_stat_statements) by total time, in ms per
second of the phase, this bench's own depth count among them.

``--checkout DIR`` (repeatable) adds another version of pgsched (a source
tree: its sql/ is installed in a database of its own and its pgsched package
runs the workers); versions run one after another, ``--rounds`` times,
interleaved (A B A B), on the same cluster.

    .venv/bin/python -m bench.pinned_horizon --rate 500 --phase-s 30
    .venv/bin/python -m bench.pinned_horizon --checkout /tmp/pgsched-before --rounds 2
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from bench.harness.postgres import LocalCluster, create_databases

HERE = Path(__file__).resolve().parent.parent
_SPAWN = multiprocessing.get_context("spawn")
PHASES = ("clean", "pinned", "released")
TICK_S = 0.01
RECOVERY_S = 10  # the seconds after the release by which the figures should be clean again
ENQUEUE = (
    "SELECT count(*) FROM pgsched.enqueue_many(array_fill('noop'::text, ARRAY[%s]),"
    " ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(%s::integer, %s::integer) g))"
)
# Due jobs waiting: the rows of pgsched.ready, the ring of due jobs (one per available job), on the server that
# runs them. Counting pgsched.jobs instead reads every dead row version a pinned horizon keeps there, once a
# second: a load of the bench's own (60 ms a call after a minute at 10,000 jobs/s) that grows with the pin.
DEPTH = "SELECT count(*) FROM pgsched.ready"
DEPTH_WITHOUT_RING = "SELECT count(*) FROM pgsched.jobs WHERE state = 'available'"  # a tree from before the ring
DEAD = """
SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables
WHERE relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'pgsched.jobs'::regclass)
"""
# The statements inside the functions that find the jobs (pg_stat_statements.track = all): shared buffers a call.
STATEMENTS = """
SELECT f, sum(calls)::bigint, sum(shared_blks_hit + shared_blks_read)::float8 / nullif(sum(calls), 0)
FROM pg_stat_statements s
JOIN (VALUES ('claim', 'WITH due AS MATERIALIZED'), ('start', 'UPDATE pgsched\\.jobs j\\s+SET started_at'),
             ('complete', 'DELETE FROM pgsched\\.jobs j\\s+WHERE j\\.shard = v_shard'))
     m(f, pattern) ON s.query ~ m.pattern
WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
GROUP BY f
"""
# Where the server's time went in a phase: the statements clients sent (top level), by total time.
TOP = r"""
SELECT regexp_replace(left(s.query, 60), '\s+', ' ', 'g'), sum(s.calls)::bigint, sum(s.total_exec_time)::float8
FROM pg_stat_statements s
WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND s.toplevel
GROUP BY 1 ORDER BY 3 DESC LIMIT 6
"""
FUNCTIONS = """
SELECT funcname, calls, total_time FROM pg_stat_user_functions
WHERE schemaname = 'pgsched' AND funcname IN ('claim', 'start', 'complete')
"""
HISTORY = """
SELECT extract(epoch FROM created_at)::float8, extract(epoch FROM started_at)::float8,
       extract(epoch FROM finished_at)::float8
FROM pgsched.job_history WHERE state = 'completed'
"""


def _produce(dsn: str, rate: float, stop: Any, sent: Any, ready: Any) -> None:
    """Producer process: enqueue at ``rate`` jobs/s until ``stop`` is set; ``sent`` counts."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        ready.set()
        origin = time.monotonic()
        total = 0
        while not stop.is_set():
            k = min(5000, int(rate * (time.monotonic() - origin)) - total)
            if k > 0:
                conn.execute(ENQUEUE, (k, total, total + k - 1), prepare=True).fetchone()
                total += k
                sent.value = total
            time.sleep(TICK_S)


INSTALL = """
import sys
import psycopg
try:
    from pgsched.db import schema
except ImportError:  # a tree from before the db package
    from pgsched import schema
with psycopg.connect(sys.argv[1], autocommit=True) as conn:
    schema.install_fresh(conn, shards=8)
    conn.execute("CREATE TABLE pgsched.alembic_version (version_num varchar(32) PRIMARY KEY)")
    conn.execute("INSERT INTO pgsched.alembic_version VALUES (%s)", [schema.head_revision()])
"""


def install(dsn: str, source: Path) -> None:
    """pgsched from the source tree's sql/ (its own code), marked as migrated to its head revision.

    PYTHONSAFEPATH: ``python -c`` and ``python -m`` would put the working directory first on the path, and a run
    started in this checkout would install and run this checkout's code under every other tree's name.
    """
    env = dict(os.environ, PYTHONPATH=str(source), PYTHONSAFEPATH="1")
    subprocess.run([sys.executable, "-c", INSTALL, dsn], env=env, check=True)


def percentile(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


class Sampler(threading.Thread):
    """Every second: due jobs waiting and dead tuples in pgsched.jobs."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.samples: list[tuple[float, int, int]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            ring = conn.execute("SELECT to_regclass('pgsched.ready') IS NOT NULL").fetchone()
            depth_query = DEPTH if ring and ring[0] else DEPTH_WITHOUT_RING
            while not self.halt.wait(1.0):
                depth = conn.execute(depth_query).fetchone()
                dead = conn.execute(DEAD).fetchone()
                assert depth is not None
                assert dead is not None
                self.samples.append((time.time(), int(depth[0]), int(dead[0])))


def start_workers(dsn: str, source: Path, n: int, log_dir: Path, extra: list[str]) -> list[subprocess.Popen[bytes]]:
    env = dict(os.environ, PYTHONPATH=f"{source}{os.pathsep}{HERE}", PYTHONSAFEPATH="1", PGSCHED_DSN=dsn)
    procs = []
    for i in range(n):
        log = (log_dir / f"worker-{i}.log").open("wb")
        cmd = [sys.executable, "-m", "pgsched", "--log-level", "info", "worker"]
        cmd += ["--app", "bench.apps.pgsched_app:app", "--name", f"bench-{i}", *extra]
        procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=log_dir))
    return procs


def stop_workers(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


def functions(conn: psycopg.Connection[Any]) -> dict[str, tuple[int, float]]:
    return {name: (int(calls), float(total)) for name, calls, total in conn.execute(FUNCTIONS).fetchall()}


def run_once(dsn: str, source: Path, opts: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    log_dir.mkdir(parents=True, exist_ok=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE pgsched.jobs, pgsched.job_history, pgsched.job_events, pgsched.idempotency_keys")
        conn.execute("DELETE FROM pgsched.workers")
        conn.execute("VACUUM ANALYZE pgsched.jobs")
    procs = start_workers(dsn, source, opts.workers, log_dir, opts.worker_args.split())
    stop, ready = _SPAWN.Event(), _SPAWN.Event()
    sent = _SPAWN.Value("q", 0, lock=False)
    producer = _SPAWN.Process(target=_produce, args=(dsn, opts.rate, stop, sent, ready), name="bench-producer")
    sampler = Sampler(dsn)
    bounds: dict[str, tuple[float, float]] = {}
    stats: dict[str, dict[str, float]] = {}
    wal: dict[str, int] = {}
    buffers: dict[str, dict[str, float]] = {}
    top: dict[str, list[tuple[str, int, float]]] = {}
    holder = psycopg.connect(dsn, application_name="bench-horizon-holder")
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            deadline = time.monotonic() + 60
            while (conn.execute("SELECT count(*) FROM pgsched.workers").fetchone() or (0,))[0] < opts.workers:
                if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                    raise RuntimeError(f"workers did not start: see {log_dir}")
                time.sleep(0.1)
            producer.start()
            if not ready.wait(60):
                raise RuntimeError("the producer did not start")
            sampler.start()
            time.sleep(opts.warmup_s)
            for phase in PHASES:
                if phase == "pinned":
                    holder.execute("SELECT pg_current_xact_id()")
                elif phase == "released":
                    holder.rollback()
                before = functions(conn)
                conn.execute("SELECT pg_stat_statements_reset()")
                wal_before = conn.execute("SELECT wal_bytes::bigint FROM pg_stat_wal").fetchone()
                begin = time.time()
                time.sleep(opts.phase_s)
                bounds[phase] = (begin, time.time())
                time.sleep(1.1)  # backends report function statistics at most once a second
                after = functions(conn)
                buffers[phase] = {f: (b or 0.0) * int(n) for f, n, b in conn.execute(STATEMENTS).fetchall()}
                top[phase] = [(str(q), int(n), float(t)) for q, n, t in conn.execute(TOP).fetchall()]
                wal_after = conn.execute("SELECT wal_bytes::bigint FROM pg_stat_wal").fetchone()
                assert wal_before is not None
                assert wal_after is not None
                wal[phase] = int(wal_after[0]) - int(wal_before[0])
                stats[phase] = {
                    name: (total - before.get(name, (0, 0.0))[1]) / max(1, calls - before.get(name, (0, 0.0))[0])
                    for name, (calls, total) in after.items()
                }
                if any(p.poll() is not None for p in procs):
                    raise RuntimeError(f"a worker exited: see {log_dir}")
    finally:
        holder.rollback()
        holder.close()
        stop.set()
        if producer.pid is not None:
            producer.join(10)
            if producer.is_alive():
                producer.terminate()
        sampler.halt.set()
        if sampler.is_alive():
            sampler.join(5)
        stop_workers(procs)
    with psycopg.connect(dsn, autocommit=True) as conn:
        history = conn.execute(HISTORY).fetchall()
    result = summarize(history, sampler.samples, bounds, stats, opts)
    for phase, found in buffers.items():
        jobs = max(1.0, result[phase]["finished_per_s"] * opts.phase_s)
        result[phase]["buffers"] = {f: total / jobs for f, total in found.items()}  # per job finished
    for phase, found_top in top.items():
        result[phase]["top"] = found_top
    for phase, written in wal.items():
        # the whole cluster's WAL over the phase (and the second after it), per job finished in the phase
        result[phase]["wal_per_job"] = written / max(1.0, result[phase]["finished_per_s"] * opts.phase_s)
    return result


def summarize(
    history: list[tuple[float, float, float]],
    samples: list[tuple[float, int, int]],
    bounds: dict[str, tuple[float, float]],
    stats: dict[str, dict[str, float]],
    opts: argparse.Namespace,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for phase, (begin, end) in bounds.items():
        pickups = [(s - c) * 1000 for c, s, _ in history if begin <= c < end]
        finished = sum(1 for _, _, f in history if begin <= f < end)
        inside = [s for s in samples if begin <= s[0] < end]
        out[phase] = {
            "offered_per_s": opts.rate,
            "seconds": end - begin,
            "finished_per_s": finished / (end - begin),
            "pickup_p50_ms": percentile(pickups, 50),
            "pickup_p99_ms": percentile(pickups, 99),
            "depth_max": max((d for _, d, _ in inside), default=0),
            "depth_end": inside[-1][1] if inside else 0,
            "dead_max": max((x for _, _, x in inside), default=0),
            "functions": stats.get(phase, {}),
        }
    clean_p99 = out["clean"]["pickup_p99_ms"] or 0.0
    slow: dict[str, list[int]] = {}
    for phase, (begin, end) in bounds.items():
        # One-second buckets of the phase (by enqueue time) whose pickup p99 is over twice the clean phase's:
        # how many, and the second after which none is. For the clean phase itself this is the noise floor of
        # the same test (one slow commit or checkpoint makes its second "slow").
        buckets: dict[int, list[float]] = {}
        for c, s, _ in history:
            if begin <= c < end:
                buckets.setdefault(int(c - begin), []).append((s - c) * 1000)
        slow[phase] = [sec for sec in sorted(buckets) if (percentile(buckets[sec], 99) or 0.0) > 2 * clean_p99]
        out[phase]["slow_seconds"] = len(slow[phase])
        out[phase]["last_slow_s"] = slow[phase][-1] + 1 if slow[phase] else 0
    out["released"]["recovery_s"] = out["released"]["last_slow_s"]
    # "Clean within 10 s of the release": the jobs enqueued from then on, as one population.
    begin, end = bounds["released"]
    later = [(s - c) * 1000 for c, s, _ in history if begin + RECOVERY_S <= c < end]
    out["released"]["after_10s_p50_ms"] = percentile(later, 50)
    out["released"]["after_10s_p99_ms"] = percentile(later, 99)
    out["released"]["slow_seconds_after_10s"] = sum(1 for sec in slow["released"] if sec >= RECOVERY_S)
    return out


def fmt(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def report(label: str, result: dict[str, Any]) -> None:
    print(f"\n{label}")
    print(
        "| phase | offered/s | finished/s | pickup p50 ms | pickup p99 ms | depth max | depth end | dead tuples max"
        " | WAL bytes/job |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for phase in PHASES:
        r = result[phase]
        print(
            f"| {phase} | {r['offered_per_s']:,.0f} | {r['finished_per_s']:,.0f} | {fmt(r['pickup_p50_ms'])} |"
            f" {fmt(r['pickup_p99_ms'])} | {r['depth_max']:,} | {r['depth_end']:,} | {r['dead_max']:,} |"
            f" {fmt(r.get('wal_per_job'), 0)} |"
        )
    rel, clean = result["released"], result["clean"]
    print(
        f"from {RECOVERY_S} s after the release on: pickup p50 {fmt(rel['after_10s_p50_ms'])} ms,"
        f" p99 {fmt(rel['after_10s_p99_ms'])} ms (clean phase: {fmt(clean['pickup_p50_ms'])} /"
        f" {fmt(clean['pickup_p99_ms'])} ms)"
    )
    print(
        "one-second buckets with pickup p99 over 2x the clean phase's: "
        + ", ".join(
            f"{phase} {result[phase]['slow_seconds']} (last at {result[phase]['last_slow_s']} s)" for phase in PHASES
        )
        + f"; released, from {RECOVERY_S} s on: {rel['slow_seconds_after_10s']}"
    )
    names = ("claim", "start", "complete")
    print(
        "| phase | "
        + " | ".join(f"{f} ms/call" for f in names)
        + " | "
        + " | ".join(f"{f} buffers/job" for f in names)
        + " |"
    )
    print("|---|" + "---|" * 6)
    for phase in PHASES:
        st, bu = result[phase]["functions"], result[phase].get("buffers", {})
        print(
            f"| {phase} | "
            + " | ".join(fmt(st.get(f), 2) for f in names)
            + " | "
            + " | ".join(fmt(bu.get(f), 1) for f in names)
            + " |"
        )
    print("\nserver time by statement sent (pg_stat_statements, top level), ms per second of the phase")
    print("| phase | statement | calls/s | ms/s | ms/call |")
    print("|---|---|---|---|---|")
    for phase in PHASES:
        seconds = max(1.0, float(result[phase].get("seconds", 1.0)))
        for query, calls, total in result[phase].get("top", []):
            per_call = total / max(1, calls)
            print(f"| {phase} | `{query}` | {calls / seconds:,.1f} | {total / seconds:,.1f} | {per_call:,.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=500.0, help="jobs enqueued a second")
    parser.add_argument("--phase-s", type=float, default=240.0, help="seconds of each phase")
    parser.add_argument("--warmup-s", type=float, default=5.0, help="load before the clean phase begins")
    parser.add_argument("--workers", type=int, default=1, help="pgsched worker processes")
    parser.add_argument("--worker-args", default="", help="more arguments of `pgsched worker`")
    parser.add_argument("--checkout", type=Path, action="append", default=[], help="another pgsched source tree")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", type=Path, help="write the results here too")
    parser.add_argument("--set", action="append", default=[], help="a server setting, NAME=VALUE (repeatable)")
    parser.add_argument("--keep", action="store_true", help="keep the cluster's directory (its log) at the end")
    opts = parser.parse_args()
    # Stopped from outside (a background run ignores SIGINT): clean up all the same.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    sources = {"this": HERE, **{str(p): p.resolve() for p in opts.checkout}}
    settings = {
        "track_functions": "pl",
        "shared_preload_libraries": "pg_stat_statements",
        "pg_stat_statements.track": "all",
        **dict(item.split("=", 1) for item in opts.set),
    }
    server = LocalCluster(os_user="postgres", port=20000 + os.getpid() % 10000, settings=settings, keep=opts.keep)
    server.start()
    results: dict[str, list[dict[str, Any]]] = {label: [] for label in sources}
    try:
        names = {label: f"ph{i}" for i, label in enumerate(sources)}
        create_databases(server, list(names.values()))
        for label, source in sources.items():
            dsn = server.dsn(names[label])
            install(dsn, source)
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        work = HERE / "bench" / "work" / "pinned_horizon"
        for r in range(opts.rounds):
            for i, (label, source) in enumerate(sources.items()):
                result = run_once(server.dsn(names[label]), source, opts, work / f"r{r}-{i}")
                results[label].append(result)
                report(f"{label}, round {r + 1}: {opts.rate:g} jobs/s, {opts.phase_s:g} s per phase", result)
        if len(sources) > 1:
            first = next(iter(sources))
            for label in list(sources)[1:]:
                for key in ("pickup_p99_ms", "finished_per_s"):
                    ratios = [
                        (b["pinned"][key] or 0) / (a["pinned"][key] or 1)
                        for a, b in zip(results[first], results[label], strict=True)
                    ]
                    print(f"pinned {key}: {label} / {first} per round {[f'{x:.2f}' for x in ratios]}")
                    print(f"  median {statistics.median(ratios):.2f}")
        if opts.json:
            opts.json.write_text(json.dumps(results, indent=1))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
