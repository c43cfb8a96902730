"""What a job's enqueue and an idle worker's claim cost the server, by where the rows live and who writes them.

Pickup latency is an enqueue on an idle connection plus a claim on another
idle one. This script takes the two apart by layout, beside the raw loop
(each layout in a database of its own on one private PostgreSQL 15 cluster,
durable commits):

- ``raw``: one plain table with a partial index, an ``INSERT`` + ``pg_notify``
  and an ``UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED)``;
- ``pgsched``: ``pgsched.enqueue()`` and ``pgsched.claim()`` as the worker
  calls them (``starts`` = the batch: the claim records the start);
- ``pgsched tables, one statement``: the same rows of pgsched's partitioned
  tables (``pgsched.jobs`` by shard, the ready ring ``pgsched.ready`` by
  slot), written by one plain statement each instead of the functions (the
  ready row still goes in through the insert trigger);
- ``unpartitioned copy``: the same columns and indexes in two plain tables,
  the ready row written by the enqueue statement itself;
- ``pgsched, jobs unpartitioned``: ``enqueue()`` and ``claim()`` as above on
  a schema whose ``pgsched.jobs`` is one plain table instead of a partition
  per shard (the same columns, indexes, triggers and storage settings; the
  ready ring unchanged), which is what the shards' partitions cost the
  functions.

Each round, every layout enqueues one job and claims it, ``--jobs`` times,
either back to back (``hot``) or with the connections idle ``--idle-ms``
between calls, as an idle worker's are (``idle``). Reported: the server
backend's CPU per call (from /proc/PID/schedstat), medians of the rounds.

    .venv/bin/python -m bench.storage_cost --rounds 5 --jobs 100
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from bench.harness.postgres import private_databases

RAW_SCHEMA = """
CREATE TABLE raw_jobs (
    id bigserial PRIMARY KEY, queue text NOT NULL DEFAULT 'default', task text NOT NULL,
    args jsonb NOT NULL DEFAULT '{}', state text NOT NULL DEFAULT 'available', priority integer NOT NULL DEFAULT 0,
    attempt integer NOT NULL DEFAULT 0, locked_at timestamptz, created_at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON raw_jobs (queue, priority DESC, id) WHERE state = 'available';
"""
RAW_ENQUEUE = (
    "WITH j AS (INSERT INTO raw_jobs (task, args) VALUES ('noop', %s) RETURNING id) SELECT pg_notify('raw', '') FROM j"
)
RAW_CLAIM = (
    "UPDATE raw_jobs SET state = 'running', attempt = attempt + 1, locked_at = now() WHERE id IN ("
    "SELECT id FROM raw_jobs WHERE state = 'available' AND queue = 'default' ORDER BY priority DESC, id LIMIT 10"
    " FOR UPDATE SKIP LOCKED) RETURNING id, task, args, attempt"
)
ENQUEUE = "SELECT pgsched.enqueue('noop', %s)"
CLAIM = (
    "SELECT id, lease_token FROM pgsched.claim('bench', ARRAY['default'], 10, interval '1 minute', starts => 10,"
    " start_tasks => ARRAY['noop'])"
)
# One statement each on pgsched's own tables: the columns enqueue() stamps, and the claim's writes (its ready
# rows deleted, its jobs leased and started) without its checks, fencing and tenancy.
ROWS_ENQUEUE = """
WITH j AS (INSERT INTO {jobs} (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, labels,
                               dispatch_group, dispatch_rank, dispatch_at)
           VALUES (nextval('pgsched.jobs_id_seq'), 3, 'available', 'default', 'noop', %s, 0, now(), 0, 3, '{{}}', '',
                   0, now())
           RETURNING *){ready}
SELECT pg_notify('pgsched_jobs', 'default') FROM j
"""
COPY_READY = """,
     r AS (INSERT INTO {ready} (slot, queue, dispatch_group, dispatch_rank, dispatch_at, id, shard, priority, labels)
           SELECT 0, j.queue, j.dispatch_group, j.dispatch_rank, j.dispatch_at, j.id, j.shard, j.priority, j.labels
           FROM j)"""
ROWS_CLAIM = """
WITH r AS (DELETE FROM {ready} WHERE (slot, ctid) IN (
               SELECT slot, ctid FROM {ready} WHERE queue = 'default'
               ORDER BY dispatch_group, dispatch_rank, dispatch_at, id LIMIT 10 FOR UPDATE SKIP LOCKED)
           RETURNING id, shard)
UPDATE {jobs} j SET state = 'running', attempt = attempt + 1, lease_token = nextval('pgsched.lease_token_seq'),
                    leased_by = 'bench', lease_expires_at = now() + interval '1 minute', claimed_at = now(),
                    started_at = now()
WHERE j.id = ANY (ARRAY(SELECT r.id FROM r)) AND j.shard = 3 AND j.state = 'available'
RETURNING j.id, j.lease_token
"""
COPY_SCHEMA = """
CREATE TABLE public.jobs_copy (LIKE pgsched.jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE public.jobs_copy ADD PRIMARY KEY (id, shard);
CREATE INDEX ON public.jobs_copy (run_at) WHERE state = 'scheduled';
CREATE INDEX ON public.jobs_copy (queue, concurrency_key) WHERE state = 'running';
CREATE INDEX ON public.jobs_copy (queue, labels) WHERE state = 'available' AND labels <> '{}';
CREATE INDEX ON public.jobs_copy (queue, task) WHERE unserved_since IS NOT NULL;
CREATE INDEX ON public.jobs_copy (schedule) WHERE schedule IS NOT NULL;
CREATE UNLOGGED TABLE public.ready_copy (LIKE pgsched.ready INCLUDING DEFAULTS);
CREATE INDEX ON public.ready_copy (queue, dispatch_group, dispatch_rank, dispatch_at, id);
CREATE INDEX ON public.ready_copy (queue, (coalesce(tenant, '')), dispatch_at) WHERE dispatch_group = '*';
"""

#: layout -> (the enqueue statement, the claim statement, what to empty between rounds)
LAYOUTS: dict[str, tuple[str, str, str]] = {
    "raw": (RAW_ENQUEUE, RAW_CLAIM, "raw_jobs"),
    "pgsched": (ENQUEUE, CLAIM, "pgsched.jobs"),
    "pgsched tables, one statement": (
        ROWS_ENQUEUE.format(jobs="pgsched.jobs", ready=""),
        ROWS_CLAIM.format(jobs="pgsched.jobs", ready="pgsched.ready"),
        "pgsched.jobs",
    ),
    "unpartitioned copy": (
        ROWS_ENQUEUE.format(jobs="public.jobs_copy", ready=COPY_READY.format(ready="public.ready_copy")),
        ROWS_CLAIM.format(jobs="public.jobs_copy", ready="public.ready_copy"),
        "public.jobs_copy, public.ready_copy",
    ),
    "pgsched, jobs unpartitioned": (ENQUEUE, CLAIM, "pgsched.jobs"),
}

# The install script's partitioned pgsched.jobs made one plain table: its partition clause becomes the storage
# settings its partitions get, and the loop that creates them creates nothing.
JOBS_PARTITIONED = """        ELSE state::text = 'waiting' AND lease_token IS NULL END)
) PARTITION BY LIST (shard);"""
JOBS_PLAIN = """        ELSE state::text = 'waiting' AND lease_token IS NULL END)
) WITH (fillfactor = 45, autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 1000,
        autovacuum_vacuum_cost_delay = 0);"""
JOBS_PARTITION_LOOP = "'CREATE TABLE pgsched.%I PARTITION OF pgsched.jobs FOR VALUES IN (%s) '"


def unpartitioned_jobs_script(script: str) -> str:
    """The install script with pgsched.jobs as one plain table (the rest as it is)."""
    if script.count(JOBS_PARTITIONED) != 1 or script.count(JOBS_PARTITION_LOOP) != 1:
        raise RuntimeError("the install script no longer has the shape this layout edits: update storage_cost.py")
    script = script.replace(JOBS_PARTITIONED, JOBS_PLAIN)
    start = script.index("EXECUTE pg_catalog.format(\n            " + JOBS_PARTITION_LOOP)
    end = script.index("END LOOP;", start)
    return script[:start] + "NULL;\n    " + script[end:]


def _cpu_ns(pid: int) -> int:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def install(dsn: str, layout: str) -> None:
    from pgsched.db import schema

    with psycopg.connect(dsn, autocommit=True) as conn:
        if layout == "raw":
            conn.execute(RAW_SCHEMA.encode())
            return
        if layout == "pgsched, jobs unpartitioned":
            with conn.transaction():
                conn.execute(unpartitioned_jobs_script(schema.install_script(8)).encode())
            return
        schema.install_fresh(conn, shards=8)
        if layout == "unpartitioned copy":
            conn.execute(COPY_SCHEMA.encode())


def measure(dsn: str, layout: str, jobs: int, idle: float) -> tuple[float, float]:
    """(server CPU µs per enqueue, per claim): each job enqueued on one connection, then claimed on another."""
    enqueue, claim, tables = LAYOUTS[layout]
    with psycopg.connect(dsn, autocommit=True) as producer, psycopg.connect(dsn, autocommit=True) as worker:

        def run_enqueue(i: int) -> None:
            producer.execute(enqueue, (Jsonb({"i": i}),), prepare=True)

        def run_claim() -> list[Any]:
            return worker.execute(claim, prepare=True).fetchall()

        for i in range(10):  # plans made, caches warm
            run_enqueue(i)
            run_claim()
        spent_enqueue = spent_claim = 0
        for i in range(jobs):
            if idle:
                time.sleep(idle)
            before = _cpu_ns(producer.info.backend_pid)
            run_enqueue(i)
            spent_enqueue += _cpu_ns(producer.info.backend_pid) - before
            if idle:
                time.sleep(idle)
            before = _cpu_ns(worker.info.backend_pid)
            claimed = run_claim()
            spent_claim += _cpu_ns(worker.info.backend_pid) - before
            if len(claimed) != 1:
                raise RuntimeError(f"{layout}: claimed {len(claimed)} jobs, not the one enqueued")
        producer.execute(f"TRUNCATE {tables}")
    return spent_enqueue / jobs / 1000, spent_claim / jobs / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=100, help="jobs per layout, mode and round")
    parser.add_argument("--idle-ms", type=float, default=20.0, help="idle pause before each call in idle mode")
    opts = parser.parse_args()
    with private_databases([f"layout{i}" for i in range(len(LAYOUTS))]) as databases:
        dsns = dict(zip(LAYOUTS, databases.values(), strict=True))
        for layout, dsn in dsns.items():
            install(dsn, layout)
        modes = {"hot": 0.0, "idle": opts.idle_ms / 1000}
        spent: dict[tuple[str, str], list[tuple[float, float]]] = {(m, lay): [] for m in modes for lay in LAYOUTS}
        for _ in range(opts.rounds):  # the layouts take turns: a busy machine disturbs them alike
            for mode, idle in modes.items():
                for layout, dsn in dsns.items():
                    spent[mode, layout].append(measure(dsn, layout, opts.jobs, idle))
        for mode in modes:
            raw_enqueue = statistics.median(e for e, _ in spent[mode, "raw"])
            raw_claim = statistics.median(c for _, c in spent[mode, "raw"])
            for layout in LAYOUTS:
                enqueue = statistics.median(e for e, _ in spent[mode, layout])
                claim = statistics.median(c for _, c in spent[mode, layout])
                print(
                    f"{mode:>4} {layout:>30}: server CPU per enqueue {enqueue:6.0f} us"
                    f" ({enqueue / raw_enqueue:4.2f}x raw), per claim of one job {claim:6.0f} us"
                    f" ({claim / raw_claim:4.2f}x raw)  (medians of {opts.rounds} rounds of {opts.jobs})",
                    flush=True,
                )


if __name__ == "__main__":
    main()
