"""Where the server's time goes in one single-job enqueue, by subtraction, beside the raw insert.

One private PostgreSQL 15 cluster (durable commits), one database per case,
each installed from this checkout's ``sql/`` and then cut down by the case's
statements: the check helpers without their ``SET search_path`` (a design),
the rules computed in PL/pgSQL instead of the SQL function (a design), the
dispatch trigger firing under another condition than the installed one (a
design), then the jobs table without the dispatch trigger, without any
trigger, without its CHECK constraints, without its secondary indexes (what
each costs); enqueue_many() of 100 jobs per call beside. Each case
calls its statement ``--calls`` times from one connection, every call its own
transaction, in interleaved rounds. Reported: the CPU time the server backend
spent per call (from /proc/PID/schedstat: a busy machine disturbs it far less
than wall time) and calls/s.

    .venv/bin/python -m bench.enqueue_breakdown --rounds 5 --calls 2000
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import psycopg

from bench.harness.postgres import private_databases

RAW_TABLE = (
    "CREATE TABLE public.raw_jobs (id bigserial PRIMARY KEY, task text NOT NULL, args jsonb NOT NULL DEFAULT '{}',"
    " run_at timestamptz NOT NULL DEFAULT now())"
)
HELPERS = (
    "_check_job(text, text, jsonb, integer, timestamptz, integer, text, text[], text, bigint)",
    "_check_tenant(text)",
    "_check_payload(jsonb, integer, bigint)",
    "_check_command_task(text, text)",
    "_check_run_options(interval, text, bigint)",
    "_tenant_scope()",
)
NO_SET = [f"ALTER FUNCTION pgsched.{h} RESET search_path" for h in HELPERS]
NO_TRIGGERS = [*NO_SET, "ALTER TABLE pgsched.jobs DISABLE TRIGGER USER"]
NO_CHECKS = [
    *NO_TRIGGERS,
    "DO $$ DECLARE c text; BEGIN FOR c IN SELECT conname FROM pg_constraint"
    " WHERE conrelid = 'pgsched.jobs'::regclass AND contype = 'c'"
    " LOOP EXECUTE format('ALTER TABLE pgsched.jobs DROP CONSTRAINT %I', c); END LOOP; END $$",
]
BARE = [
    *NO_CHECKS,
    "DO $$ DECLARE i text; BEGIN FOR i IN SELECT indexrelid::regclass::text FROM pg_index"
    " WHERE indrelid = 'pgsched.jobs'::regclass AND NOT indisprimary"
    " LOOP EXECUTE 'DROP INDEX ' || i; END LOOP; END $$",
]
ENQUEUE = "SELECT pgsched.enqueue('noop')"
ENQUEUE_MANY = "SELECT count(*) FROM pgsched.enqueue_many(array_fill('noop'::text, ARRAY[100]))"
# enqueue() and enqueue_many() stamp the dispatch columns in their INSERT; the
# trigger fires for rows they did not stamp: the landed test is "not the
# owner, or dispatch_at NULL" (the columns have no default); the other design
# trusts the transaction-local mark the trusted writers set; the last one
# fires it for every row (the cost of stamping twice).
TRIGGER_WHEN_MARK = [
    "DO $$ BEGIN EXECUTE format('CREATE OR REPLACE TRIGGER tg_jobs__dispatch BEFORE INSERT ON pgsched.jobs"
    " FOR EACH ROW WHEN (CURRENT_USER <> %L OR current_setting(''pgsched.trusted_insert'', true)"
    " IS DISTINCT FROM ''on'') EXECUTE FUNCTION pgsched.tg_jobs__dispatch()', current_user); END $$"
]
TRIGGER_ALWAYS = [
    "CREATE OR REPLACE TRIGGER tg_jobs__dispatch BEFORE INSERT ON pgsched.jobs"
    " FOR EACH ROW EXECUTE FUNCTION pgsched.tg_jobs__dispatch()"
]
BARE_INSERT = (
    "WITH j AS (INSERT INTO pgsched.jobs (id, shard, task, attempt, dispatch_group, dispatch_rank, dispatch_at)"
    " VALUES (nextval('pgsched.jobs_id_seq'), 3, 'noop', 0, '', 0, now()) RETURNING id)"
    " SELECT pg_notify('pgsched_jobs', 'default') FROM j"
)

#: case -> (statements that shape its database, the timed statement)
CASES: dict[str, tuple[list[str], str]] = {
    "raw INSERT + pg_notify": (
        [],
        "WITH j AS (INSERT INTO public.raw_jobs (task) VALUES ('noop') RETURNING id)"
        " SELECT pg_notify('raw', '') FROM j",
    ),
    "pgsched.enqueue()": ([], ENQUEUE),
    "plain INSERT INTO pgsched.jobs": ([], "INSERT INTO pgsched.jobs (task) VALUES ('noop')"),
    "design: stamped, WHEN trusted mark": (TRIGGER_WHEN_MARK, ENQUEUE),
    "design: stamped and trigger too": (TRIGGER_ALWAYS, ENQUEUE),
    "enqueue_many(100 jobs)": ([], ENQUEUE_MANY),
    "enqueue_many(100), trigger too": (TRIGGER_ALWAYS, ENQUEUE_MANY),
    "design: helpers without SET": (NO_SET, ENQUEUE),
    "design: + rules in PL/pgSQL": (NO_SET, ENQUEUE),  # _check_job rewritten below
    "cut: no dispatch trigger": ([*NO_SET, "ALTER TABLE pgsched.jobs DISABLE TRIGGER tg_jobs__dispatch"], ENQUEUE),
    "cut: no trigger": (NO_TRIGGERS, ENQUEUE),
    "cut: no trigger, no CHECK": (NO_CHECKS, ENQUEUE),
    "cut: bare table": (BARE, ENQUEUE),
    "bare table, INSERT + pg_notify": (BARE, BARE_INSERT),
}
SQL_DIR = Path(__file__).resolve().parent.parent / "sql" / "functions"


def rules_in_plpgsql() -> str:
    """_job_problem's rules as a PL/pgSQL function, and _check_job calling it."""
    problem = (SQL_DIR / "_job_problem.sql").read_text()
    body = problem[problem.index("SELECT CASE") : problem.rindex("$$;")].replace("SELECT CASE", "RETURN CASE", 1)
    check = (SQL_DIR / "_check_job.sql").read_text()
    check = check[check.index("CREATE OR REPLACE FUNCTION") :]
    check = check.replace("pgsched._job_problem(", "pgsched._job_problem_pl(", 1)
    check = check.replace("SET search_path = pg_catalog, pgsched, pg_temp\n", "", 1)
    return (
        "CREATE FUNCTION pgsched._job_problem_pl(p_task text, p_queue text, p_args jsonb, p_priority integer,"
        " p_run_at timestamptz, p_max_attempts integer, p_key text, p_labels text[], p_tenant text)"
        " RETURNS text LANGUAGE plpgsql IMMUTABLE AS $f$ BEGIN " + body.rstrip() + "; END $f$;\n" + check
    )


def _cpu_ns(pid: int) -> int:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def install(dsn: str, case: str, statements: list[str]) -> None:
    from pgsched.db import schema

    with psycopg.connect(dsn, autocommit=True) as conn:
        schema.install_fresh(conn, shards=8)
        conn.execute(RAW_TABLE)
        for statement in statements:
            conn.execute(statement.encode())
        if case == "design: + rules in PL/pgSQL":
            conn.execute(rules_in_plpgsql().encode())


def measure(dsn: str, statement: str, calls: int) -> tuple[float, float]:
    """(server CPU µs per call, calls/s)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(50):
            conn.execute(statement)
        pid = conn.info.backend_pid
        cpu = _cpu_ns(pid)
        started = time.perf_counter()
        for _ in range(calls):
            conn.execute(statement)
        elapsed = time.perf_counter() - started
        cpu = _cpu_ns(pid) - cpu
        conn.execute("TRUNCATE pgsched.jobs, public.raw_jobs")
    return cpu / calls / 1000, calls / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000, help="calls per case per round")
    opts = parser.parse_args()
    with private_databases([f"enq{i}" for i in range(len(CASES))]) as databases:
        dsns = dict(zip(CASES, databases.values(), strict=True))
        for case, (statements, _) in CASES.items():
            install(dsns[case], case, statements)
        cpu: dict[str, list[float]] = {case: [] for case in CASES}
        rate: dict[str, list[float]] = {case: [] for case in CASES}
        for _ in range(opts.rounds):
            for case, (_, statement) in CASES.items():
                used, calls_per_s = measure(dsns[case], statement, opts.calls)
                cpu[case].append(used)
                rate[case].append(calls_per_s)
        raw = statistics.median(cpu["raw INSERT + pg_notify"])
        enqueue = statistics.median(cpu["pgsched.enqueue()"])
        for case in CASES:
            used = statistics.median(cpu[case])
            print(
                f"{case:>32}: server CPU {used:7.1f} us/call ({used / raw:4.2f}x raw,"
                f" {used / enqueue:4.2f}x enqueue)  {statistics.median(rate[case]):6.0f} calls/s"
                f" (medians of {opts.rounds} rounds of {opts.calls} calls)",
                flush=True,
            )


if __name__ == "__main__":
    main()
