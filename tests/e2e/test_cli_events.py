"""`pgsched events` end to end: live with --follow (NOTIFY wakes it, the history is the record), resumable
from a position, and running an App's @app.on_event hooks."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from tests.e2e.clirun import ROOT, Cli, command, connect, enqueue, environment, make_completed, make_dead


class Follower:
    """`pgsched events --follow --json ...` in a subprocess; its stdout lines arrive on a queue."""

    def __init__(self, dsn: str, *args: str) -> None:
        self.proc = subprocess.Popen(
            [*command(), "events", "--follow", "--json", "--poll-interval", "30", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment({"PGSCHED_DSN": dsn}),
            cwd=ROOT,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def take(self, n: int, timeout: float = 30.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        got = []
        while len(got) < n:
            try:
                got.append(json.loads(self.lines.get(timeout=max(0.01, deadline - time.monotonic()))))
            except queue.Empty:
                err = self.proc.stderr.read() if self.proc.poll() is not None and self.proc.stderr else ""
                raise AssertionError(f"got {len(got)} of {n} events: {got}; stderr: {err}") from None
        return got

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)


def wait_listening(conn: psycopg.Connection[Any]) -> None:
    """Until the follower has taken its start position and sits waiting (its LISTEN is in place)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        row = conn.execute(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = 'pgsched events'"
            " AND state = 'idle' AND query LIKE %s",
            ["%read_events%"],
        ).fetchone()
        if row and row["n"]:
            return
        time.sleep(0.05)
    raise AssertionError("the follower never started reading")


def test_follow_prints_every_terminal_transition_live_and_resumes_from_a_position(dsn: str) -> None:
    follower = Follower(dsn)
    try:
        with connect(dsn) as conn:
            wait_listening(conn)
            done = make_completed(conn, "q1", task="t.ok")
            dead = make_dead(conn, "q2", "Traceback ...\nValueError: no")
            waiting = enqueue(conn, "t.later", queue="q3")
            conn.execute("SELECT pgsched.cancel(%s)", [waiting])
            # A poll interval of 30 s: arriving within the deadline means the NOTIFY woke it.
            got = follower.take(3, timeout=20)
    finally:
        assert follower.stop() == 0
    assert [(e["id"], e["state"], e["queue"], e["task"]) for e in got] == [
        (done, "completed", "q1", "t.ok"),
        (dead, "dead", "q2", "t.doomed"),
        (waiting, "cancelled", "q3", "t.later"),
    ]
    assert got[1]["error"].endswith("ValueError: no")
    positions = [e["position"] for e in got]
    assert positions == sorted(positions)
    assert len(set(positions)) == 3

    # While nothing follows, more jobs finish; resuming from the first position misses none of them.
    with connect(dsn) as conn:
        later = make_completed(conn, "q1")
    resumed = Follower(dsn, "--since", str(positions[0]))
    try:
        again = resumed.take(3)
    finally:
        assert resumed.stop() == 0
    assert [e["id"] for e in again] == [dead, waiting, later]

    # Without --follow: what the history holds after a position, then exit.
    cli = Cli(dsn)
    lines = cli.ok("events", "--since", str(positions[1]), "--json").out.splitlines()
    assert [json.loads(line)["id"] for line in lines] == [waiting, later]
    plain = cli.ok("events", "--state", "dead").out
    assert f"job {dead}" in plain
    assert "ValueError: no" in plain
    assert f"job {done}" not in plain


def test_hooks_of_an_app_run_for_each_event_and_the_position_file_resumes(dsn: str, tmp_path: Path) -> None:
    out = tmp_path / "hooks.txt"
    position = tmp_path / "position"
    with connect(dsn) as conn:
        done = make_completed(conn, "q1")
        dead = make_dead(conn, "q2", "boom")
    cli = Cli(dsn)
    args = ("events", "--since", "0", "--app", "tests.e2e.events_app:app", "--position-file", str(position))
    result = cli(*args, env={"EVENTS_OUT": str(out)})
    assert result.code == 0, str(result)
    assert "a broken hook does not stop the others" in result.err
    lines = out.read_text().splitlines()
    assert [line.rsplit(" ", 1)[0] for line in lines] == [
        f"every {done} completed",
        f"trouble {dead} dead",
        f"every {dead} dead",
    ]
    assert position.read_text().strip() == lines[-1].rsplit(" ", 1)[1]

    # The next run starts after the saved position: only what finished since.
    with connect(dsn) as conn:
        later = make_completed(conn, "q1")
    result = cli(
        "events", "--app", "tests.e2e.events_app:app", "--position-file", str(position), env={"EVENTS_OUT": str(out)}
    )
    assert result.code == 0, str(result)
    assert out.read_text().splitlines()[3:] == [f"every {later} completed {position.read_text().strip()}"]


def test_a_position_file_that_cannot_be_written_is_refused_before_any_event(dsn: str, tmp_path: Path) -> None:
    with connect(dsn) as conn:
        make_completed(conn, "q1")
    result = Cli(dsn)("events", "--since", "0", "--position-file", str(tmp_path / "missing" / "position"))
    assert result.code == 2, str(result)
    assert "cannot write" in result.err
    assert "--position-file" in result.err
    assert "Traceback" not in result.err
    assert result.out == ""  # nothing printed whose position could not be kept
