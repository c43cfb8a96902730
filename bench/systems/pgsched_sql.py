"""pgsched at the SQL level, for the scenarios that look beneath the worker.

- ``claim_loop``: a claimer that calls ``pgsched.claim`` and ``pgsched.complete``
  directly, one autocommit statement each, on one connection per process, with
  its own ``start_shard`` rotation (as the worker does);
- ``plain_loop`` and ``PLAIN_SCHEMA``: the same loop over a *pgsched-shaped*
  table without the promises — same columns, shard partitions, fillfactor,
  indexes and row checks as ``pgsched.jobs``, and claim and complete functions
  with the same PL/pgSQL shape as pgsched's (one statement per shard, generic
  plans), but a claim that only flips the state (no fencing token, lease or
  audit event) and a completion that is a bare ``DELETE`` (no token check, no
  history row, no audit event);
- the chores of the scale and sharding scenarios: a far-future backlog, a
  finished-job history, a database installed with another shard count.

Every loop runs in a worker process (``WorkerPool(..., loop="module:function")``)
and counts its jobs per batch once the completion has committed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.systems.base import DrainConfig

if TYPE_CHECKING:
    import psycopg

    from bench.harness.workers import WorkerContext

LOOP_CLAIM = "bench.systems.pgsched_sql:claim_loop"
LOOP_PLAIN = "bench.systems.pgsched_sql:plain_loop"

CLAIM = (
    "SELECT id, lease_token, shard FROM pgsched.claim(%s, '{default}', %s::integer, interval '30 seconds', '{}',"
    " %s::integer)"
)
COMPLETE = "SELECT count(*) FROM pgsched.complete(%s::bigint[], %s::bigint[], NULL, %s::smallint[]) WHERE accepted"

PLAIN_CLAIM = "SELECT id, shard FROM bench_plain.claim(%s, %s)"
PLAIN_COMPLETE = "SELECT bench_plain.complete(%s::bigint[], %s::smallint[])"

#: Unfinished / finished checks for the plain table (completed jobs are deleted).
PLAIN_UNFINISHED = "SELECT EXISTS (SELECT 1 FROM bench_plain.jobs)"
PLAIN_FINISHED = (
    "SELECT (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM bench_plain.jobs_id_seq)"
    " - (SELECT count(*) FROM bench_plain.jobs)"
)

#: The pgsched-shaped table, its partitions (``{shards}`` of them) and the two functions.
PLAIN_SCHEMA = """
CREATE SCHEMA IF NOT EXISTS bench_plain;
DROP TABLE IF EXISTS bench_plain.jobs;
DROP SEQUENCE IF EXISTS bench_plain.jobs_id_seq;
CREATE SEQUENCE bench_plain.jobs_id_seq AS bigint;
CREATE TABLE bench_plain.jobs (
    id                  bigint            NOT NULL DEFAULT nextval('bench_plain.jobs_id_seq'),
    shard               smallint          NOT NULL DEFAULT floor(random() * {shards})::smallint,
    state               pgsched.job_state NOT NULL DEFAULT 'available',
    queue               text              NOT NULL DEFAULT 'default',
    task                text              NOT NULL,
    args                jsonb             NOT NULL DEFAULT '{{}}',
    priority            integer           NOT NULL DEFAULT 0,
    run_at              timestamptz       NOT NULL DEFAULT now(),
    attempt             integer           NOT NULL DEFAULT 0,
    max_attempts        integer,
    lease_token         bigint,
    leased_by           text,
    lease_expires_at    timestamptz,
    started_at          timestamptz,
    cancel_requested_at timestamptz,
    idempotency_key     text,
    labels              text[]            NOT NULL DEFAULT '{{}}',
    tenant              text,
    last_error          text,
    created_at          timestamptz       NOT NULL DEFAULT now(),
    schedule            text,
    PRIMARY KEY (id, shard),
    CHECK (task ~ '^[A-Za-z_][A-Za-z0-9_.:-]{{0,199}}$'),
    CHECK (queue ~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]{{0,62}}$'),
    CHECK (jsonb_typeof(args) = 'object'),
    CHECK (max_attempts > 0),
    CHECK (isfinite(run_at)),
    CHECK (priority BETWEEN -1000000 AND 1000000),
    CHECK (length(idempotency_key) BETWEEN 1 AND 512),
    CHECK (state IN ('scheduled', 'available', 'running')),
    CHECK (length(tenant) BETWEEN 1 AND 200),
    CHECK (shard >= 0 AND shard < {shards})
) PARTITION BY LIST (shard);
DO $$
BEGIN
    FOR s IN 0 .. {shards} - 1 LOOP
        EXECUTE format(
            'CREATE TABLE bench_plain.%I PARTITION OF bench_plain.jobs FOR VALUES IN (%s) '
            'WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.02, '
            'autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0)',
            'jobs_s' || s, s);
    END LOOP;
END
$$;
CREATE INDEX ON bench_plain.jobs (queue, priority DESC, run_at, id) WHERE state = 'available';
CREATE INDEX ON bench_plain.jobs (run_at) WHERE state = 'scheduled';
CREATE INDEX ON bench_plain.jobs (leased_by) WHERE state = 'running';
CREATE INDEX ON bench_plain.jobs (schedule) WHERE schedule IS NOT NULL;

CREATE OR REPLACE FUNCTION bench_plain.claim(n integer, start_shard integer)
RETURNS TABLE (id bigint, shard smallint)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $f$
#variable_conflict use_column
DECLARE
    v_left integer := n;
    v_got integer;
    v_shard smallint;
BEGIN
    FOR i IN 0 .. {shards} - 1 LOOP
        v_shard := (start_shard + i) % {shards};
        RETURN QUERY
        WITH due AS MATERIALIZED (
            SELECT j.id FROM bench_plain.jobs j
            WHERE j.shard = v_shard AND j.state = 'available' AND j.queue = 'default'
            ORDER BY j.priority DESC, j.run_at, j.id
            LIMIT v_left
            FOR UPDATE SKIP LOCKED
        ), claimed AS (
            UPDATE bench_plain.jobs j
            SET state = 'running', attempt = j.attempt + 1
            WHERE j.shard = v_shard AND j.id = ANY (ARRAY(SELECT due.id FROM due))
            RETURNING j.id, j.shard
        )
        SELECT c.id, c.shard FROM claimed c;
        GET DIAGNOSTICS v_got = ROW_COUNT;
        v_left := v_left - v_got;
        EXIT WHEN v_left <= 0;
    END LOOP;
END
$f$;

CREATE OR REPLACE FUNCTION bench_plain.complete(ids bigint[], shards smallint[])
RETURNS integer
LANGUAGE plpgsql
AS $f$
DECLARE
    v_count integer;
BEGIN
    DELETE FROM bench_plain.jobs j
    USING unnest(ids, shards) AS u(id, shard)
    WHERE j.id = u.id AND j.shard = u.shard;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$f$;
"""


def install_plain(conn: psycopg.Connection[Any]) -> int:
    """(Re)create the pgsched-shaped table with as many shards as pgsched has; returns that count."""
    shards = int(conn.execute("SELECT shards FROM pgsched.config").fetchone()[0])  # type: ignore[index]
    conn.execute(PLAIN_SCHEMA.format(shards=shards).encode())
    return shards


def prefill_plain(conn: psycopg.Connection[Any], n: int) -> None:
    """``n`` no-op jobs, due now, on random shards (as pgsched's enqueue spreads them)."""
    conn.execute(
        "INSERT INTO bench_plain.jobs (task, args) SELECT 'noop', jsonb_build_object('i', g)"
        " FROM generate_series(0, %s - 1) g",
        (n,),
    )


# -- loops (run in worker processes) -----------------------------------------------------


def claim_loop(dsn: str, config: DrainConfig, ctx: WorkerContext) -> None:
    """pgsched.claim(n) then pgsched.complete() of what it got, until a claim comes back empty."""
    import psycopg

    batch = int(config.settings["batch"])
    worker = f"bench-sql-{ctx.slot}"
    cursor = ctx.slot
    with psycopg.connect(dsn, autocommit=True) as conn:
        ctx.ready_and_wait()
        while not ctx.stop_requested():
            cursor += 1  # a different shard first at every claim, as the worker rotates it
            rows = conn.execute(CLAIM, (worker, batch, cursor), prepare=True).fetchall()
            if not rows:
                return  # pre-filled: empty means done
            ids, tokens, shards = (list(column) for column in zip(*rows, strict=True))
            done = conn.execute(COMPLETE, (ids, tokens, shards), prepare=True).fetchone()
            ctx.add(int(done[0]) if done else 0)


def plain_loop(dsn: str, config: DrainConfig, ctx: WorkerContext) -> None:
    """bench_plain.claim(n) then bench_plain.complete() (a DELETE), until a claim comes back empty."""
    import psycopg

    batch = int(config.settings["batch"])
    cursor = ctx.slot
    with psycopg.connect(dsn, autocommit=True) as conn:
        ctx.ready_and_wait()
        while not ctx.stop_requested():
            cursor += 1
            rows = conn.execute(PLAIN_CLAIM, (batch, cursor), prepare=True).fetchall()
            if not rows:
                return
            ids, shards = (list(column) for column in zip(*rows, strict=True))
            done = conn.execute(PLAIN_COMPLETE, (ids, shards), prepare=True).fetchone()
            ctx.add(int(done[0]) if done else 0)


# -- backlogs ------------------------------------------------------------------------------


def add_far_future(conn: psycopg.Connection[Any], n: int, *, chunk: int = 50_000) -> None:
    """``n`` jobs due about a month from now, through pgsched.enqueue_many, ``chunk`` per call."""
    for start in range(0, n, chunk):
        size = min(chunk, n - start)
        conn.execute(
            "SELECT count(*) FROM pgsched.enqueue_many(array_fill('backlog'::text, ARRAY[%s]), NULL, NULL,"
            " ARRAY(SELECT now() + interval '30 days' + g * interval '1 second'"
            "       FROM generate_series(%s, %s) g))",
            (size, start, start + size - 1),
        )


def add_history(conn: psycopg.Connection[Any], n: int) -> None:
    """``n`` completed jobs straight into pgsched.job_history (as its owner), finished over the last day.

    The day partitions for yesterday and today exist from install (pgsched.maintain()).
    """
    conn.execute(
        """
        INSERT INTO pgsched.job_history
            (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, lease_token,
             leased_by, idempotency_key, labels, tenant, created_at, started_at, finished_at, result, error, schedule)
        SELECT nextval('pgsched.jobs_id_seq'), (g %% c.shards)::smallint, 'completed', 'default', 'backlog',
               jsonb_build_object('i', g), 0, t.at, 1, 5, g, 'bench-history', NULL, '{}', NULL,
               t.at, t.at, t.at + interval '5 ms', NULL, NULL, NULL
        FROM generate_series(1, %s) g
        CROSS JOIN pgsched.config c
        CROSS JOIN LATERAL (SELECT now() - interval '23 hours' + g * (interval '23 hours' / %s)) AS t(at)
        """,
        (n, n),
    )


# -- a database installed with another shard count --------------------------------------


def shard_database(dsn: str, shards: int) -> str:
    """The DSN of a sibling database with pgsched installed with ``shards`` shards (created on first use)."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    base = conninfo_to_dict(dsn).get("dbname") or "bench_pgsched"
    name = f"{base}_s{shards}"
    with psycopg.connect(make_conninfo(dsn, dbname="postgres"), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')
    target = make_conninfo(dsn, dbname=name)
    with psycopg.connect(target, autocommit=True) as conn:
        installed = conn.execute("SELECT to_regclass('pgsched.config') IS NOT NULL").fetchone()
        if installed and installed[0]:
            have = int(conn.execute("SELECT shards FROM pgsched.config").fetchone()[0])  # type: ignore[index]
            if have != shards:
                raise RuntimeError(f"database {name} has pgsched with {have} shards, not {shards}")
            return target
    command = [str(Path(sys.executable).parent / "pgsched"), "--dsn", target, "migrate", "--shards", str(shards)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"pgsched migrate --shards {shards} failed: {done.stderr.strip() or done.stdout.strip()}")
    return target
