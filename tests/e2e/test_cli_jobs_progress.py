"""`pgsched jobs show`: a job's last progress report and its durable steps (in-process, with click's CliRunner)."""

from __future__ import annotations

import json

from click.testing import CliRunner
from psycopg.types.json import Jsonb

from pgsched.cli import main
from tests.e2e.clirun import claim, connect, enqueue


def _running_job_with_progress_and_steps(dsn: str) -> int:
    with connect(dsn) as conn:
        job_id = enqueue(conn, "t.steps", queue="qs")
        claim(conn, "qs", worker="w-1")
        token = conn.execute("SELECT lease_token FROM pgsched.jobs WHERE id = %s", [job_id]).fetchone()
        assert token is not None
        conn.execute(
            "SELECT pgsched.report_progress(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[], ARRAY[0.42]::real[], "
            "ARRAY['page 42 of 100'])",
            [job_id, token["lease_token"]],
        )
        for name, result in (("fetch", {"rows": 3}), ("load", "x" * 200)):
            conn.execute(
                "SELECT pgsched.record_step(%s, %s, %s, %s)", [job_id, token["lease_token"], name, Jsonb(result)]
            )
    return job_id


def test_show_prints_the_progress_and_the_steps(dsn: str) -> None:
    job_id = _running_job_with_progress_and_steps(dsn)
    result = CliRunner().invoke(main, ["--dsn", dsn, "jobs", "show", str(job_id)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "42% page 42 of 100 (at " in result.output
    assert "steps" in result.output
    assert "fetch" in result.output
    assert '{"rows": 3}' in result.output
    assert "x" * 200 not in result.output  # long results are cut in the table
    assert [e for e in result.output.splitlines() if " step " in f" {e} "], "the timeline lists the steps"


def test_show_as_json_has_progress_and_whole_steps(dsn: str) -> None:
    job_id = _running_job_with_progress_and_steps(dsn)
    result = CliRunner().invoke(main, ["--dsn", dsn, "jobs", "show", str(job_id), "--json"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    job = shown["job"]
    assert (round(job["progress"], 2), job["progress_note"]) == (0.42, "page 42 of 100")
    assert [(s["name"], s["result"]) for s in job["steps"]] == [("fetch", {"rows": 3}), ("load", "x" * 200)]
    assert [e["kind"] for e in shown["events"]] == ["claimed", "step", "step"]
