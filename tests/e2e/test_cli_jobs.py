"""`pgsched jobs list|show|cancel|retry` end to end, on jobs seeded in every state."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tests.e2e.clirun import Cli, claim, connect, current, enqueue, make_completed, make_dead

TRACEBACK = 'Traceback (most recent call last):\n  File "handler.py", line 3\nValueError: bad input'


@pytest.fixture
def seeded(dsn: str) -> dict[str, int]:
    """One job per state, each on a queue of its own, created in this order."""
    with connect(dsn) as conn:
        ids = {"available": enqueue(conn, "t.a", {"n": 1}, queue="qa")}
        ids["scheduled"] = enqueue(conn, "t.b", queue="qb", run_at=datetime(2030, 1, 1, tzinfo=UTC))
        ids["running"] = enqueue(conn, "t.c", queue="qc")
        claim(conn, "qc", worker="w-1")
        ids["dead"] = make_dead(conn, "qd", "ValueError: bad input\n" + TRACEBACK)
        ids["completed"] = make_completed(conn, "qe")
        ids["cancelled"] = enqueue(conn, "t.f", queue="qf")
        conn.execute("SELECT pgsched.cancel(%s)", [ids["cancelled"]])
    return ids


def test_list_shows_every_job_once_newest_first(dsn: str, seeded: dict[str, int]) -> None:
    rows = Cli(dsn).json("jobs", "list")

    assert [r["id"] for r in rows] == sorted(seeded.values(), reverse=True)
    assert {r["id"]: r["state"] for r in rows} == {v: k for k, v in seeded.items()}
    by_state = {r["state"]: r for r in rows}
    assert by_state["running"]["worker"] == "w-1"
    assert (by_state["running"]["attempt"], by_state["running"]["max_attempts"]) == (1, 5)
    assert by_state["dead"]["error"] == "ValueError: bad input", "lists show the error's first line"
    assert by_state["scheduled"]["run_at"] == "2030-01-01T00:00:00+00:00"
    assert by_state["completed"]["finished_at"] is not None


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--state", "dead"], ["dead"]),
        (["--state", "running", "--state", "available"], ["running", "available"]),
        (["--state", "completed", "--state", "scheduled"], ["completed", "scheduled"]),
        (["--queue", "qb"], ["scheduled"]),
        (["--task", "t.f"], ["cancelled"]),
        (["--queue", "qa", "--state", "dead"], []),
        (["--limit", "2"], ["cancelled", "completed"]),
    ],
)
def test_list_filters(dsn: str, seeded: dict[str, int], options: list[str], expected: list[str]) -> None:
    rows = Cli(dsn).json("jobs", "list", *options)

    assert [r["id"] for r in rows] == [seeded[s] for s in expected]


def test_a_redriven_job_is_listed_once_in_its_current_state(dsn: str, seeded: dict[str, int]) -> None:
    with connect(dsn) as conn:
        conn.execute("SELECT pgsched.retry(%s)", [seeded["dead"]])

    rows = Cli(dsn).json("jobs", "list", "--queue", "qd")

    assert [(r["id"], r["state"]) for r in rows] == [(seeded["dead"], "available")]
    assert Cli(dsn).json("jobs", "list", "--state", "dead") == []


def test_list_as_a_table(dsn: str, seeded: dict[str, int]) -> None:
    cli = Cli(dsn)
    out = cli.ok("jobs", "list").out

    for state in seeded:
        assert state in out
    assert "ValueError: bad input" in out
    assert "Traceback" not in out
    assert "1/5" in out, "attempts are shown as attempt/max_attempts"
    assert cli.ok("jobs", "list", "--task", "t.none").out.strip() == "no jobs match"


def test_list_refuses_an_unknown_state(dsn: str) -> None:
    result = Cli(dsn)("jobs", "list", "--state", "failed")

    assert result.code == 2
    assert "'failed' is not one of" in result.err


def test_show_a_dead_job_with_its_audit_trail_and_full_error(dsn: str, seeded: dict[str, int]) -> None:
    shown = Cli(dsn).json("jobs", "show", str(seeded["dead"]))

    job, events = shown["job"], shown["events"]
    assert (job["id"], job["state"], job["table"], job["queue"]) == (seeded["dead"], "dead", "job_history", "qd")
    assert job["error"] == "ValueError: bad input\n" + TRACEBACK
    assert [e["kind"] for e in events] == ["claimed", "dead"]
    assert [e["attempt"] for e in events] == [1, 1]
    assert events[0]["worker"] == "w-e2e"
    assert events[0]["at"] <= events[1]["at"]


def test_show_an_active_job(dsn: str, seeded: dict[str, int]) -> None:
    shown = Cli(dsn).json("jobs", "show", str(seeded["running"]))

    job = shown["job"]
    assert (job["state"], job["table"], job["worker"], job["attempt"]) == ("running", "jobs", "w-1", 1)
    assert job["lease_token"] is not None
    assert job["lease_expires_at"] is not None
    assert [e["kind"] for e in shown["events"]] == ["claimed"]


def test_show_as_text_prints_the_whole_error(dsn: str, seeded: dict[str, int]) -> None:
    out = Cli(dsn).ok("jobs", "show", str(seeded["dead"])).out

    assert "pgsched.job_history" in out
    assert "claimed" in out
    assert "events" in out
    assert out.rstrip().endswith(TRACEBACK)


def test_show_an_unknown_job(dsn: str) -> None:
    result = Cli(dsn)("jobs", "show", "987654")

    assert result.code == 1
    assert "job 987654 not found" in result.err


def test_cancel_reports_each_job(dsn: str, seeded: dict[str, int]) -> None:
    ids = [seeded["available"], seeded["running"], seeded["completed"], 987654]
    result = Cli(dsn)("jobs", "cancel", *map(str, ids), "--json")

    assert result.code == 1, "an unknown id makes the exit status 1"
    assert result.json() == [
        {"id": seeded["available"], "result": "cancelled"},
        {"id": seeded["running"], "result": "cancel_requested"},
        {"id": seeded["completed"], "result": "already_completed"},
        {"id": 987654, "result": "not_found"},
    ]
    with connect(dsn) as conn:
        waiting = current(conn, seeded["available"])
        running = current(conn, seeded["running"])
    assert waiting is not None
    assert (waiting["tbl"], waiting["state"]) == ("job_history", "cancelled")
    assert running is not None
    assert (running["tbl"], running["state"]) == ("jobs", "running")
    assert running["cancel_requested_at"] is not None


def test_cancel_prints_one_line_per_job(dsn: str, seeded: dict[str, int]) -> None:
    out = Cli(dsn).ok("jobs", "cancel", str(seeded["scheduled"])).out

    assert out == f"{seeded['scheduled']}: cancelled\n"


def test_retry_redrives_dead_and_cancelled_jobs(dsn: str, seeded: dict[str, int]) -> None:
    cli = Cli(dsn)
    assert cli.ok("jobs", "retry", str(seeded["dead"]), str(seeded["cancelled"])).out.splitlines() == [
        f"{seeded['dead']}: retried",
        f"{seeded['cancelled']}: retried",
    ]
    with connect(dsn) as conn:
        rows: list[Any] = [current(conn, seeded[s]) for s in ("dead", "cancelled")]
    assert [(r["tbl"], r["state"]) for r in rows] == [("jobs", "available")] * 2

    refused = cli("jobs", "retry", str(seeded["completed"]), str(seeded["dead"]), "--json")
    assert refused.code == 1
    assert refused.json() == [
        {"id": seeded["completed"], "result": "not_retryable"},
        {"id": seeded["dead"], "result": "active"},
    ]


@pytest.mark.parametrize("args", [["jobs", "cancel"], ["jobs", "retry"], ["jobs", "show", "abc"]])
def test_ids_are_required_and_numeric(dsn: str, args: list[str]) -> None:
    result = Cli(dsn)(*args)

    assert result.code == 2, str(result)


def test_waiting_jobs_are_listed_counted_and_cancelled(dsn: str) -> None:
    with connect(dsn) as conn:
        first = enqueue(conn, "t.first", queue="qw")
    cli = Cli(dsn)
    after = cli.json("enqueue", "t.after", "--queue", "qw", "--depends-on", str(first))["id"]
    assert cli.json("jobs", "show", str(after))["job"]["state"] == "waiting"
    assert [(r["id"], r["state"]) for r in cli.json("jobs", "list", "--state", "waiting")] == [(after, "waiting")]
    (qw,) = [q for q in cli.json("stats")["queues"] if q["queue"] == "qw"]
    assert (qw["waiting"], qw["available"]) == (1, 1)
    assert cli("jobs", "cancel", str(after), "--json").json() == [{"id": after, "result": "cancelled"}]
    assert cli.json("jobs", "list", "--state", "waiting") == []
