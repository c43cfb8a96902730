"""Python's limits and policy names (pgsched.core.limits, pgsched.core.policies) agree with the installed schema.

The database is the authority on job values; Python repeats a few checks to save a round trip. Each limit is
held here to the rule it repeats at the limit and one past it: for a job's values, _job_problem and
_run_options_problem (the one check every writer of pgsched.jobs runs; the table has no CHECKs for them); for
the other tables, the CHECK constraint, evaluated by the installed catalog's own expression. Each policy enum
is held to the list of its CHECK (pg_get_constraintdef) or of the function that checks it.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any

import pytest
from psycopg import sql

from pgsched import errors
from pgsched.api.dispatch import CLEARABLE
from pgsched.core import limits
from pgsched.core.job import ACTIVE_STATES, TERMINAL_STATES, JobState
from pgsched.core.policies import (
    ConcurrencyPolicy,
    ConflictPolicy,
    DependencyPolicy,
    GapPolicy,
    KeyScope,
    MisfirePolicy,
    OverlapPolicy,
    values,
)
from tests.sql.helpers import Conn, refused, scalar


def _constraint(conn: Conn, table: str, name: str) -> dict[str, Any]:
    row = conn.execute(
        "SELECT pg_get_expr(conbin, conrelid) AS expr, pg_get_constraintdef(oid) AS definition FROM pg_constraint"
        " WHERE conrelid = %s::regclass AND conname = %s AND contype = 'c'",
        (f"pgsched.{table}", name),
    ).fetchone()
    assert row is not None, f"no CHECK {name} on pgsched.{table}"
    return row


def check_passes(conn: Conn, table: str, name: str, **columns: tuple[Any, str]) -> bool:
    """Whether CHECK ``name`` of pgsched.``table`` lets these column values (value, SQL type) through, evaluated
    by the constraint's own expression from the catalog (NULL passes, as in a CHECK)."""
    expr = _constraint(conn, table, name)["expr"]
    cells = sql.SQL(", ").join(
        sql.SQL("{}::{} AS {}").format(sql.Placeholder(), sql.SQL(kind), sql.Identifier(column))
        for column, (_value, kind) in columns.items()
    )
    query = sql.SQL("SELECT coalesce(({}), true) AS ok FROM (SELECT {}) AS row").format(sql.SQL(expr), cells)
    return bool(scalar(conn, query, [value for value, _kind in columns.values()]))


def job_problem(conn: Conn, **values: Any) -> str | None:
    """pgsched._job_problem for a job that is valid except for ``values``."""
    job = {"task": "t", "queue": "default", "priority": 0, "max_attempts": None, "key": None, "tenant": None}
    job.update(values)
    return scalar(  # type: ignore[no-any-return]
        conn,
        "SELECT pgsched._job_problem(%(task)s, %(queue)s, '{}'::jsonb, %(priority)s::integer, now(),"
        " %(max_attempts)s::integer, %(key)s, '{}'::text[], %(tenant)s) AS rule",
        job,
    )


# --- limits ----------------------------------------------------------------------------------------------------------


def test_priority_range_is_job_problems(conn: Conn) -> None:
    for value, ok in (
        (limits.PRIORITY_MIN, True),
        (limits.PRIORITY_MAX, True),
        (limits.PRIORITY_MIN - 1, False),
        (limits.PRIORITY_MAX + 1, False),
    ):
        assert (job_problem(conn, priority=value) is None) is ok, value


def test_a_jobs_values_have_one_owner_not_checks_as_well(conn: Conn) -> None:
    """PostgreSQL reads a table's CHECKs from the catalog again for every statement that writes it: pgsched.jobs
    keeps only the invariant of its state and lease (and the shard's range), and its values are checked once, by
    the functions every writer runs."""
    names = [
        row["conname"]
        for row in conn.execute(
            "SELECT conname FROM pg_constraint WHERE conrelid = 'pgsched.jobs'::regclass AND contype = 'c'"
            " ORDER BY conname"
        ).fetchall()
    ]
    assert names == ["jobs_shard_range", "jobs_state_valid"]


@pytest.mark.parametrize("table", ["tasks", "schedules"])
def test_max_attempts_range_is_the_checks(conn: Conn, table: str) -> None:
    low, high = limits.MAX_ATTEMPTS_MIN, limits.MAX_ATTEMPTS_MAX
    positive, in_range = f"{table}_max_attempts_positive", f"{table}_max_attempts_range"
    assert check_passes(conn, table, positive, max_attempts=(low, "integer"))
    assert not check_passes(conn, table, positive, max_attempts=(low - 1, "integer"))
    assert check_passes(conn, table, in_range, max_attempts=(high, "integer"))
    assert not check_passes(conn, table, in_range, max_attempts=(high + 1, "integer"))


def test_max_attempts_range_is_job_problems(conn: Conn) -> None:
    assert job_problem(conn, max_attempts=limits.MAX_ATTEMPTS_MIN) is None
    assert job_problem(conn, max_attempts=limits.MAX_ATTEMPTS_MAX) is None
    assert job_problem(conn, max_attempts=limits.MAX_ATTEMPTS_MIN - 1) == "jobs_max_attempts_positive"
    assert job_problem(conn, max_attempts=limits.MAX_ATTEMPTS_MAX + 1) == "jobs_max_attempts_range"


def test_max_attempts_out_of_range_is_refused_by_enqueue_naming_the_value(conn: Conn) -> None:
    with refused("23514", "jobs_max_attempts_range") as info:
        conn.execute("SELECT pgsched.enqueue('t', max_attempts => %s)", (limits.MAX_ATTEMPTS_MAX + 1,))
    assert f"max_attempts {limits.MAX_ATTEMPTS_MAX + 1} is out of range" in str(info.value)
    assert info.value.diag.column_name == "max_attempts"


TASK_NAMES = [
    "t",
    "_",
    "send_email",
    "app.tasks:send-email",
    "A9",
    "9a",
    ".a",
    "-a",
    ":a",
    "a b",
    "a/b",
    "a$",
    "é",
    "a\n",
    "a" * limits.TASK_NAME_MAX,
    "a" * (limits.TASK_NAME_MAX + 1),
    "_" + "9" * (limits.TASK_NAME_MAX - 1),
    "",
]


@pytest.mark.parametrize("name", TASK_NAMES)
def test_task_name_pattern_is_job_problems_and_the_schedules_check(conn: Conn, name: str) -> None:
    ok = limits.TASK_NAME.fullmatch(name) is not None
    assert check_passes(conn, "schedules", "schedules_task_valid", task=(name, "text")) is ok
    assert (job_problem(conn, task=name) is None) is ok


def test_misfire_cap_range_is_the_check(conn: Conn) -> None:
    for value, ok in ((1, True), (limits.MISFIRE_CAP_MAX, True), (0, False), (limits.MISFIRE_CAP_MAX + 1, False)):
        assert check_passes(conn, "schedules", "schedules_misfire_cap_range", misfire_cap=(value, "integer")) is ok


@pytest.mark.parametrize("column", ["concurrency", "key_concurrency"])
def test_queue_concurrency_range_is_the_check(conn: Conn, column: str) -> None:
    other = "key_concurrency" if column == "concurrency" else "concurrency"
    for value, ok in ((1, True), (limits.QUEUE_CONCURRENCY_MAX, True), (limits.QUEUE_CONCURRENCY_MAX + 1, False)):
        passes = check_passes(
            conn, "queues", "queues_concurrency_range", **{column: (value, "integer"), other: (None, "integer")}
        )
        assert passes is ok, (column, value)


def _limits_refused(conn: Conn, memory: int | None, cpus: float | None) -> bool:
    try:
        conn.execute("SELECT pgsched._check_resource_limits(%s::integer, %s::real)", (memory, cpus))
    except Exception:
        return True
    return False


def test_resource_limits_are_check_resource_limits(conn: Conn) -> None:
    for memory, ok in (
        (0, True),
        (limits.MEMORY_LIMIT_MIN, True),
        (limits.MEMORY_LIMIT_MAX, True),
        (limits.MEMORY_LIMIT_MIN - 1, False),
        (limits.MEMORY_LIMIT_MAX + 1, False),
    ):
        assert _limits_refused(conn, memory, None) is not ok, memory
    for cpus, ok in (
        (0.0, True),
        (limits.CPU_LIMIT_MIN, True),
        (limits.CPU_LIMIT_MAX, True),
        (limits.CPU_LIMIT_MIN / 2, False),
        (limits.CPU_LIMIT_MAX + 1, False),
    ):
        assert _limits_refused(conn, None, cpus) is not ok, cpus
        for column in ("command_cpu_limit", "service_cpu_limit"):
            row: dict[str, tuple[Any, str]] = {
                "command_memory_limit": (None, "integer"),
                "service_memory_limit": (None, "integer"),
                "command_cpu_limit": (None, "real"),
                "service_cpu_limit": (None, "real"),
            }
            row[column] = (cpus, "real")
            passes = check_passes(conn, "config", "config_resource_limits_range", **row)
            assert passes is (ok and cpus != 0), (column, cpus)


def test_the_rules_errors_states_in_words_have_the_checks_numbers(conn: Conn) -> None:
    """errors.py (layer 0, below core) words the jobs' rules for errors PostgreSQL raises itself (the CHECKs left
    on pgsched.jobs); its numbers are the constraints'."""
    assert errors._JOB_RULES
    for name, text in errors._JOB_RULES.items():
        definition = _constraint(conn, "jobs", name)["definition"]
        allowed = set(re.findall(r"-?\d+", definition)) | {"0", "1"}
        assert set(re.findall(r"-?\d+", text)) <= allowed, (name, text, definition)


def test_run_options_problem_is_the_rule(conn: Conn) -> None:
    """A job's timeout and concurrency_key: no limit in Python, one rule in SQL."""
    for timeout, ok in (("1 microsecond", True), ("0", False), ("-1 second", False)):
        problem = scalar(conn, "SELECT pgsched._run_options_problem(%s::interval, NULL) AS p", (timeout,))
        assert (problem is None) is ok, timeout
    for key, ok in (("k", True), ("k" * 200, True), ("", False), ("k" * 201, False)):
        problem = scalar(conn, "SELECT pgsched._run_options_problem(NULL, %s) AS p", (key,))
        assert (problem is None) is ok, len(key)


# --- policy names ----------------------------------------------------------------------------------------------------


def _check_list(conn: Conn, table: str, name: str) -> list[str]:
    """The quoted values of a CHECK (column IN (...)), in their order."""
    return re.findall(r"'([^']*)'::", _constraint(conn, table, name)["definition"])


@pytest.mark.parametrize(
    ("policy", "table", "constraint"),
    [
        (GapPolicy, "schedules", "schedules_gap_policy_valid"),
        (OverlapPolicy, "schedules", "schedules_overlap_policy_valid"),
        (MisfirePolicy, "schedules", "schedules_misfire_policy_valid"),
        (ConcurrencyPolicy, "schedules", "schedules_concurrency_valid"),
        (KeyScope, "idempotency_keys", "idempotency_keys_scope_valid"),
        (DependencyPolicy, "job_dependencies", "job_dependencies_on_failure_valid"),
    ],
)
def test_policy_enum_is_its_checks_list(conn: Conn, policy: type[StrEnum], table: str, constraint: str) -> None:
    assert values(policy) == _check_list(conn, table, constraint)


def _function_list(conn: Conn, function: str, pattern: str) -> list[str]:
    """The quoted values of the first ``pattern`` (a regex with one group around the list) in the installed
    function's source."""
    source = scalar(conn, "SELECT prosrc FROM pg_proc WHERE oid = %s::regproc", (f"pgsched.{function}",))
    found = re.search(pattern, source, re.DOTALL)
    assert found is not None, f"pgsched.{function} no longer checks its list as {pattern!r}"
    return re.findall(r"'([^']*)'", found.group(1))


def test_conflict_policy_is_the_list_enqueue_checks(conn: Conn) -> None:
    assert values(ConflictPolicy) == _function_list(conn, "enqueue", r"on_conflict NOT IN \(([^)]*)\)")


def test_key_scope_and_dependency_policy_are_the_lists_enqueue_checks(conn: Conn) -> None:
    assert values(KeyScope) == _function_list(conn, "enqueue", r"key_scope NOT IN \(([^)]*)\)")
    assert values(DependencyPolicy) == _function_list(conn, "enqueue", r"on_dependency_failure NOT IN \(([^)]*)\)")


def test_clearable_queue_settings_are_the_list_configure_queue_checks(conn: Conn) -> None:
    listed = _function_list(conn, "configure_queue", r"c NOT IN \(([^)]*)\)")
    assert list(CLEARABLE) == listed


@pytest.mark.parametrize("value", values(ConflictPolicy))
def test_enqueue_takes_every_conflict_policy(conn: Conn, value: str) -> None:
    first = scalar(conn, "SELECT pgsched.enqueue('t', idempotency_key => 'k', on_conflict => %s)", (value,))
    again = scalar(conn, "SELECT pgsched.enqueue('t', idempotency_key => 'k', on_conflict => %s)", (value,))
    assert again == first


def test_job_states_are_the_catalogs(conn: Conn) -> None:
    listed = scalar(conn, "SELECT enum_range(NULL::pgsched.job_state)::text[] AS states")
    assert values(JobState) == listed
    assert [*ACTIVE_STATES, *TERMINAL_STATES] == listed
    assert list(TERMINAL_STATES) == _check_list(conn, "job_history", "job_history_state_terminal")
