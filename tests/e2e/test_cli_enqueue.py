"""`pgsched enqueue` end to end: every option lands in pgsched.jobs; bad input is refused and leaves nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.e2e.clirun import Cli, connect, count_jobs, run


def test_enqueue_prints_the_id_and_stores_every_option(dsn: str) -> None:
    cli = Cli(dsn)
    result = cli.ok(
        "enqueue", "mail.send_welcome", '{"user_id": 42, "tags": ["a"]}',
        "--queue", "emails", "--run-at", "2030-01-31T09:00:00+01:00", "--priority", "7",
        "--idempotency-key", "welcome-42", "--max-attempts", "3", "--labels", "gpu, eu",
        "--tenant", "acme",
    )  # fmt: skip

    job_id = int(result.out.strip())
    with connect(dsn) as conn:
        row = conn.execute("SELECT * FROM pgsched.jobs WHERE id = %s", [job_id]).fetchone()
    assert row is not None
    assert (row["task"], row["args"], row["queue"], row["state"]) == (
        "mail.send_welcome", {"user_id": 42, "tags": ["a"]}, "emails", "scheduled",
    )  # fmt: skip
    assert row["run_at"] == datetime(2030, 1, 31, 8, 0, tzinfo=UTC)
    assert (row["priority"], row["idempotency_key"], row["max_attempts"]) == (7, "welcome-42", 3)
    assert (row["labels"], row["tenant"]) == (["gpu", "eu"], "acme")


def test_json_output_and_defaults_with_dsn_option(dsn: str) -> None:
    result = run("--dsn", dsn, "enqueue", "t.plain", "--json")
    assert result.code == 0, str(result)

    job = result.json()
    assert isinstance(job["id"], int)
    assert (job["task"], job["queue"], job["state"], job["table"]) == ("t.plain", "default", "available", "jobs")
    with connect(dsn) as conn:
        row = conn.execute("SELECT args, priority, labels FROM pgsched.jobs WHERE id = %s", [job["id"]]).fetchone()
    assert row == {"args": {}, "priority": 0, "labels": []}


@pytest.mark.parametrize(("delay", "seconds"), [("5m", 300), ("90", 90), ("1h30m", 5400), ("2h", 7200)])
def test_delay_counts_from_the_database_clock(dsn: str, delay: str, seconds: int) -> None:
    job = Cli(dsn).json("enqueue", "t.later", "--delay", delay)

    assert job["state"] == "scheduled"
    with connect(dsn) as conn:
        row = conn.execute("SELECT run_at - created_at AS wait FROM pgsched.jobs WHERE id = %s", [job["id"]]).fetchone()
    assert row == {"wait": timedelta(seconds=seconds)}


def test_a_repeated_idempotency_key_returns_the_first_job(dsn: str) -> None:
    cli = Cli(dsn)
    first = cli.ok("enqueue", "t.once", '{"n": 1}', "--idempotency-key", "k-1").out
    second = cli.ok("enqueue", "t.once", '{"n": 1}', "--idempotency-key", "k-1", "--priority", "5").out

    assert first == second
    with connect(dsn) as conn:
        assert count_jobs(conn) == 1


def test_a_repeated_idempotency_key_with_other_args_is_refused(dsn: str) -> None:
    cli = Cli(dsn)
    first = cli.ok("enqueue", "t.once", '{"n": 1}', "--idempotency-key", "k-1").out.strip()
    result = cli("enqueue", "t.once", '{"n": 2}', "--idempotency-key", "k-1")

    assert result.code == 1, str(result)
    assert f"idempotency_key 'k-1' is held by job {first} with other args" in result.err
    assert result.out == ""
    with connect(dsn) as conn:
        assert count_jobs(conn) == 1


def test_args_can_come_from_stdin(dsn: str) -> None:
    job_id = int(Cli(dsn).ok("enqueue", "t.piped", "-", stdin='{"from": "stdin"}\n').out)

    with connect(dsn) as conn:
        row = conn.execute("SELECT args FROM pgsched.jobs WHERE id = %s", [job_id]).fetchone()
    assert row == {"args": {"from": "stdin"}}


@pytest.mark.parametrize(
    ("args_json", "message"),
    [
        ("{bad", "arguments are not valid JSON"),
        ("", "arguments are not valid JSON"),
        ('{"x": NaN}', "NaN is not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('"text"', "not a string"),
        ("42", "not a number"),
        ("null", "not null"),
    ],
)
def test_bad_args_are_refused_and_nothing_is_enqueued(dsn: str, args_json: str, message: str) -> None:
    result = Cli(dsn)("enqueue", "t.work", args_json)

    assert result.code == 1, str(result)
    assert result.err.startswith("error: ")
    assert message in result.err
    assert "Traceback" not in result.err
    assert result.out == ""
    with connect(dsn) as conn:
        assert count_jobs(conn) == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--delay", "5x"], "is not a duration"),
        (["--delay", "-5m"], "is not a duration"),
        (["--run-at", "tomorrow"], "is not an ISO 8601 time"),
        (["--delay", "5m", "--run-at", "2030-01-01T00:00:00Z"], "either --delay or --run-at"),
        (["--max-attempts", "0"], "--max-attempts"),
        (["--priority", "high"], "--priority"),
        (["--priority", "99999999999"], "99999999999 is not in the range -1000000<=x<=1000000"),
        (["--priority", "1000001"], "--priority"),
        (["--max-attempts", "99999999999"], "--max-attempts"),
    ],
)
def test_bad_options_are_usage_errors(dsn: str, options: list[str], message: str) -> None:
    result = Cli(dsn)("enqueue", "t.work", *options)

    assert result.code == 2, str(result)
    assert message in result.err
    assert "migrate" not in result.err
    with connect(dsn) as conn:
        assert count_jobs(conn) == 0


def test_a_job_the_database_refuses_is_one_line_naming_the_constraint(dsn: str) -> None:
    result = Cli(dsn)("enqueue", "not a task name!")

    assert result.code == 1, str(result)
    assert result.err.startswith("error: ")
    assert "jobs_task_valid" in result.err
    assert "task 'not a task name!'" in result.err
    assert "Traceback" not in result.err
    with connect(dsn) as conn:
        assert count_jobs(conn) == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--labels", "gpu", "--idempotency-key", "k" * 1001], "idempotency_key 'kkk"),
        (["--queue", "no spaces"], "queue 'no spaces'"),
        (["--tenant", ""], "tenant ''"),
    ],
)
def test_a_refused_value_is_named_not_a_partition(dsn: str, options: list[str], message: str) -> None:
    result = Cli(dsn)("enqueue", "t.work", *options)

    assert result.code == 1, str(result)
    assert message in result.err
    assert "jobs_s" not in result.err
    assert "migrate" not in result.err
    with connect(dsn) as conn:
        assert count_jobs(conn) == 0


def test_database_url_is_honoured(dsn: str) -> None:
    result = run("enqueue", "t.via_url", env={"DATABASE_URL": dsn})

    assert result.code == 0, str(result)
    with connect(dsn) as conn:
        assert count_jobs(conn) == 1


def test_without_any_database_the_error_says_how_to_configure_one() -> None:
    result = run("enqueue", "t.work")  # no DSN, embedded fallback off

    assert result.code == 1, str(result)
    assert "no database configured" in result.err
    assert "PGSCHED_DSN" in result.err
