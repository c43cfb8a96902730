"""`pgsched stats` (once and --watch) and `pgsched queues` end to end."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from queue import Queue

import pytest

from tests.e2e.clirun import ROOT, Cli, command, connect, enqueue, environment, make_completed, make_dead

QUEUE_FIELDS = {
    "queue", "paused", "scheduled", "available", "running", "retrying", "lease_expired", "oldest_due_age_s",
    "completed_5m", "dead_5m", "cancelled_5m", "completed_per_s", "lag_p50_s", "lag_p95_s", "lag_p99_s",
    "claimed", "waiting",
}  # fmt: skip


@pytest.fixture
def busy(dsn: str) -> str:
    """Queue 'mail': 2 available, 1 scheduled, 1 running with a lapsed lease, 1 claimed by the live worker and
    waiting for a slot, 1 completed, 1 dead; a worker."""
    with connect(dsn) as conn:
        make_completed(conn, "mail")
        make_dead(conn, "mail", "boom")
        enqueue(conn, "t.slow", queue="mail")
        conn.execute(
            "SELECT pgsched.start(ARRAY[id], ARRAY[lease_token], p_now => now() - interval '1 hour') "
            "FROM pgsched.claim('w-gone', ARRAY['mail'], 1, '1 minute', p_now => now() - interval '1 hour')"
        )
        enqueue(conn, "t.waiting", queue="mail")
        conn.execute("SELECT id FROM pgsched.claim('w-live', ARRAY['mail'], 1, '1 minute')")
        enqueue(conn, "t.a", queue="mail")
        enqueue(conn, "t.b", queue="mail")
        enqueue(conn, "t.later", queue="mail", run_at=datetime(2030, 1, 1, tzinfo=UTC))
        conn.execute("SELECT pgsched.register_worker('w-live', 'host-1', 4242, ARRAY['mail'], '{}', 8, 'test')")
    return dsn


def test_stats_json(busy: str) -> None:
    snap = Cli(busy).json("stats")

    (mail,) = [q for q in snap["queues"] if q["queue"] == "mail"]
    assert set(mail) == QUEUE_FIELDS
    assert (mail["available"], mail["scheduled"], mail["running"], mail["lease_expired"]) == (2, 1, 1, 1)
    assert mail["claimed"] == 1
    assert (mail["completed_5m"], mail["dead_5m"], mail["paused"]) == (1, 1, False)
    assert mail["oldest_due_age_s"] >= 0
    assert mail["lag_p50_s"] is not None
    assert mail["lag_p50_s"] <= mail["lag_p99_s"]
    (worker,) = snap["workers"]
    assert (worker["name"], worker["host"], worker["pid"], worker["queues"]) == ("w-live", "host-1", 4242, ["mail"])
    assert (worker["running"], worker["claimed"]) == (0, 1)


def test_stats_as_tables(busy: str) -> None:
    out = Cli(busy).ok("stats").out

    assert "queues now" in out
    assert "last 5 minutes" in out
    assert "mail" in out
    assert "w-live" in out
    assert "lease expired" in out


def test_stats_on_an_empty_database(dsn: str) -> None:
    cli = Cli(dsn)
    snap = cli.json("stats")
    assert (snap["queues"], snap["workers"]) == ([], [])
    out = cli.ok("stats").out
    assert "no queues yet" in out
    assert "no live workers" in out


@contextmanager
def watching(
    dsn: str, *args: str, env: dict[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen[str], Queue[str]]]:
    """`pgsched stats --watch` in the background, its stdout lines in a queue; killed if still running."""
    proc = subprocess.Popen(
        [*command(), "stats", "--watch", "--interval", "0.2", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment({"PGSCHED_DSN": dsn, **(env or {})}),
        cwd=ROOT,
    )
    lines: Queue[str] = Queue()
    assert proc.stdout is not None
    stdout = proc.stdout
    threading.Thread(target=lambda: [lines.put(line) for line in stdout], daemon=True).start()
    try:
        yield proc, lines
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def stop_with_ctrl_c(proc: subprocess.Popen[str]) -> int:
    proc.send_signal(signal.SIGINT)
    return proc.wait(10)


def test_watch_json_prints_a_snapshot_per_interval_until_ctrl_c(busy: str) -> None:
    with watching(busy, "--json") as (proc, lines):
        snaps = [json.loads(lines.get(timeout=20)) for _ in range(3)]
        with connect(busy) as conn:
            enqueue(conn, "t.new", queue="mail")
        deadline = time.monotonic() + 10
        while True:
            snap = json.loads(lines.get(timeout=10))
            if [q["available"] for q in snap["queues"] if q["queue"] == "mail"] == [3]:
                break
            assert time.monotonic() < deadline, "the new job never showed up"
        assert stop_with_ctrl_c(proc) == 0

    assert [s["at"] for s in snaps] == sorted({s["at"] for s in snaps}), "each line is a new snapshot"
    assert all(s["workers"][0]["name"] == "w-live" for s in snaps)


def test_watch_appends_tables_when_not_a_terminal(busy: str) -> None:
    with watching(busy) as (proc, lines):
        seen: list[str] = []
        while sum("Ctrl-C to stop" in line for line in seen) < 2:
            seen.append(lines.get(timeout=20))
        assert stop_with_ctrl_c(proc) == 0

    text = "".join(seen)
    assert text.count("queues now") == 2, "two snapshots, one after the other"
    assert "mail" in text
    assert "w-live" in text
    assert "\x1b[" not in text, "no cursor moves in a pipe"


def test_watch_redraws_in_a_terminal(busy: str) -> None:
    terminal = {"TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1", "COLUMNS": "120"}
    with watching(busy, env=terminal) as (proc, lines):
        seen: list[str] = []
        while sum("Ctrl-C to stop" in line for line in seen) < 2:
            seen.append(lines.get(timeout=20))
        assert stop_with_ctrl_c(proc) == 0

    text = "".join(seen)
    assert "mail" in text
    assert "\x1b[1A" in text, "the second snapshot moves the cursor up to redraw over the first"


def test_pause_and_resume_a_queue(dsn: str) -> None:
    cli = Cli(dsn)
    with connect(dsn) as conn:
        enqueue(conn, "t.a", queue="mail")

    assert "queue mail paused" in cli.ok("queues", "pause", "mail").out
    assert [(q["queue"], q["paused"], q["available"]) for q in cli.json("queues", "list")] == [("mail", True, 1)]
    assert "PAUSED" in cli.ok("queues", "list").out
    with connect(dsn) as conn:
        claimed = conn.execute("SELECT id FROM pgsched.claim('w', ARRAY['mail'], 10, '1 minute')").fetchall()
    assert claimed == [], "a paused queue hands out nothing"

    assert cli.json("queues", "resume", "mail") == {"queue": "mail", "paused": False, "was_paused": True}
    assert cli.ok("queues", "resume", "mail").out == "queue mail was not paused\n"
    with connect(dsn) as conn:
        row = conn.execute("SELECT paused FROM pgsched.queues WHERE name = 'mail'").fetchone()
        claimed = conn.execute("SELECT id FROM pgsched.claim('w', ARRAY['mail'], 10, '1 minute')").fetchall()
    assert row == {"paused": False}
    assert len(claimed) == 1


def test_pause_json_and_an_invalid_queue_name(dsn: str) -> None:
    cli = Cli(dsn)
    assert cli.json("queues", "pause", "reports", "--force") == {"queue": "reports", "paused": True}

    result = cli("queues", "pause", "no spaces allowed", "--force")
    assert result.code == 1
    assert "queues_name_valid" in result.err


def test_queues_list_when_there_are_none(dsn: str) -> None:
    cli = Cli(dsn)
    assert cli.json("queues", "list") == []
    assert cli.ok("queues", "list").out.strip() == "no queues yet"
