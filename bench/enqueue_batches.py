"""Throughput of App.enqueue_many: 1,000-job batches, with and without labels.

    .venv/bin/python bench/enqueue_batches.py DSN [--batches 20] [--size 1000]

DSN is a database with pgsched installed. Each batch is one call (one
transaction); the script prints the median batch time and jobs per second
for plain batches, batches whose jobs all carry labels, and mixed batches
(labels, idempotency keys, delays and tenants).
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import timedelta

from pgsched import App
from pgsched.core.task import JobSpec


def batches(kind: str, n: int, size: int) -> list[list[JobSpec]]:
    out = []
    for b in range(n):
        jobs = []
        for i in range(size):
            if kind == "plain":
                jobs.append(JobSpec(task="bench.noop", args={"i": i}))
            elif kind == "labels":
                jobs.append(JobSpec(task="bench.noop", args={"i": i}, labels=("gpu", f"zone-{i % 3}")))
            else:
                jobs.append(
                    JobSpec(
                        task="bench.noop",
                        args={"i": i},
                        labels=("gpu",) if i % 2 else (),
                        idempotency_key=f"{kind}-{b}-{i}" if i % 3 == 0 else None,
                        delay=timedelta(seconds=i % 5),
                        tenant="acme" if i % 4 == 0 else None,
                    )
                )
        out.append(jobs)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dsn")
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--size", type=int, default=1000)
    opts = parser.parse_args()
    app = App(opts.dsn)
    with app.connect() as conn:
        conn.execute("TRUNCATE pgsched.jobs, pgsched.idempotency_keys")
    for kind in ("plain", "labels", "mixed"):
        work = batches(kind, opts.batches, opts.size)
        app.enqueue_many(work[0][:10])  # warm the connection
        times = []
        for jobs in work:
            start = time.perf_counter()
            ids = app.enqueue_many(jobs)
            times.append(time.perf_counter() - start)
            assert len(ids) == len(jobs)
        median = statistics.median(times)
        print(
            f"{kind:7s} {opts.batches} batches of {opts.size}: median {median * 1000:7.1f} ms/batch,"
            f" {opts.size / median:9.0f} jobs/s (min {min(times) * 1000:.1f} ms, max {max(times) * 1000:.1f} ms)"
        )
    app.close()


if __name__ == "__main__":
    main()
