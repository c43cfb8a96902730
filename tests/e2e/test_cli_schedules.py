"""`pgsched schedules pause|resume|remove` end to end, as text and as JSON, and for a name nobody knows."""

from __future__ import annotations

from tests.e2e.clirun import Cli, connect


def enabled(dsn: str, name: str) -> bool | None:
    with connect(dsn) as conn:
        row = conn.execute("SELECT enabled FROM pgsched.schedules WHERE name = %s", [name]).fetchone()
    return None if row is None else bool(row["enabled"])


def test_pause_resume_and_remove_change_the_schedule(dsn: str) -> None:
    cli = Cli(dsn)
    cli.ok("schedules", "add", "cli.nightly", "0 2 * * *", "t.nightly")

    assert cli.ok("schedules", "pause", "cli.nightly").out.strip() == "schedule cli.nightly paused"
    assert enabled(dsn, "cli.nightly") is False
    assert cli.json("schedules", "resume", "cli.nightly") == {"name": "cli.nightly", "paused": False}
    assert enabled(dsn, "cli.nightly") is True
    assert cli.json("schedules", "pause", "cli.nightly") == {"name": "cli.nightly", "paused": True}
    assert enabled(dsn, "cli.nightly") is False
    removed = cli.json("schedules", "remove", "cli.nightly")
    assert removed["name"] == "cli.nightly"
    assert removed["removed"] is True
    assert isinstance(removed["withdrawn"], int)
    assert enabled(dsn, "cli.nightly") is None


def test_an_unknown_schedule_is_an_error_and_changes_nothing(dsn: str) -> None:
    cli = Cli(dsn)
    for verb in ("pause", "resume", "remove"):
        for extra in ((), ("--json",)):
            result = cli("schedules", verb, "cli.nobody", *extra)
            assert result.code == 1, str(result)
            assert "no schedule named 'cli.nobody'" in result.err
            assert result.out == ""
