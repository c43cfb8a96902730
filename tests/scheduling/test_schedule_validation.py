"""A bad schedule is refused where it is written, by SQL and by the CLI alike, and one that slips
through anyway (written by an older version) is recorded on its schedule and poisons nothing:
the pass goes on to the next schedule."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from pgsched.cli import main
from pgsched.core import cron
from pgsched.db.dbconn import Reconnecting
from pgsched.runtime.expansion import FIRES_PER_WRITE, MAX_FIRES_PER_EXPANSION, Expander
from pgsched.runtime.scanner import Scanner, ScannerOptions
from tests.e2e.clirun import Cli
from tests.scheduling.helpers import Conn, acquire, add_schedule, schedule

BAD = [
    # (upsert_schedule arguments, what the error says)
    pytest.param({"labels": [None]}, "may not contain NULL", id="labels-null"),
    pytest.param({"priority": 5_000_000}, "outside -1000000..1000000", id="priority"),
    pytest.param({"tenant": ""}, "tenant is 1 to 200 characters", id="tenant-empty"),
    pytest.param({"cron": "61 * * * *"}, "minute must be 0-59, got 61", id="minute-61"),
    pytest.param({"cron": "0 24 * * *"}, "hour must be 0-23, got 24", id="hour-24"),
    pytest.param({"cron": "0 0 30 2 *"}, "can never fire", id="feb-30"),
    pytest.param({"cron": "0 0 * 13 *"}, "month must be 1-12, got 13", id="month-13"),
    pytest.param({"cron": "0 0 * * 8"}, "day-of-week must be 0-7, got 8", id="dow-8"),
    pytest.param({"cron": "*/0 * * * *"}, "step after / must be a positive number", id="step-0"),
    pytest.param({"cron": "5-1 * * * *"}, "a range goes from low to high", id="range-backwards"),
    pytest.param({"cron": "0 0 * * MON#6"}, "takes n from 1 to 5", id="nth-6"),
    pytest.param({"cron": "0 0 15W * *"}, "cannot parse day-of-month", id="W"),
    pytest.param({"cron": "@reboot"}, "@reboot names no instant", id="reboot"),
    pytest.param({"cron": "* * * *"}, "expected 5 fields", id="four-fields"),
    pytest.param({"timezone": "localtime"}, "schedules_timezone_valid", id="tz-localtime"),
    pytest.param({"timezone": "posixrules"}, "schedules_timezone_valid", id="tz-posixrules"),
    pytest.param({"timezone": "right/UTC"}, "schedules_timezone_valid", id="tz-right"),
    pytest.param({"timezone": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus' for schedule 's'", id="tz-mars"),
    pytest.param({"name": "nightly report!"}, "invalid schedule name 'nightly report!'", id="name"),
    pytest.param({"task": "9lives"}, "invalid task name '9lives' for schedule 's'", id="task"),
]


def upsert(db: Conn, **values: Any) -> int:
    args = {"name": "s", "cron": "*/5 * * * *", "task": "t.tick", **values}
    named = ", ".join(f"{key} => %({key})s" for key in args)
    row = db.execute(f"SELECT pgsched.upsert_schedule({named}) AS v", args).fetchone()
    assert row is not None
    return int(row["v"])


@pytest.mark.parametrize(("values", "message"), BAD)
def test_upsert_schedule_refuses(db: Conn, values: dict[str, Any], message: str) -> None:
    with pytest.raises(psycopg.Error) as raised, db.transaction():
        upsert(db, **values)
    assert message in str(raised.value)
    assert db.execute("SELECT count(*) AS n FROM pgsched.schedules").fetchone() == {"n": 0}


@pytest.mark.parametrize("values", [{"timezone": "Mars/Olympus"}, {"name": "a b"}, {"task": "-x"}])
def test_a_bad_name_or_zone_is_told_plainly_not_as_a_row_dump(db: Conn, values: dict[str, Any]) -> None:
    with pytest.raises(psycopg.errors.CheckViolation) as raised, db.transaction():
        upsert(db, **values)
    assert raised.value.diag.constraint_name in {
        "schedules_timezone_valid",
        "schedules_name_valid",
        "schedules_task_valid",
    }
    assert "Failing row contains" not in str(raised.value)
    assert "violates check constraint" not in str(raised.value)


@pytest.mark.parametrize(("values", "message"), BAD)
def test_a_plain_insert_is_refused_the_same(db: Conn, values: dict[str, Any], message: str) -> None:
    row = {"name": "s", "cron": "*/5 * * * *", "task": "t.tick", **values}
    columns = ", ".join(row)
    with pytest.raises(psycopg.Error) as raised, db.transaction():
        db.execute(f"INSERT INTO pgsched.schedules ({columns}) VALUES ({', '.join(f'%({k})s' for k in row)})", row)
    assert message in str(raised.value)


@pytest.mark.parametrize(
    "expr",
    [
        "0 0 L * *",
        "0 0 LW * *",
        "0 0 * * 5L",
        "0 0 * * MON#2",
        "0 9-17/2 * * MON-FRI",
        "0 0 1 JAN,jul *",
        "*/15 * * * * *",
        "0 0 29 2 *",
        "0 0 31 2 SUN",
        "5/15 * * * *",
        "1,2,3-7/2 * * * *",
        "0 0 * * 7",
    ],
)
def test_what_cron_py_accepts_sql_accepts(db: Conn, expr: str) -> None:
    cron.validate(expr, "UTC")
    assert upsert(db, cron=expr) == 1


@pytest.mark.parametrize(
    ("expr", "first"),
    [
        ("0 0 * 2 1#5", "2044-02-29T00:00:00Z"),  # a fifth Monday in February: leap years starting on a Monday
        ("0 0 29 2 1", "2026-02-02T00:00:00Z"),  # day-of-month or day-of-week: every Monday of February
        ("0 0 * 2 0#5", "2032-02-29T00:00:00Z"),
    ],
)
def test_a_rare_schedule_is_accepted_by_sql_the_cli_and_app_cron_alike(
    db: Conn, dsn: str, expr: str, first: str
) -> None:
    assert upsert(db, cron=expr) == 1
    cron.validate(expr, "UTC")
    env = {"PGSCHED_DSN": dsn, "PGSCHED_NO_EMBEDDED": "1", "PGSCHED_APP": None, "DATABASE_URL": None}
    runner = CliRunner()
    added = runner.invoke(main, ["schedules", "add", "rare", expr, "t.tick"], env=env, catch_exceptions=False)
    assert added.exit_code == 0, added.output
    shown = runner.invoke(
        main,
        ["schedules", "preview", expr, "--from", "2026-01-01T00:00:00+00:00", "--count", "1", "--json"],
        env=env,
        catch_exceptions=False,
    )
    assert shown.exit_code == 0, shown.output
    assert [o["utc"] for o in json.loads(shown.output)["occurrences"]] == [first]


@pytest.mark.parametrize("macro", sorted(cron.MACROS))
def test_vixie_macros_are_accepted_everywhere(db: Conn, macro: str) -> None:
    cron.validate(macro, "UTC")
    assert upsert(db, cron=macro) == 1


def test_sql_accepts_no_zone_cron_py_refuses(db: Conn) -> None:
    """Slow (~20 s): every one of PostgreSQL's ~1,200 zone names through the SQL check and cron.py, exhaustively."""
    names = [
        r["name"]
        for r in db.execute("SELECT name FROM pg_timezone_names WHERE pgsched._valid_timezone(name) ORDER BY name")
    ]
    assert "Europe/Berlin" in names
    assert "UTC" in names
    refused = []
    for name in names:
        try:
            cron.zone(name)
        except cron.CronError:
            refused.append(name)
    assert refused == []


# --- the CLI refuses the same -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["61 * * * *"], "minute must be 0-59, got 61", id="minute-61"),
        pytest.param(["0 0 30 2 *"], "never fire", id="feb-30"),
        pytest.param(["@reboot"], "@reboot names no instant", id="reboot"),
        pytest.param(["*/5 * * * *", "--tz", "localtime"], "unknown time zone 'localtime'", id="tz-localtime"),
        pytest.param(["*/5 * * * *", "--tz", "posixrules"], "unknown time zone 'posixrules'", id="tz-posixrules"),
        pytest.param(["*/5 * * * *", "--priority", "5000000"], "outside -1000000..1000000", id="priority"),
        pytest.param(["*/5 * * * *", "--tenant", ""], "tenant is 1 to 200 characters", id="tenant-empty"),
    ],
)
def test_the_cli_refuses(dsn: str, conn: Conn, args: list[str], message: str) -> None:
    cron_expr, *options = args
    result = Cli(dsn)("schedules", "add", "s", cron_expr, "t.tick", *options)
    assert result.code != 0, str(result)
    assert message in result.err, str(result)
    assert conn.execute("SELECT count(*) AS n FROM pgsched.schedules").fetchone() == {"n": 0}


def test_the_cli_accepts_a_macro(dsn: str, conn: Conn) -> None:
    Cli(dsn).ok("schedules", "add", "nightly", "@daily", "t.tick", "--tz", "Europe/Berlin")
    assert schedule(conn, "nightly")["cron"] == "@daily"


# --- one bad schedule poisons nothing ----------------------------------------------------------


def test_an_expansion_error_is_recorded_and_the_pass_goes_on(dsn: str, conn: Conn) -> None:
    # Written by an older version that did not check: triggers off, as the owner.
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        for name, labels, priority in (("a-labels", [None], 0), ("b-priority", [], 5_000_000)):
            conn.execute(
                "INSERT INTO pgsched.schedules (name, cron, task, labels, priority, shard, version, expanded_version)"
                " VALUES (%s, '* * * * *', 't.tick', %s, %s, pgsched._shard_for_key(%s), 1, 0)",
                [name, labels, priority, name],
            )
    add_schedule(conn, "c-good", "* * * * *")
    epochs = acquire(conn, conn.execute("SELECT now() AS n").fetchone()["n"], lease=timedelta(minutes=5))  # type: ignore[index]

    db = Reconnecting(dsn, purpose="test", stop=threading.Event())
    try:
        result = Expander(db, "test-scanner").run(epochs, budget=60)
        assert (result.errors, result.expanded) == (2, 1)
        # The next pass does not try the broken versions again.
        again = Expander(db, "test-scanner").run(epochs, budget=60)
        assert (again.errors, again.expanded) == (0, 0)
    finally:
        db.close()

    assert "jobs_labels_valid" in schedule(conn, "a-labels")["last_error"]
    assert "jobs_priority_range" in schedule(conn, "b-priority")["last_error"]
    good = schedule(conn, "c-good")
    assert good["last_error"] is None
    assert good["expanded_until"] is not None
    assert conn.execute("SELECT count(*) AS n FROM pgsched.jobs WHERE schedule = 'c-good'").fetchone()["n"] >= 59  # type: ignore[index]


def test_a_time_boxed_pass_leaves_the_rest_for_the_next(dsn: str, conn: Conn) -> None:
    for name in ("a", "b", "c"):
        add_schedule(conn, name, "* * * * * *", horizon=timedelta(days=7))
    epochs = acquire(conn, conn.execute("SELECT now() AS n").fetchone()["n"], lease=timedelta(minutes=5))  # type: ignore[index]
    db = Reconnecting(dsn, purpose="test", stop=threading.Event())
    try:
        first = Expander(db, "test-scanner").run(epochs, budget=0)
        assert first.unfinished
        assert first.created == FIRES_PER_WRITE  # one write, then the budget was spent
        assert first.computed <= 2100  # a seconds schedule with a 7-day horizon: about 1,000 fires, not 604,800
        assert [n for n in "abc" if schedule(conn, n)["expanded_until"] is not None] == ["a"]
        rest = Expander(db, "test-scanner").run(epochs, budget=60)
        assert not rest.unfinished
        assert all(schedule(conn, n)["expanded_until"] is not None for n in "abc")
    finally:
        db.close()


def test_a_scanner_pass_over_a_seconds_schedule_stays_within_its_lease(dsn: str, conn: Conn) -> None:
    """`* * * * * *` with a 7-day horizon: a pass computes about a thousand occurrences (not the
    604,800 of the window), files them in writes of a hundred, renews the leases between them and
    stops at a quarter of the lease; the next ticks go on. No write is ever refused (PS409)."""
    add_schedule(conn, "every-second", "* * * * * *", horizon=timedelta(days=7))
    add_schedule(conn, "other", "*/5 * * * *")
    scanner = Scanner(dsn, ScannerOptions(name="s1", lease=2, listen=False, install_signal_handlers=False))
    try:
        scanner.tick()
        assert scanner.stats.computed <= 2 * MAX_FIRES_PER_EXPANSION + 200
        first = schedule(conn, "every-second")["expanded_until"]
        assert first is not None
        ahead = first - conn.execute("SELECT now() AS n").fetchone()["n"]  # type: ignore[index]
        # fires fall on whole seconds: the window of MAX_FIRES_PER_EXPANSION of them ends up to a second later
        # than that many seconds after now (the fraction of a second to the first fire)
        assert timedelta(seconds=FIRES_PER_WRITE - 5) <= ahead <= timedelta(seconds=MAX_FIRES_PER_EXPANSION + 1)
        deadline = time.monotonic() + 120
        while schedule(conn, "other")["expanded_until"] is None:
            assert time.monotonic() < deadline, "the other schedule was never expanded"
            scanner.tick()
        assert scanner.stats.rejected == 0
    finally:
        scanner._shutdown()
