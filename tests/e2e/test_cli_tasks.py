"""`pgsched tasks sync --app` registers task policies without a worker; `pgsched enqueue` catches a typo'd task."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from pgsched.cli import main
from tests.e2e.clirun import _SCRUBBED, connect

APP = "tests.e2e.sample_app:app"


def invoke(dsn: str, *args: str) -> tuple[int, str, str]:
    env: dict[str, str | None] = {name: None for name in _SCRUBBED} | {"PGSCHED_DSN": dsn, "PGSCHED_NO_EMBEDDED": "1"}
    result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def enqueued(dsn: str, task: str) -> list[dict[str, Any]]:
    with connect(dsn) as conn:
        return conn.execute("SELECT max_attempts, queue FROM pgsched.jobs WHERE task = %s", [task]).fetchall()


def test_tasks_sync_registers_the_apps_policies_for_sql_and_cli_enqueues(dsn: str) -> None:
    code, out, err = invoke(dsn, "tasks", "sync", "--app", APP, "--json")
    assert code == 0, err
    synced = json.loads(out)
    assert "sample.broken" in synced["tasks"]
    assert synced["changed"] == len(synced["tasks"])

    with connect(dsn) as conn:
        conn.execute("SELECT pgsched.enqueue('sample.broken', '{}')")
    assert enqueued(dsn, "sample.broken") == [{"max_attempts": 1, "queue": "default"}], "the task's max_attempts"

    code, out, err = invoke(dsn, "tasks", "sync", "--app", APP)
    assert code == 0, err
    assert "0 new or changed" in out, "a second sync changes nothing"


def test_tasks_sync_without_an_app_is_a_usage_error(dsn: str) -> None:
    code, _, err = invoke(dsn, "tasks", "sync")
    assert code == 2
    assert "--app" in err


@pytest.mark.parametrize("typo", ["sample.brokn", "sample.Broken", "sampl.broken"])
def test_a_task_name_close_to_a_registered_one_is_refused_with_a_suggestion(dsn: str, typo: str) -> None:
    assert invoke(dsn, "tasks", "sync", "--app", APP)[0] == 0

    code, _, err = invoke(dsn, "enqueue", typo)

    assert code == 1
    assert f"task {typo!r} is not registered" in err
    assert "did you mean 'sample.broken'?" in err
    assert enqueued(dsn, typo) == [], "nothing was enqueued"
    code, _, err = invoke(dsn, "enqueue", typo, "--force")
    assert code == 0, err
    assert len(enqueued(dsn, typo)) == 1


def test_an_unregistered_name_unlike_any_is_enqueued_as_before(dsn: str) -> None:
    assert invoke(dsn, "tasks", "sync", "--app", APP)[0] == 0
    code, _, err = invoke(dsn, "enqueue", "billing.invoice")
    assert code == 0, err
    assert len(enqueued(dsn, "billing.invoice")) == 1
