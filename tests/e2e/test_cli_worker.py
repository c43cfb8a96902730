"""`pgsched worker --burst` end to end: jobs enqueued with the CLI are run by a worker subprocess."""

from __future__ import annotations

from tests.e2e.clirun import Cli, connect, current

APP = "tests.e2e.sample_app:app"


def test_burst_worker_runs_every_job_then_exits(dsn: str) -> None:
    cli = Cli(dsn)
    ids = {
        "add": int(cli.ok("enqueue", "sample.add", '{"a": 2, "b": 3}', "--queue", "sample").out),
        "greet": int(cli.ok("enqueue", "sample.greet", '{"name": "ada"}', "--queue", "sample").out),
        "whoami": int(cli.ok("enqueue", "sample.whoami", "--queue", "sample").out),
        "broken": int(cli.ok("enqueue", "sample.broken", '{"reason": "no"}', "--queue", "sample").out),
        "elsewhere": int(cli.ok("enqueue", "sample.add", '{"a": 1, "b": 1}', "--queue", "other").out),
    }

    result = cli("worker", "--app", APP, "--queues", "sample", "--burst", "--concurrency", "2")

    assert result.code == 0, str(result)
    with connect(dsn) as conn:
        jobs = {name: current(conn, job_id) for name, job_id in ids.items()}
    finished = {name: (j["tbl"], j["state"], j.get("result")) for name, j in jobs.items() if j is not None}
    assert finished == {
        "add": ("job_history", "completed", 5),
        "greet": ("job_history", "completed", "hello ada"),
        "whoami": ("job_history", "completed", {"job_id": ids["whoami"], "attempt": 1}),
        "broken": ("job_history", "dead", None),
        "elsewhere": ("jobs", "available", None),
    }
    dead = cli.json("dlq")
    assert [(d["id"], d["error"]) for d in dead] == [(ids["broken"], "gave up: no")]
    with connect(dsn) as conn:
        assert conn.execute("SELECT count(*) AS n FROM pgsched.workers").fetchone() == {"n": 0}


def test_worker_with_an_app_that_does_not_import(dsn: str) -> None:
    result = Cli(dsn)("worker", "--app", "tests.e2e.no_such_module:app", "--burst")

    assert result.code == 1
    assert "cannot import 'tests.e2e.no_such_module'" in result.err
