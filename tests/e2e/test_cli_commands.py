"""Issue 10.5 from the command line: `pgsched worker --commands` and what `pgsched jobs show` prints."""

from __future__ import annotations

from tests.e2e.clirun import Cli, connect


def test_a_worker_needs_an_app_or_commands(dsn: str) -> None:
    result = Cli(dsn)("worker", "--burst")
    assert result.code == 2, str(result)
    assert "give --app MODULE:APP (your tasks), --commands (command jobs), or both" in result.err


def test_a_commands_worker_runs_a_command_and_jobs_show_prints_its_output(dsn: str) -> None:
    cli = Cli(dsn)
    with connect(dsn) as conn:
        row = conn.execute(
            "SELECT pgsched.enqueue_command(ARRAY['sh', '-c', 'echo hello; echo warning >&2; exit 3'],"
            " max_attempts => 1) AS id"
        ).fetchone()
        assert row is not None
        job_id = row["id"]
    result = cli.ok("worker", "--commands", "--burst", "--poll-interval", "0.1")
    assert "queues=commands" in result.err
    shown = cli.ok("jobs", "show", str(job_id)).out
    assert "exit_code     3" in shown
    assert "\nstdout:\nhello\n" in shown
    assert "\nstderr:\nwarning\n" in shown
    assert "error:\ncommand exited with code 3: warning" in shown
    data = cli.json("jobs", "show", str(job_id))
    assert data["job"]["state"] == "dead"
    assert data["job"]["result"]["exit_code"] == 3
    assert data["job"]["result"]["stdout"] == "hello\n"
