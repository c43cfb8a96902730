"""`pgsched dlq` end to end: list dead letters and redrive them, one by one or all at once."""

from __future__ import annotations

import pytest

from tests.e2e.clirun import Cli, connect, current, enqueue, make_dead


@pytest.fixture
def dead(dsn: str) -> dict[str, int]:
    """Two dead letters on queue qa, one on qb, and a live job that must stay out of the list."""
    with connect(dsn) as conn:
        ids = {
            "a1": make_dead(conn, "qa", "KeyError: 'user'\nTraceback ...", task="t.a"),
            "a2": make_dead(conn, "qa", "TimeoutError", task="t.a"),
            "b1": make_dead(conn, "qb", "boom", task="t.b"),
        }
        enqueue(conn, "t.alive", queue="qa")
    return ids


def dead_ids(dsn: str) -> set[int]:
    with connect(dsn) as conn:
        return {r["id"] for r in conn.execute("SELECT id FROM pgsched.dead_letters").fetchall()}


def test_dlq_lists_dead_letters_most_recent_first(dsn: str, dead: dict[str, int]) -> None:
    rows = Cli(dsn).json("dlq")

    assert [r["id"] for r in rows] == [dead["b1"], dead["a2"], dead["a1"]]
    first = rows[-1]
    assert (first["queue"], first["task"], first["attempt"], first["max_attempts"]) == ("qa", "t.a", 1, 1)
    assert first["error"] == "KeyError: 'user'"
    assert first["last_worker"] == "w-e2e"
    assert first["died_at"] is not None


def test_dlq_filters_and_limits(dsn: str, dead: dict[str, int]) -> None:
    cli = Cli(dsn)
    assert [r["id"] for r in cli.json("dlq", "--queue", "qa")] == [dead["a2"], dead["a1"]]
    assert [r["id"] for r in cli.json("dlq", "list", "--queue", "qb")] == [dead["b1"]]
    assert [r["id"] for r in cli.json("dlq", "--limit", "1")] == [dead["b1"]]


def test_dlq_as_a_table(dsn: str, dead: dict[str, int]) -> None:
    out = Cli(dsn).ok("dlq", "--limit", "2").out

    assert "dead letters (2 of 3)" in out
    assert "boom" in out
    assert "TimeoutError" in out
    assert "KeyError" not in out, "the oldest dead letter is past --limit"
    assert "pgsched dlq retry" in out


TRACEBACK = """Traceback (most recent call last):
  File "/app/tasks.py", line 12, in charge
    total = compute(order)
            ^^^^^^^^^^^^^^
  File "/app/tasks.py", line 30, in compute
    raise ValueError("boom")
ValueError: boom
and a second line of the message"""


def test_dlq_shows_the_exception_of_a_traceback_and_jobs_show_keeps_it_whole(dsn: str) -> None:
    with connect(dsn) as conn:
        job_id = make_dead(conn, "qa", TRACEBACK, task="t.tb")
    cli = Cli(dsn)

    assert cli.json("dlq")[0]["error"] == "ValueError: boom"
    table = cli.ok("dlq").out
    assert "ValueError: boom" in table
    assert "Traceback (most recent" not in table
    shown = cli.ok("jobs", "show", str(job_id)).out
    assert TRACEBACK in shown
    helped = " ".join(cli.ok("dlq", "--help").out.split())
    assert "for a traceback, the exception raised" in helped
    assert "first line" not in helped


def test_an_empty_dlq(dsn: str) -> None:
    cli = Cli(dsn)
    assert cli.ok("dlq").out.strip() == "no dead letters"
    assert cli.json("dlq") == []


def test_retry_by_id(dsn: str, dead: dict[str, int]) -> None:
    out = Cli(dsn).ok("dlq", "retry", str(dead["a1"])).out

    assert out == f"{dead['a1']}: retried\n"
    assert dead_ids(dsn) == {dead["a2"], dead["b1"]}
    with connect(dsn) as conn:
        job = current(conn, dead["a1"])
    assert job is not None
    assert (job["tbl"], job["state"], job["attempt"], job["max_attempts"]) == ("jobs", "available", 1, 6)


def test_retry_all_of_one_queue(dsn: str, dead: dict[str, int]) -> None:
    result = Cli(dsn).ok("dlq", "retry", "--all", "--queue", "qa", "--yes")

    assert "redrove 2 of 2 dead letters of queue qa" in result.out
    assert dead_ids(dsn) == {dead["b1"]}


def test_retry_all_as_json(dsn: str, dead: dict[str, int]) -> None:
    results = Cli(dsn).json("dlq", "retry", "--all", "--yes")

    assert sorted(results, key=lambda r: r["id"]) == [{"id": i, "result": "retried"} for i in sorted(dead.values())]
    assert dead_ids(dsn) == set()


def test_retry_all_needs_yes_when_not_interactive(dsn: str, dead: dict[str, int]) -> None:
    result = Cli(dsn)("dlq", "retry", "--all", stdin="y\n")

    assert result.code == 1
    assert "--all would redrive 3 dead letters" in result.err
    assert "--yes" in result.err
    assert dead_ids(dsn) == set(dead.values())


def test_retry_all_with_nothing_dead(dsn: str) -> None:
    result = Cli(dsn).ok("dlq", "retry", "--all", "--yes")

    assert "no dead letters to redrive" in result.err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give job IDs or --all"),
        (["1", "--all"], "give job IDs or --all"),
        (["1", "--queue", "qa"], "--queue only applies with --all"),
    ],
)
def test_retry_usage_errors(dsn: str, args: list[str], message: str) -> None:
    result = Cli(dsn)("dlq", "retry", *args)

    assert result.code == 2
    assert message in result.err
