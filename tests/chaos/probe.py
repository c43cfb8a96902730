"""The probe task the chaos scenarios run: it records every run and performs one fenced "external effect".

Each run inserts a row into chaos.runs as it starts (committed at once, so a
SIGKILL mid-run still leaves the record), behaves as its args say (sleep,
crash, fail, ignore cancellation), then performs its effect: one statement
that inserts into chaos.effects under the job's idempotency key only if the
run's fencing token is still the job's current lease token (the job row is
locked FOR SHARE in that statement, so a re-claim either waits for it or has
already changed the token and the effect is refused). A key that already has
its effect is not applied twice. The outcome ('applied', 'duplicate' or
'stale') is stored on the run in the same statement.

The bookkeeping connection comes from $CHAOS_PROBE_DSN (straight to the
server, not through the fault-injecting proxy) and survives restarts; with
$CHAOS_PROBE_NO_PREPARE set it prepares no statements (for a transaction-pooling
PgBouncer in between).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from typing import Any

import psycopg

from pgsched import App, JobContext
from pgsched.errors import LeaseLost

app = App()

SCHEMA = """
CREATE SCHEMA IF NOT EXISTS chaos;
CREATE TABLE IF NOT EXISTS chaos.runs (
    run_id     text PRIMARY KEY,
    job_id     bigint NOT NULL,
    attempt    integer NOT NULL,
    token      bigint NOT NULL,
    worker     text NOT NULL,
    pid        integer NOT NULL,
    started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    ended_at   timestamptz,
    effect     text,           -- applied / duplicate / stale, NULL when no effect was tried
    lease_lost timestamptz,    -- when the handler saw ctx.lease_lost
    outcome    text            -- ok / failed / cancelled / lease_lost
);
CREATE INDEX IF NOT EXISTS runs_job_idx ON chaos.runs (job_id);
CREATE TABLE IF NOT EXISTS chaos.effects (
    idempotency_key text PRIMARY KEY,
    job_id  bigint NOT NULL,
    token   bigint NOT NULL,
    attempt integer NOT NULL,
    worker  text NOT NULL,
    run_id  text NOT NULL,
    at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
"""

EFFECT = """
WITH cur AS (
    SELECT j.id FROM pgsched.jobs j
    WHERE j.id = %(job)s AND j.lease_token = %(token)s AND j.state = 'running'
    FOR SHARE
), ins AS (
    INSERT INTO chaos.effects (idempotency_key, job_id, token, attempt, worker, run_id)
    SELECT %(key)s, %(job)s, %(token)s, %(attempt)s, %(worker)s, %(run)s FROM cur
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING 1
)
UPDATE chaos.runs r
SET effect = coalesce(r.effect, CASE WHEN EXISTS (SELECT 1 FROM ins) THEN 'applied'
                                     WHEN EXISTS (SELECT 1 FROM cur) THEN 'duplicate'
                                     ELSE 'stale' END)
WHERE r.run_id = %(run)s
RETURNING r.effect
"""

_local = threading.local()


def _conn() -> psycopg.Connection[Any]:
    conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
    if conn is None or conn.closed or conn.broken:
        conn = psycopg.connect(os.environ["CHAOS_PROBE_DSN"], autocommit=True, connect_timeout=5)
        if os.environ.get("CHAOS_PROBE_NO_PREPARE"):  # through a transaction-pooling PgBouncer
            conn.prepare_threshold = None
        _local.conn = conn
    return conn


def _execute(query: str, params: dict[str, Any], deadline: float = 120.0) -> list[Any]:
    """Run one statement, reconnecting and repeating it until it gets through (each is idempotent)."""
    give_up = time.monotonic() + deadline
    while True:
        try:
            cur = _conn().execute(query, params)
            return cur.fetchall() if cur.description else []
        except psycopg.OperationalError:
            conn = getattr(_local, "conn", None)
            if conn is not None:
                conn.close()
                _local.conn = None
            if time.monotonic() > give_up:
                raise
            time.sleep(0.2)


def _end(run: str, outcome: str, ctx: JobContext, lost_at: float | None) -> None:
    _execute(
        "UPDATE chaos.runs SET ended_at = clock_timestamp(), outcome = %(outcome)s,"
        " lease_lost = CASE WHEN %(lost)s THEN clock_timestamp() END WHERE run_id = %(run)s",
        {"run": run, "outcome": outcome, "lost": lost_at is not None or ctx.lease_lost},
    )


@app.task(name="chaos.probe", queue="chaos", max_attempts=10)
def probe(
    ctx: JobContext,
    sleep: float = 0.0,
    sleep_after: float | None = None,
    crash: int = 0,
    fail: int = 0,
    stubborn: bool = False,
    ignore_stale: bool = False,
    tag: str = "",
) -> str:
    """sleep: seconds on the first attempt (sleep_after: on later ones); crash: kill the process on attempts
    1..crash; fail: raise on attempts 1..fail; stubborn: ignore cancellation and a lost lease, and still try
    the effect (which the fence must refuse); ignore_stale: return normally even when the effect was refused
    (so the worker sends a completion under the stale token, which the database must refuse too)."""
    run = uuid.uuid4().hex
    _execute(
        "INSERT INTO chaos.runs (run_id, job_id, attempt, token, worker, pid)"
        " VALUES (%(run)s, %(job)s, %(attempt)s, %(token)s, %(worker)s, %(pid)s) ON CONFLICT DO NOTHING",
        {
            "run": run,
            "job": ctx.id,
            "attempt": ctx.attempt,
            "token": ctx.lease_token,
            "worker": ctx.worker,
            "pid": os.getpid(),
        },
    )
    if ctx.attempt <= crash:
        os._exit(137)
    seconds = sleep if ctx.attempt == 1 or sleep_after is None else sleep_after
    lost_at: float | None = None
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if stubborn:
            time.sleep(min(left, 0.05))
        elif ctx.sleep(min(left, 0.25)):
            break
        if ctx.lease_lost and lost_at is None:
            lost_at = time.monotonic()
    if ctx.lease_lost and lost_at is None:
        lost_at = time.monotonic()
    if not stubborn and ctx.should_stop:  # cancelled, worker stopping, or lease lost
        _end(run, "lease_lost" if ctx.lease_lost else "cancelled", ctx, lost_at)
        ctx.raise_if_cancelled()
    if ctx.attempt <= fail:
        _end(run, "failed", ctx, lost_at)
        raise RuntimeError(f"probe: failing attempt {ctx.attempt} of the first {fail} on purpose")
    key = ctx.idempotency_key or f"job:{ctx.id}"
    rows = _execute(
        EFFECT,
        {
            "job": ctx.id,
            "token": ctx.lease_token,
            "key": key,
            "attempt": ctx.attempt,
            "worker": ctx.worker,
            "run": run,
        },
    )
    effect = rows[0][0] if rows else "stale"
    _end(run, "ok" if effect != "stale" else "lease_lost", ctx, lost_at)
    if effect == "stale" and not ignore_stale:
        raise LeaseLost(f"job {ctx.id}: the effect was refused, token {ctx.lease_token} is stale")
    return effect
