"""`pgsched stats --since`: per-queue totals over a window, from the per-minute rollup."""

from __future__ import annotations

from tests.conftest import drop_database, new_database
from tests.e2e.clirun import Cli, connect, make_completed, make_dead


def test_stats_since_reads_the_rollup(dsn: str) -> None:
    with connect(dsn) as conn:
        for _ in range(3):
            make_completed(conn, "mail")
        make_dead(conn, "mail", "boom")
        make_completed(conn, "reports")
        conn.execute("SELECT pgsched.rollup_queue_history()")
    cli = Cli(dsn)
    snap = cli.json("stats", "--since", "1h")
    assert snap["since_s"] == 3600
    history = {row["queue"]: row for row in snap["history"]}
    assert set(history) == {"mail", "reports"}
    assert (history["mail"]["completed"], history["mail"]["dead"]) == (3, 1)
    assert history["mail"]["completed_per_min"] == 0.05
    assert history["reports"]["completed"] == 1
    out = cli.ok("stats", "--since", "1h").out
    assert "last 1h00m (pgsched.queue_history, per minute)" in out
    assert "last 5 minutes" not in out
    refused = cli("stats", "--since", "soon")
    assert refused.code == 2
    assert "--since" in refused.err


def test_stats_refuses_a_read_dsn_of_another_database(admin_dsn: str, template_db: str, dsn: str) -> None:
    """--read-dsn must be the --dsn database or a streaming replica of it: another database's numbers (here a
    second pgsched install on the same server) would be shown as this one's."""
    name, other = new_database(admin_dsn, template_db)
    try:
        with connect(other) as conn:
            make_completed(conn, "elsewhere")
        cli = Cli(dsn)
        refused = cli("stats", "--read-dsn", other)
        assert refused.code != 0, str(refused)
        assert f"--read-dsn is database '{name}'" in refused.err, str(refused)
        assert "Traceback" not in refused.err
        assert "elsewhere" not in refused.out
        same = cli.json("stats", "--read-dsn", dsn)  # the primary itself: read, and said so
        assert same["replica"]["in_recovery"] is False
    finally:
        drop_database(admin_dsn, name)
