"""`pgsched scanner` processes under SIGKILL and SIGSTOP, and `pgsched schedules` from a shell."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.scheduling.helpers import Conn, add_schedule, db_now, schedule, wait_for

ROOT = Path(__file__).resolve().parents[2]
SHARDS = 8
LEASE = 2.0

# A row trigger that files every write to the tables scanners write, with the writer's
# application_name ("pgsched scanner NAME"): who wrote what, and when.
AUDIT = """
CREATE TABLE public.writes (at timestamptz NOT NULL DEFAULT clock_timestamp(), app text, tbl text, op text);
CREATE FUNCTION public.file_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.writes (app, tbl, op) VALUES (current_setting('application_name'), TG_TABLE_NAME, TG_OP);
    RETURN NULL;
END $$;
CREATE TRIGGER file_write AFTER INSERT OR UPDATE OR DELETE ON pgsched.jobs
    FOR EACH ROW EXECUTE FUNCTION public.file_write();
CREATE TRIGGER file_write AFTER INSERT OR UPDATE OR DELETE ON pgsched.schedule_occurrences
    FOR EACH ROW EXECUTE FUNCTION public.file_write();
CREATE TRIGGER file_write AFTER INSERT OR UPDATE OR DELETE ON pgsched.schedules
    FOR EACH ROW EXECUTE FUNCTION public.file_write();
"""


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGSCHED_") and k not in ("DATABASE_URL", "COLUMNS")}
    env["PGSCHED_NO_EMBEDDED"] = "1"
    env["COLUMNS"] = "200"
    return env


class Process:
    """A `pgsched` subprocess whose output goes to a file (so it never blocks on a full pipe)."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.log = log
        self._out = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pgsched", *args],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            env=environment(),
            cwd=ROOT,
        )

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def stopped(self) -> bool:
        """Every thread of the process is stopped (SIGSTOP has taken effect)."""
        states = []
        for stat in Path(f"/proc/{self.proc.pid}/task").glob("*/stat"):
            try:
                states.append(stat.read_text().rsplit(")", 1)[1].split()[0])
            except (OSError, IndexError):
                return False
        return bool(states) and all(state in ("T", "t") for state in states)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._out.close()


@pytest.fixture
def spawn_scanner(dsn: str, tmp_path: Path) -> Iterator[Callable[[str], Process]]:
    started: list[Process] = []

    def spawn(name: str) -> Process:
        process = Process(["--dsn", dsn, "scanner", "--lease", str(LEASE), "--name", name], tmp_path / f"{name}.log")
        started.append(process)
        return process

    yield spawn
    for process in started:
        process.stop()


def shares(conn: Conn) -> dict[str, int]:
    rows = conn.execute(
        "SELECT owner, count(*) AS n FROM pgsched.shard_leases"
        " WHERE owner IS NOT NULL AND expires_at > clock_timestamp() GROUP BY owner"
    ).fetchall()
    return {r["owner"]: int(r["n"]) for r in rows}


def epochs(conn: Conn) -> dict[int, int]:
    return {int(r["shard"]): int(r["epoch"]) for r in conn.execute("SELECT shard, epoch FROM pgsched.shard_leases")}


def owners_epochs(conn: Conn) -> dict[str, list[int]]:
    """Owner -> the epochs of the shards it holds (leases current or not)."""
    found: dict[str, list[int]] = {}
    for r in conn.execute("SELECT owner, epoch FROM pgsched.shard_leases WHERE owner IS NOT NULL ORDER BY shard"):
        found.setdefault(r["owner"], []).append(int(r["epoch"]))
    return found


def test_a_killed_scanners_shards_are_taken_over_within_the_lease(
    conn: Conn, spawn_scanner: Callable[[str], Process]
) -> None:
    a = spawn_scanner("scanner-a")
    wait_for(lambda: shares(conn) == {"scanner-a": SHARDS}, timeout=15, what="scanner-a owning every shard")
    spawn_scanner("scanner-b")
    wait_for(lambda: shares(conn) == {"scanner-a": 4, "scanner-b": 4}, timeout=10, what="a 4/4 split")
    before = epochs(conn)

    a.signal(signal.SIGKILL)
    killed = time.monotonic()
    a.proc.wait(5)
    wait_for(lambda: shares(conn) == {"scanner-b": SHARDS}, timeout=10, interval=0.02, what="the takeover")
    elapsed = time.monotonic() - killed

    print(f"takeover after SIGKILL: {elapsed:.2f}s (lease {LEASE}s)")
    # The lease runs out at most LEASE after scanner-a's last renewal; scanner-b looks every LEASE/3.
    assert elapsed < LEASE + LEASE / 3 + 1.0, elapsed
    after = epochs(conn)
    assert sum(after[s] == before[s] + 1 for s in range(SHARDS)) == 4
    # Nothing released them: they expired (the dead scanner's row is still there).
    assert {r["name"] for r in conn.execute("SELECT name FROM pgsched.scanners")} == {"scanner-a", "scanner-b"}


def test_a_scanner_paused_past_its_lease_writes_nothing_when_it_resumes(
    dsn: str, conn: Conn, spawn_scanner: Callable[[str], Process]
) -> None:
    conn.execute(AUDIT)
    # A daily schedule whose next run is hours away: nothing falls due during the test, so any
    # write after the resume would be the paused scanner's stale expansion.
    hour = (db_now(conn) + timedelta(hours=6)).hour
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as locker:
        # Catch scanner-a between reading the schedules to expand and writing the expansion:
        # its read waits for this lock, and finds the schedule once the lock goes.
        with locker.transaction():
            locker.execute("LOCK TABLE pgsched.schedules IN ACCESS EXCLUSIVE MODE")
            add_schedule(locker, "daily", f"0 {hour} * * *", horizon=timedelta(days=2))
            a = spawn_scanner("scanner-a")
            wait_for(
                lambda: conn.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE application_name LIKE %s AND wait_event_type = 'Lock'"
                    " AND query LIKE %s",
                    ["%scanner-a%", "%FROM pgsched.schedules%"],
                ).fetchone(),
                timeout=15,
                what="scanner-a reading the schedules",
            )
            a.signal(signal.SIGSTOP)
            # kill() returns before every thread has stopped: release the lock only once they all have.
            wait_for(a.stopped, timeout=10, what="scanner-a stopped")
        assert set(owners_epochs(conn)) == {"scanner-a"}
        row = schedule(conn, "daily")
        stale_epoch = epochs(conn)[row["shard"]]

    # scanner-b starts, takes every shard once scanner-a's leases ran out, and expands the schedule.
    spawn_scanner("scanner-b")
    wait_for(lambda: shares(conn) == {"scanner-b": SHARDS}, timeout=10, what="scanner-b taking over")
    wait_for(lambda: schedule(conn, "daily")["expanded_until"] is not None, what="scanner-b's expansion")
    assert epochs(conn)[row["shard"]] == stale_epoch + 1

    def written() -> set[tuple[str, str]]:
        rows = conn.execute("SELECT app, tbl, op FROM public.writes").fetchall()
        # Expansions are written on the scanner's expansion connection ("pgsched scanner NAME schedules").
        return {(w["app"].removesuffix(" schedules"), w["tbl"]) for w in rows}

    wait_for(
        lambda: (
            written()
            >= {("pgsched scanner scanner-b", "schedule_occurrences"), ("pgsched scanner scanner-b", "schedules")}
        ),
        timeout=15,
        what=lambda: f"scanner-b's expansion writes (written so far: {sorted(written())})",
    )
    occurrences_before = conn.execute("SELECT * FROM pgsched.schedule_occurrences ORDER BY fire_at").fetchall()
    assert len(occurrences_before) == 2

    resumed = db_now(conn)
    a.signal(signal.SIGCONT)
    # Its expansion, planned under the old epoch, reaches the database and is turned down.
    # (Its scans, on another connection, may be turned down first, for other shards.)
    wait_for(
        lambda: f"write for shard {row['shard']} rejected" in a.output(),
        timeout=10,
        what="scanner-a's expansion being rejected",
    )
    # Let it carry on (renew, rebalance, scan) for a while.
    wait_for(lambda: shares(conn) == {"scanner-a": 4, "scanner-b": 4}, timeout=10, what="a 4/4 split again")

    after = conn.execute("SELECT app, tbl, op FROM public.writes WHERE at >= %s", [resumed]).fetchall()
    assert [w for w in after if "scanner-a" in w["app"]] == []
    assert conn.execute("SELECT * FROM pgsched.schedule_occurrences ORDER BY fire_at").fetchall() == (
        occurrences_before
    )
    assert conn.execute("SELECT count(*) AS n FROM pgsched.jobs WHERE schedule = 'daily'").fetchone() == {"n": 2}


# --- `pgsched schedules` --------------------------------------------------------------------------


def cli(dsn: str, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pgsched", "--dsn", dsn, "schedules", *args],
        capture_output=True,
        text=True,
        env=environment(),
        cwd=ROOT,
        timeout=60,
    )
    if ok:
        assert done.returncode == 0, f"{args} -> {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def listed(dsn: str) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in json.loads(cli(dsn, "list", "--json").stdout)}


def test_schedules_from_the_command_line(dsn: str, conn: Conn) -> None:
    saved = json.loads(
        cli(
            dsn,
            "add",
            "nightly",
            "30 2 * * *",
            "reports.build",
            '{"kind": "daily"}',
            "--tz",
            "Europe/Berlin",
            "--gap",
            "skip",
            "--overlap",
            "twice",
            "--misfire",
            "all",
            "--misfire-cap",
            "3",
            "--concurrency",
            "queue",
            "--json",
        ).stdout
    )
    assert saved == {"name": "nightly", "version": 1}
    row = schedule(conn, "nightly")
    assert (row["cron"], row["timezone"], row["task"], row["args"], row["source"]) == (
        "30 2 * * *",
        "Europe/Berlin",
        "reports.build",
        {"kind": "daily"},
        "cli",
    )
    assert (row["gap_policy"], row["overlap_policy"], row["misfire_policy"], row["misfire_cap"]) == (
        "skip",
        "twice",
        "all",
        3,
    )
    assert row["concurrency"] == "queue"
    entry = listed(dsn)["nightly"]
    assert (entry["cron"], entry["timezone"], entry["enabled"], entry["version"]) == (
        "30 2 * * *",
        "Europe/Berlin",
        True,
        1,
    )

    assert "paused" in cli(dsn, "pause", "nightly").stdout
    assert schedule(conn, "nightly")["enabled"] is False
    assert "resumed" in cli(dsn, "resume", "nightly").stdout
    assert schedule(conn, "nightly")["enabled"] is True
    assert schedule(conn, "nightly")["version"] == 3

    bad = cli(dsn, "add", "broken", "61 * * * *", "t.x", ok=False)
    assert bad.returncode != 0
    assert "minute must be 0-59" in bad.stderr + bad.stdout

    assert "removed" in cli(dsn, "remove", "nightly").stdout
    missing = cli(dsn, "remove", "nightly", ok=False)
    assert missing.returncode == 1
    assert "no schedule named 'nightly'" in missing.stderr
    assert listed(dsn) == {}


def test_preview_marks_the_occurrences_a_dst_change_moved(dsn: str, conn: Conn) -> None:
    add_schedule(conn, "nightly", "30 2 * * *", "Europe/Berlin", gap_policy="run", overlap_policy="once")

    spring = json.loads(
        cli(dsn, "preview", "nightly", "--count", "20", "--from", "2026-03-25T00:00:00Z", "--json").stdout
    )
    assert (spring["cron"], spring["timezone"]) == ("30 2 * * *", "Europe/Berlin")
    rows = spring["occurrences"]
    assert len(rows) == 20
    assert len({r["utc"] for r in rows}) == 20
    marked = [r for r in rows if r["dst"]]
    assert marked == [
        {
            "local": "2026-03-29T03:00:00+02:00",
            "utc": "2026-03-29T01:00:00Z",
            "decision": "fire",
            "dst": "gap_shifted",
            "nominal": "2026-03-29T02:30",
        }
    ]
    assert rows[0]["utc"] == "2026-03-25T01:30:00Z"
    assert rows[5]["utc"] == "2026-03-30T00:30:00Z"  # summer time from the next day on

    fall = json.loads(cli(dsn, "preview", "nightly", "-n", "4", "--from", "2026-10-24T00:00:00Z", "--json").stdout)
    assert [(r["utc"], r["decision"], r["dst"]) for r in fall["occurrences"]] == [
        ("2026-10-24T00:30:00Z", "fire", ""),
        ("2026-10-25T00:30:00Z", "fire", "overlap_first"),
        ("2026-10-25T01:30:00Z", "skipped_overlap", "overlap_second"),
        ("2026-10-26T01:30:00Z", "fire", ""),
    ]

    # The table a person reads: local and UTC side by side, the shifted row marked.
    table = cli(dsn, "preview", "nightly", "--count", "20", "--from", "2026-03-25T00:00:00Z").stdout
    [shifted] = [line for line in table.splitlines() if "gap_shifted" in line]
    assert "2026-03-29T03:00:00+02:00" in shifted
    assert "2026-03-29T01:00:00Z" in shifted
    assert sum("2026-" in line for line in table.splitlines()) == 20

    # An elapsed-time expression: the hour that does not exist is absent, the offset change marked.
    hourly = json.loads(
        cli(
            dsn,
            "preview",
            "0 * * * *",
            "--tz",
            "America/New_York",
            "-n",
            "4",
            "--from",
            "2026-03-08T05:30:00Z",
            "--json",
        ).stdout
    )["occurrences"]
    assert [(r["local"], r["dst"]) for r in hourly] == [
        ("2026-03-08T01:00:00-05:00", ""),
        ("2026-03-08T03:00:00-04:00", "offset -05:00 -> -04:00"),
        ("2026-03-08T04:00:00-04:00", ""),
        ("2026-03-08T05:00:00-04:00", ""),
    ]
