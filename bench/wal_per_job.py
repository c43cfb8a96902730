"""What a job costs in writes: WAL bytes and row versions per job, from enqueue to history.

On a private PostgreSQL 15 cluster (durable commits, Unix socket only), each
round: ``CHECKPOINT``, then 20,000 no-op jobs (``--jobs``) enqueued with
``pgsched.enqueue_many`` in batches of 1,000, then drained by ``pgsched worker
--burst -c 100`` (a process of the source tree's own code). Measured around
each part: WAL bytes, records and full-page images (``pg_stat_wal``, the
whole cluster, nothing else runs in it), and the row operations the
statistics count on pgsched's tables (``pg_stat_user_tables``: inserts,
updates of which HOT, deletes), summed per table family and per job. A row
version is an insert or an update; a delete leaves one dead.

``--checkout DIR`` (repeatable) measures another source tree beside this
one (its sql/ installed in a database of its own, its workers), rounds
interleaved.

    .venv/bin/python -m bench.wal_per_job
    .venv/bin/python -m bench.wal_per_job --checkout /tmp/pgsched-before --rounds 3
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from bench.harness.postgres import PG_BIN, LocalCluster, create_databases
from bench.pinned_horizon import HERE, install

WAL = "SELECT wal_bytes::bigint, wal_records, wal_fpi FROM pg_stat_wal"
ROWS = """
SELECT coalesce(pg_partition_root(relid), relid)::regclass::text AS family,
       sum(n_tup_ins)::bigint, sum(n_tup_upd)::bigint, sum(n_tup_hot_upd)::bigint, sum(n_tup_del)::bigint
FROM pg_stat_user_tables WHERE schemaname = 'pgsched'
GROUP BY 1
"""
ENQUEUE = (
    "SELECT count(*) FROM pgsched.enqueue_many(array_fill('noop'::text, ARRAY[%s]),"
    " ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, %s) g))"
)


def counters(conn: psycopg.Connection[Any]) -> tuple[tuple[int, int, int], dict[str, tuple[int, ...]]]:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    wal = conn.execute(WAL).fetchone()
    assert wal is not None
    rows = {r[0]: tuple(int(x) for x in r[1:]) for r in conn.execute(ROWS).fetchall()}
    return (int(wal[0]), int(wal[1]), int(wal[2])), rows


def delta(
    a: tuple[tuple[int, int, int], dict[str, tuple[int, ...]]],
    b: tuple[tuple[int, int, int], dict[str, tuple[int, ...]]],
) -> dict[str, Any]:
    wal = [y - x for x, y in zip(a[0], b[0], strict=True)]
    rows = {
        family: [y - x for x, y in zip(a[1].get(family, (0, 0, 0, 0)), after, strict=True)]
        for family, after in b[1].items()
    }
    return {"wal_bytes": wal[0], "wal_records": wal[1], "wal_fpi": wal[2], "rows": rows}


def settle(conn: psycopg.Connection[Any]) -> None:
    """Let every backend's statistics arrive (they report at most once a second, and at exit)."""
    time.sleep(1.2)
    conn.execute("SELECT pg_stat_force_next_flush()")


def waldump(wal_dir: Path, start: str, end: str, jobs: int) -> list[str]:
    """pg_waldump's per-record-type statistics of an LSN range, as bytes per job, largest first."""
    done = subprocess.run(
        [str(PG_BIN / "pg_waldump"), "--stats=record", "-p", str(wal_dir), "-s", start, "-e", end],
        capture_output=True,
        text=True,
        check=False,
    )
    rows = []
    for line in done.stdout.splitlines():
        # "Heap/UPDATE   N (pct)   rec_size (pct)   fpi_size (pct)   combined_size (pct)"
        parts = re.sub(r"\([^)]*\)", " ", line).split()
        if len(parts) >= 5 and "/" in parts[0] and parts[1].isdigit():
            count, combined = int(parts[1]), int(parts[4])
            rows.append((combined, f"{parts[0]}: {count / jobs:.2f} records, {combined / jobs:,.0f} bytes per job"))
    return [text for _, text in sorted(rows, reverse=True)]


def by_relation(dsn: str, wal_dir: Path, start: str, end: str, jobs: int) -> list[str]:
    """WAL bytes of an LSN range per relation (partitions summed into their table or index) and record type."""
    done = subprocess.run(
        [str(PG_BIN / "pg_waldump"), "-p", str(wal_dir), "-s", start, "-e", end],
        capture_output=True,
        text=True,
        check=False,
    )
    with psycopg.connect(dsn) as conn:
        names = {
            str(node): name
            for node, name in conn.execute(
                "SELECT pg_relation_filenode(c.oid), coalesce(pg_partition_root(c.oid), c.oid)::regclass::text"
                " FROM pg_class c WHERE pg_relation_filenode(c.oid) IS NOT NULL"
            )
        }
    sizes: dict[tuple[str, str], list[int]] = {}
    for line in done.stdout.splitlines():
        found = re.search(r"rmgr: (\w+)\s+len \(rec/tot\):\s*\d+/\s*(\d+).*?desc: (\w+)", line)
        if not found:
            continue
        rel = re.search(r"rel \d+/\d+/(\d+)", line)
        name = names.get(rel.group(1), "other relations") if rel else "no relation"
        entry = sizes.setdefault((name, f"{found.group(1)}/{found.group(3)}"), [0, 0])
        entry[0] += 1
        entry[1] += int(found.group(2))
    return [
        f"{name} {kind}: {count / jobs:.2f} records, {size / jobs:,.0f} bytes per job"
        for (name, kind), (count, size) in sorted(sizes.items(), key=lambda item: -item[1][1])
    ]


def run_once(dsn: str, source: Path, jobs: int, log: Path, wal_dir: Path | None = None) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE pgsched.jobs, pgsched.job_history, pgsched.job_events, pgsched.idempotency_keys")
        conn.execute("DELETE FROM pgsched.workers")
        conn.execute("VACUUM ANALYZE pgsched.jobs")
        conn.execute("CHECKPOINT")
        settle(conn)
        start = counters(conn)
        lsn0 = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        for done in range(0, jobs, 1000):
            conn.execute(ENQUEUE, (min(1000, jobs - done), min(1000, jobs - done)))
        settle(conn)
        enqueued = counters(conn)
        env = dict(os.environ, PYTHONPATH=f"{source}{os.pathsep}{HERE}", PYTHONSAFEPATH="1", PGSCHED_DSN=dsn)
        cmd = [sys.executable, "-m", "pgsched", "worker", "--app", "bench.apps.pgsched_app:app", "--burst"]
        began = time.perf_counter()
        with log.open("wb") as out:
            subprocess.run([*cmd, "-c", "100"], env=env, stdout=out, stderr=subprocess.STDOUT, check=True, timeout=600)
        seconds = time.perf_counter() - began
        settle(conn)
        drained = counters(conn)
        lsn1 = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        left = conn.execute("SELECT count(*) FROM pgsched.jobs").fetchone()
        finished = conn.execute("SELECT count(*) FROM pgsched.job_history WHERE state = 'completed'").fetchone()
    assert left == (0,), f"{left} jobs left"
    assert finished == (jobs,), f"{finished} finished"
    dump = waldump(wal_dir, lsn0[0], lsn1[0], jobs) if wal_dir and lsn0 and lsn1 else []
    relations = by_relation(dsn, wal_dir, lsn0[0], lsn1[0], jobs) if wal_dir and lsn0 and lsn1 else []
    return {
        "enqueue": delta(start, enqueued),
        "drain": delta(enqueued, drained),
        "drain_s": seconds,
        "waldump": dump,
        "relations": relations,
    }


def per_job(result: dict[str, Any], jobs: int) -> dict[str, float]:
    e, d = result["enqueue"], result["drain"]
    out = {
        "wal_bytes": (e["wal_bytes"] + d["wal_bytes"]) / jobs,
        "wal_bytes_enqueue": e["wal_bytes"] / jobs,
        "wal_bytes_drain": d["wal_bytes"] / jobs,
        "wal_records": (e["wal_records"] + d["wal_records"]) / jobs,
        "wal_fpi": (e["wal_fpi"] + d["wal_fpi"]) / jobs,
        "jobs_per_s": jobs / result["drain_s"],
    }
    versions = 0
    for part in (e, d):
        for family, (ins, upd, hot, dels) in part["rows"].items():
            key = family.removeprefix("pgsched.")
            out[f"{key} ins"] = out.get(f"{key} ins", 0) + ins / jobs
            out[f"{key} upd"] = out.get(f"{key} upd", 0) + upd / jobs
            out[f"{key} hot"] = out.get(f"{key} hot", 0) + hot / jobs
            out[f"{key} del"] = out.get(f"{key} del", 0) + dels / jobs
            versions += ins + upd
    out["row_versions"] = versions / jobs
    return {k: v for k, v in out.items() if v}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--checkout", type=Path, action="append", default=[], help="another pgsched source tree")
    parser.add_argument("--waldump", action="store_true", help="also print pg_waldump's record statistics (last round)")
    opts = parser.parse_args()
    sources = {"this": HERE, **{str(p): p.resolve() for p in opts.checkout}}
    server = LocalCluster(os_user="postgres", port=20000 + os.getpid() % 10000)
    server.start()
    found: dict[str, list[dict[str, float]]] = {label: [] for label in sources}
    try:
        names = {label: f"wal{i}" for i, label in enumerate(sources)}
        create_databases(server, list(names.values()))
        for label, source in sources.items():
            install(server.dsn(names[label]), source)
        work = HERE / "bench" / "work" / "wal_per_job"
        work.mkdir(parents=True, exist_ok=True)
        for r in range(opts.rounds):
            for i, (label, source) in enumerate(sources.items()):
                wal_dir = server.root / "data" / "pg_wal" if opts.waldump and server.root else None
                result = run_once(server.dsn(names[label]), source, opts.jobs, work / f"worker-r{r}-{i}.log", wal_dir)
                found[label].append(per_job(result, opts.jobs))
                if r == opts.rounds - 1 and result["waldump"]:
                    print(f"\n{label}: WAL by record type, enqueue and drain (pg_waldump --stats=record)")
                    print("\n".join(result["waldump"][:14]))
                    print(f"\n{label}: WAL by relation and record type (pg_waldump)")
                    print("\n".join(result["relations"][:24]))
    finally:
        server.stop()
    keys = sorted({k for rows in found.values() for row in rows for k in row})
    print(f"\nper job, median of {opts.rounds} interleaved rounds of {opts.jobs:,} jobs")
    print("| per job | " + " | ".join(sources) + " |")
    print("|---|" + "---|" * len(sources))
    for key in keys:
        cells = [f"{statistics.median(row.get(key, 0.0) for row in found[label]):,.2f}" for label in sources]
        print(f"| {key} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
