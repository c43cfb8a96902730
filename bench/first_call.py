"""What a connection's first enqueue and first claim cost, against the calls after them.

A new server connection knows nothing yet: its first call of a PL/pgSQL
function compiles the function, loads the catalog entries of every table,
index, type and function it touches, and plans each statement inside; the
calls after reuse all of that. An application that opens a connection per
request (Django's default ``CONN_MAX_AGE = 0``) pays the first-call price on
every request. This script measures it on a private PostgreSQL 15 cluster
(durable commits), beside the raw loop's statements:

- per round, a new connection for a producer (the time to connect) and one
  for a worker; then twice: an enqueue (``pgsched.enqueue()``, or the raw
  loop's ``INSERT`` + ``pg_notify``) and the claim of that one job
  (``pgsched.claim()`` as the worker calls it, or the raw ``UPDATE … SKIP
  LOCKED``), each timed as the client sees it.

Medians of the rounds, in milliseconds.

    .venv/bin/python -m bench.first_call --rounds 20
"""

from __future__ import annotations

import argparse
import statistics
import time

import psycopg
from psycopg.types.json import Jsonb

from bench.harness.postgres import private_databases
from bench.storage_cost import LAYOUTS, install

#: the layouts of bench/storage_cost.py measured here: their statements, schemas and tables
SYSTEMS = ("raw", "pgsched")
FIGURES = ("connect", "first enqueue", "second enqueue", "first claim", "second claim")


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def one_round(dsn: str, system: str) -> dict[str, float]:
    """The five figures of one round: new producer and worker connections, two enqueues and claims."""
    enqueue, claim, tables = LAYOUTS[system]
    spent: dict[str, float] = {}
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as producer:
        spent["connect"] = _ms(started)
        with psycopg.connect(dsn, autocommit=True) as worker:
            for which in ("first", "second"):
                started = time.perf_counter()
                producer.execute(enqueue, (Jsonb({"i": 1}),))
                spent[f"{which} enqueue"] = _ms(started)
                started = time.perf_counter()
                claimed = worker.execute(claim).fetchall()
                spent[f"{which} claim"] = _ms(started)
                if len(claimed) != 1:
                    raise RuntimeError(f"{system}: claimed {len(claimed)} jobs, not the one enqueued")
        producer.execute(f"TRUNCATE {tables}")
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    opts = parser.parse_args()
    with private_databases(list(SYSTEMS)) as databases:
        for system, dsn in databases.items():
            install(dsn, system)
            one_round(dsn, system)  # the cluster's own first touches of these tables, not counted
        spent: dict[str, list[dict[str, float]]] = {system: [] for system in SYSTEMS}
        for _ in range(opts.rounds):  # the systems take turns: a busy machine disturbs them alike
            for system, dsn in databases.items():
                spent[system].append(one_round(dsn, system))
        print(f"{'ms (medians of ' + str(opts.rounds) + ' rounds)':>30} " + " ".join(f"{f:>15}" for f in FIGURES))
        for system, rounds in spent.items():
            figures = [statistics.median(r[f] for r in rounds) for f in FIGURES]
            print(f"{system:>30} " + " ".join(f"{v:15.2f}" for v in figures), flush=True)


if __name__ == "__main__":
    main()
