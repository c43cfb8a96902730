"""Where an idle worker's pickup time goes: which connection and thread claim after a NOTIFY.

An idle worker learns of a new job from a NOTIFY on its listening connection.
Two designs for what happens next, both running ``pgsched.claim()``:

- ``handoff`` (what ``pgsched worker`` does): the listening thread wakes the
  claiming thread, which claims on a connection of its own;
- ``same connection``: the listening thread claims at once, on the connection
  the NOTIFY arrived on (what the raw loop does).

``raw`` is the yardstick: an ``INSERT`` + ``pg_notify`` into a plain table and
a ``DELETE ... RETURNING`` on the listening connection.

Each case is a ping-pong on one private PostgreSQL 15 cluster (durable
commits): the producer enqueues one job (its own transaction), the consumer
claims it, the producer waits for that, idles a few milliseconds (so the
backends go idle as a quiet worker's do) and enqueues the next. Pickup is from
just before the enqueue call to the moment the claim's rows are back in
Python. The cases take turns within every round, so a busy machine disturbs
them alike; the ratios are paired by round.

    .venv/bin/python -m bench.pickup_designs --rounds 20 --jobs 50
"""

from __future__ import annotations

import argparse
import random
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

from bench.harness.postgres import LocalCluster, create_databases

SQL_DIR = Path(__file__).resolve().parent.parent / "sql"
CLAIM = "SELECT id, lease_token, shard FROM pgsched.claim('bench', ARRAY['default'], 10, interval '1 minute')"
COMPLETE = "SELECT count(*) FROM pgsched.complete(%s::bigint[], %s::bigint[], NULL, %s::smallint[])"
ENQUEUE = "SELECT pgsched.enqueue('noop')"
RAW_TABLE = "CREATE TABLE IF NOT EXISTS raw_jobs (id bigserial PRIMARY KEY, task text NOT NULL)"
RAW_ENQUEUE = "WITH j AS (INSERT INTO raw_jobs (task) VALUES ('noop') RETURNING id) SELECT pg_notify('raw_jobs', '')"
RAW_CLAIM = (
    "DELETE FROM raw_jobs WHERE id IN (SELECT id FROM raw_jobs ORDER BY id LIMIT 10 FOR UPDATE SKIP LOCKED) "
    "RETURNING id"
)


def install(dsn: str) -> None:
    from pgsched.db import schema

    with psycopg.connect(dsn, autocommit=True) as conn:
        schema.install_fresh(conn, shards=8)
        conn.execute(RAW_TABLE)


class Consumer:
    """A listening thread (and, for the handoff, a claiming thread) that records when each claim returns."""

    def __init__(self, dsn: str, design: str) -> None:
        self.design = design
        self.claimed = threading.Event()
        self.claimed_at = 0.0
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._ready = threading.Barrier(2 if design != "handoff" else 3)
        self._listen = psycopg.connect(dsn, autocommit=True)
        self._claim = psycopg.connect(dsn, autocommit=True) if design == "handoff" else self._listen
        channel = "raw_jobs" if design == "raw" else "pgsched_jobs"
        self._listen.execute(f"LISTEN {channel}")
        self._threads = [threading.Thread(target=self._listener, daemon=True)]
        if design == "handoff":
            self._threads.append(threading.Thread(target=self._claimer, daemon=True))
        for thread in self._threads:
            thread.start()
        self._ready.wait()

    def _take(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        if self.design == "raw":
            rows = conn.execute(RAW_CLAIM).fetchall()
            if rows:
                self._done()
            return
        rows = conn.execute(CLAIM).fetchall()
        if rows:
            self._done()
            conn.execute(COMPLETE, ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]))

    def _done(self) -> None:
        self.claimed_at = time.perf_counter()
        self.claimed.set()

    def _listener(self) -> None:
        self._ready.wait()
        while not self._stop.is_set():
            got = list(self._listen.notifies(timeout=0.2, stop_after=1))
            if not got:
                continue
            if self.design == "handoff":
                self._wake.set()
            else:
                self._take(self._listen)

    def _claimer(self) -> None:
        self._ready.wait()
        while not self._stop.is_set():
            if self._wake.wait(0.2):
                self._wake.clear()
                self._take(self._claim)

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        self._listen.close()
        if self._claim is not self._listen:
            self._claim.close()


def measure(dsn: str, design: str, jobs: int, rng: random.Random) -> list[float]:
    """Pickup times (ms) of ``jobs`` jobs enqueued one at a time."""
    consumer = Consumer(dsn, design)
    times = []
    try:
        with psycopg.connect(dsn, autocommit=True) as producer:
            statement = RAW_ENQUEUE if design == "raw" else ENQUEUE
            for _ in range(jobs):
                time.sleep(rng.uniform(0.003, 0.008))
                consumer.claimed.clear()
                started = time.perf_counter()
                producer.execute(statement)
                if not consumer.claimed.wait(10):
                    raise RuntimeError(f"{design}: a job was not claimed within 10 s")
                times.append((consumer.claimed_at - started) * 1000)
    finally:
        consumer.close()
    return times


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=50, help="jobs per case per round")
    opts = parser.parse_args()
    designs = ["raw", "handoff", "same connection"]
    rng = random.Random(7)
    server = LocalCluster()
    server.start()
    try:
        create_databases(server, ["pickup"])
        dsn = server.dsn("pickup")
        install(dsn)
        measure(dsn, "handoff", 20, rng)  # warm-up
        found: dict[str, list[float]] = {d: [] for d in designs}
        medians: dict[str, list[float]] = {d: [] for d in designs}
        for _ in range(opts.rounds):
            for design in rng.sample(designs, len(designs)):
                times = measure(dsn, design, opts.jobs, rng)
                found[design] += times
                medians[design].append(statistics.median(times))
        report(designs, found, medians, lambda d: f"{len(found[d])} pickups in {opts.rounds} rounds")
    finally:
        server.stop()


def report(
    designs: list[str], found: dict[str, list[float]], medians: dict[str, list[float]], what: Callable[[str], str]
) -> None:
    for design in designs:
        ratios = [m / r for m, r in zip(medians[design], medians["raw"], strict=True)]
        print(
            f"{design:>16}: pickup p50 {percentile(found[design], 0.5):6.2f} ms"
            f"  p99 {percentile(found[design], 0.99):6.2f} ms ({what(design)});"
            f"  p50 paired ratio to raw: median {statistics.median(ratios):.2f}"
            f" [{min(ratios):.2f}..{max(ratios):.2f}]",
            flush=True,
        )


if __name__ == "__main__":
    main()
