"""`pgsched stats --since`: per-queue totals over a window, from the per-minute rollup."""

from __future__ import annotations

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
