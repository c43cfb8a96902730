"""The demo's printed summary: a table without an empty header row, and a start lag that says what it includes."""

from __future__ import annotations

from rich.console import Console

from pgsched.cli.demo import _print_summary
from pgsched.demo import Summary


def test_summary_has_no_empty_header_row_and_explains_the_start_lag() -> None:
    console = Console(record=True, width=200, color_system=None)
    summary = Summary(run="r1", total=300, completed=299, dead=1, expected_dead=1, lag_p50_s=0.4, lag_p99_s=1.2)
    _print_summary(console, summary)
    lines = [line for line in console.export_text().splitlines() if line.strip()]
    assert lines[0].strip() == "demo run r1"
    # Under the top border comes the first figure: no row of empty column titles, no rule under one.
    assert "jobs" in lines[2], lines[:4]
    assert lines[2].split()[1] == "jobs", lines[:4]
    p50 = next(line for line in lines if "start lag p50" in line)
    p99 = next(line for line in lines if "start lag p99" in line)
    assert "400 ms" in p50
    assert "includes the initial backlog" in p50
    assert "all 300 jobs" in p50
    assert "initial backlog" in p99
