"""Scanners share the shards through epoch-fenced leases; schedule edits reach the jobs at the next scan."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from pgsched.runtime.scanner import Scanner, ScannerOptions
from tests.scheduling.helpers import (
    Conn,
    acquire,
    add_occurrences,
    add_schedule,
    db_now,
    expand,
    jobs,
    key,
    occurrences,
    run_ats,
    schedule,
    utc,
    wait_for,
)

SHARDS = 8
T0 = utc(2026, 6, 1, 12, 0)
LEASE = timedelta(seconds=10)


class RunningScanner:
    """A Scanner running in a background thread."""

    def __init__(self, dsn: str, name: str, **options: Any) -> None:
        options.setdefault("lease", 2.0)
        options.setdefault("install_signal_handlers", False)
        self.name = name
        self.scanner = Scanner(dsn, ScannerOptions(name=name, **options))
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.scanner.run()
        except BaseException as exc:
            self.error = exc
            raise

    def stop(self, timeout: float = 10.0) -> None:
        self.scanner.stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"{self.name} did not stop"
        assert self.error is None, f"{self.name} crashed: {self.error!r}"


@pytest.fixture
def start_scanner(dsn: str) -> Iterator[Callable[..., RunningScanner]]:
    started: list[RunningScanner] = []

    def start(name: str, **options: Any) -> RunningScanner:
        running = RunningScanner(dsn, name, **options)
        started.append(running)
        return running

    yield start
    for running in started:
        if running.thread.is_alive():
            running.stop()


def owners(conn: Conn) -> dict[int, str]:
    """Shard -> the scanner whose lease on it is current."""
    rows = conn.execute(
        "SELECT shard, owner FROM pgsched.shard_leases WHERE owner IS NOT NULL AND expires_at > clock_timestamp()"
    ).fetchall()
    return {int(r["shard"]): r["owner"] for r in rows}


def epochs(conn: Conn) -> dict[int, int]:
    return {int(r["shard"]): int(r["epoch"]) for r in conn.execute("SELECT shard, epoch FROM pgsched.shard_leases")}


def shares(conn: Conn) -> dict[str, int]:
    counts: dict[str, int] = {}
    for owner in owners(conn).values():
        counts[owner] = counts.get(owner, 0) + 1
    return counts


def snapshot(conn: Conn) -> dict[str, list[dict[str, Any]]]:
    """Everything a scanner write could change."""
    tables = {
        "jobs": "SELECT * FROM pgsched.jobs ORDER BY id",
        "history": "SELECT * FROM pgsched.job_history ORDER BY id, finished_at",
        "occurrences": "SELECT * FROM pgsched.schedule_occurrences ORDER BY schedule, fire_at",
        "schedules": "SELECT * FROM pgsched.schedules ORDER BY name",
        "keys": "SELECT * FROM pgsched.idempotency_keys ORDER BY key",
    }
    return {name: conn.execute(query).fetchall() for name, query in tables.items()}


def duplicates(conn: Conn) -> list[dict[str, Any]]:
    """(schedule, run_at) pairs that more than one job, active or finished, stands for."""
    return conn.execute(
        "SELECT schedule, run_at, count(*) AS n FROM ("
        "  SELECT schedule, run_at FROM pgsched.jobs WHERE schedule IS NOT NULL"
        "  UNION ALL SELECT schedule, run_at FROM pgsched.job_history WHERE schedule IS NOT NULL) j"
        " GROUP BY 1, 2 HAVING count(*) > 1"
    ).fetchall()


# --- sharing and handing over -------------------------------------------------------------------


def test_two_scanners_split_the_shards_and_hand_them_over_on_stop(
    conn: Conn, start_scanner: Callable[..., RunningScanner]
) -> None:
    a = start_scanner("scanner-a", lease=3.0)
    wait_for(lambda: shares(conn) == {"scanner-a": SHARDS}, what="scanner-a owning every shard")
    b = start_scanner("scanner-b", lease=3.0)

    wait_for(lambda: shares(conn) == {"scanner-a": 4, "scanner-b": 4}, timeout=10, what="a 4/4 split")
    # Each scanner learns what it holds when its own acquire returns, a moment after the database
    # shows it: wait for both (on a busy machine the second one's pass may still be running).
    wait_for(
        lambda: sorted(a.scanner.owned + b.scanner.owned) == list(range(SHARDS)),
        timeout=10,
        what="both scanners knowing their halves",
    )
    before = epochs(conn)

    started = time.monotonic()
    a.stop()
    wait_for(lambda: shares(conn) == {"scanner-b": SHARDS}, timeout=10, what="scanner-b owning every shard")
    elapsed = time.monotonic() - started

    # Released on shutdown, not left to expire: faster than the lease.
    assert elapsed < 3.0, elapsed
    assert conn.execute("SELECT name FROM pgsched.scanners").fetchall() == [{"name": "scanner-b"}]
    after = epochs(conn)
    assert all(after[s] >= before[s] for s in range(SHARDS))
    assert sum(after[s] > before[s] for s in range(SHARDS)) == 4  # each shard taken over got a new epoch


def test_two_scanners_expanding_the_same_windows_create_each_occurrence_once(
    conn: Conn, start_scanner: Callable[..., RunningScanner]
) -> None:
    names = [f"every-second-{i}" for i in range(6)]
    for name in names:
        add_schedule(conn, name, "* * * * * *", concurrency="allow", horizon=timedelta(minutes=1))
    assert len({schedule(conn, n)["shard"] for n in names}) > 1

    def expanded() -> bool:
        return all(schedule(conn, n)["expanded_until"] is not None for n in names)

    running = [start_scanner("scanner-a", expansion_interval=0.05)]
    wait_for(expanded, what="the schedules expanded")
    for round_ in range(4):
        # Make every schedule look never expanded, so its window is planned again from now,
        # and move the shards between scanners while that happens.
        conn.execute("UPDATE pgsched.schedules SET expanded_until = NULL")
        running.append(start_scanner(f"scanner-{round_}", expansion_interval=0.05))
        if round_ % 2:
            running.pop(0).stop()
        wait_for(expanded, what="the schedules expanded again")
    for r in running:
        r.stop()

    assert duplicates(conn) == []
    fired = conn.execute(
        "SELECT count(*) AS n, count(DISTINCT job_id) AS jobs FROM pgsched.schedule_occurrences WHERE decision = 'fire'"
    ).fetchone()
    assert fired is not None
    assert fired["n"] == fired["jobs"] > 6 * 60
    total = conn.execute(
        "SELECT (SELECT count(*) FROM pgsched.jobs) + (SELECT count(*) FROM pgsched.job_history) AS n"
    ).fetchone()
    assert total is not None
    assert total["n"] == fired["n"]


# --- fencing --------------------------------------------------------------------------------------


def test_a_stale_epoch_writes_nothing(db: Conn) -> None:
    row = add_schedule(db, "tick", "*/5 * * * *")
    shard = row["shard"]
    held_a = acquire(db, T0, "scanner-a", LEASE)
    expand(db, "tick", T0, T0 + timedelta(minutes=30), T0, scanner="scanner-a", epochs=held_a)
    # scanner-a stops renewing; scanner-b takes every shard once the leases ran out.
    held_b = acquire(db, T0 + LEASE + timedelta(seconds=1), "scanner-b", LEASE)
    assert sorted(held_b) == list(range(SHARDS))
    assert held_b[shard] == held_a[shard] + 1
    before = snapshot(db)
    later = T0 + LEASE + timedelta(seconds=5)  # T0 is due: an accepted scan would promote it
    plan = [{"fire_at": (T0 + timedelta(hours=2)).isoformat(), "decision": "fire"}]

    stale_writes: list[tuple[str, list[Any]]] = [
        (
            "SELECT pgsched.add_occurrences(%s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s)",
            [
                "scanner-a",
                shard,
                held_a[shard],
                "tick",
                row["version"],
                psycopg.types.json.Jsonb(plan),
                T0,
                later,
                later,
            ],
        ),
        # The paused scanner's own clock still says its lease runs: the owner decides, not the clock.
        (
            "SELECT pgsched.add_occurrences(%s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s)",
            [
                "scanner-a",
                shard,
                held_a[shard],
                "tick",
                row["version"],
                psycopg.types.json.Jsonb(plan),
                T0,
                later,
                T0 + timedelta(seconds=5),
            ],
        ),
        ("SELECT * FROM pgsched.scan_shard(%s, %s, %s, %s)", ["scanner-a", shard, held_a[shard], later]),
        ("SELECT * FROM pgsched.scan_shard(%s, %s, %s, %s)", ["scanner-a", shard, held_b[shard], later]),
        (
            "SELECT pgsched.schedule_error(%s, %s, %s, %s, %s, %s, %s)",
            ["scanner-a", shard, held_a[shard], "tick", row["version"], "boom", later],
        ),
    ]
    for query, params in stale_writes:
        with pytest.raises(psycopg.Error) as info, db.transaction():
            db.execute(query, params)
        assert info.value.sqlstate == "PS409", (query, params, info.value)
        assert "no longer holds shard" in str(info.value)

    assert snapshot(db) == before
    # The new owner's writes go through.
    [scan] = db.execute(
        "SELECT * FROM pgsched.scan_shard(%s, %s, %s, %s)", ["scanner-b", shard, held_b[shard], later]
    ).fetchall()
    assert scan["promoted"] == 1


def test_a_lease_that_lapsed_comes_back_with_a_new_epoch(db: Conn) -> None:
    row = add_schedule(db, "tick", "*/5 * * * *")
    shard = row["shard"]
    first = acquire(db, T0, "scanner-a", LEASE)
    again = acquire(db, T0 + timedelta(seconds=5), "scanner-a", LEASE)
    assert again == first  # renewed in time: same epoch
    back = acquire(db, T0 + timedelta(seconds=30), "scanner-a", LEASE)
    assert back[shard] == first[shard] + 1  # lapsed: writes prepared before are void

    plan = [{"fire_at": (T0 + timedelta(hours=1)).isoformat(), "decision": "fire"}]
    with pytest.raises(psycopg.Error) as info, db.transaction():
        add_occurrences(
            db,
            row,
            plan,
            T0,
            T0 + timedelta(hours=2),
            T0 + timedelta(seconds=31),
            epoch=first[shard],
            scanner="scanner-a",
        )
    assert info.value.sqlstate == "PS409"
    assert jobs(db, "tick") == []
    assert (
        add_occurrences(
            db,
            row,
            plan,
            T0,
            T0 + timedelta(hours=2),
            T0 + timedelta(seconds=31),
            epoch=back[shard],
            scanner="scanner-a",
        )
        == 1
    )


def test_a_write_in_flight_and_a_takeover_never_both_happen(dsn: str) -> None:
    with (
        psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as a,
        psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as b,
        psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as observer,
    ):
        row = add_schedule(a, "tick", "*/5 * * * *")
        shard = row["shard"]
        held_a = acquire(a, T0, "scanner-a", LEASE)
        plan = [{"fire_at": (T0 + timedelta(hours=1)).isoformat(), "decision": "fire"}]
        expired = T0 + LEASE + timedelta(seconds=1)

        # 1. scanner-a is writing (its transaction is open): the takeover passes its shard by.
        with a.transaction():
            add_occurrences(a, row, plan, T0, T0 + timedelta(hours=2), T0, epoch=held_a[shard], scanner="scanner-a")
            taken = acquire(b, expired, "scanner-b", LEASE)
            assert shard not in taken
            assert len(taken) == SHARDS - 1
        taken = acquire(b, expired, "scanner-b", LEASE)
        assert taken[shard] == held_a[shard] + 1

        # 2. scanner-c takes over (transaction open) while scanner-b, sure of its lease, writes:
        #    the write waits for the takeover and is then rejected.
        held_b = taken
        before = snapshot(a)
        errors: list[BaseException] = []

        def write() -> None:
            try:
                add_occurrences(
                    a,
                    schedule(a, "tick"),
                    [{**plan[0], "fire_at": (T0 + timedelta(hours=3)).isoformat()}],
                    T0,
                    T0 + timedelta(hours=4),
                    expired,
                    epoch=held_b[shard],
                    scanner="scanner-b",
                )
            except BaseException as exc:
                errors.append(exc)

        with b.transaction():
            stolen = acquire(b, expired + LEASE * 2, "scanner-c", LEASE)
            assert stolen[shard] == held_b[shard] + 1
            writer = threading.Thread(target=write)
            writer.start()
            wait_for(
                lambda: observer.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
                    ["%add_occurrences%"],
                ).fetchone(),
                what="the write waiting for the takeover",
            )
        writer.join(5)
        assert not writer.is_alive()
        [error] = errors
        assert isinstance(error, psycopg.Error), error
        assert error.sqlstate == "PS409"
        assert snapshot(a) == before


# --- schedules edited at runtime ------------------------------------------------------------------


def processed(conn: Conn, name: str) -> Callable[[], bool]:
    def check() -> bool:
        row = schedule(conn, name)
        return bool(row["expanded_version"] == row["version"])

    return check


def test_an_edited_schedule_withdraws_its_future_occurrences_and_expands_again(
    conn: Conn, start_scanner: Callable[..., RunningScanner]
) -> None:
    add_schedule(conn, "hourly", "0 * * * *", horizon=timedelta(hours=3))
    start_scanner("scanner-a", expansion_interval=0.05)
    wait_for(processed(conn, "hourly"), what="the first expansion")
    old = run_ats(conn, "hourly")
    assert len(old) == 3
    assert {at.minute for at in old} == {0}

    edited = add_schedule(conn, "hourly", "30 * * * *", horizon=timedelta(hours=3))
    assert edited["version"] == 2
    wait_for(processed(conn, "hourly"), what="the edit expanded")

    new = run_ats(conn, "hourly")
    assert len(new) == 3
    assert {at.minute for at in new} == {30}
    by_time = {o["fire_at"]: o for o in occurrences(conn, "hourly")}
    for at in old:
        assert by_time[at]["decision"] == "withdrawn"
        assert by_time[at]["reason"] == "schedule changed (version 2)"
    assert all(by_time[at]["decision"] == "fire" and by_time[at]["version"] == 2 for at in new)
    # Only the new occurrences hold idempotency keys: the withdrawn ones gave theirs back.
    keys = conn.execute("SELECT key FROM pgsched.idempotency_keys ORDER BY key").fetchall()
    assert [k["key"] for k in keys] == [key("hourly", at) for at in new]


def test_pause_withdraws_and_resume_fires_again_from_now(
    conn: Conn, start_scanner: Callable[..., RunningScanner]
) -> None:
    add_schedule(conn, "beat", "* * * * * *", concurrency="allow", horizon=timedelta(minutes=1))
    start_scanner("scanner-a", expansion_interval=0.05)
    wait_for(lambda: len(run_ats(conn, "beat")) >= 50, what="a minute of occurrences")

    conn.execute("SELECT pgsched.pause_schedule('beat')")
    wait_for(processed(conn, "beat"), what="the pause reaching the scanner")
    assert conn.execute(
        "SELECT count(*) AS n FROM pgsched.jobs WHERE schedule = 'beat' AND state = 'scheduled'"
        " AND run_at > clock_timestamp() + interval '1 second'"
    ).fetchone() == {"n": 0}
    paused_at = conn.execute(
        "SELECT max(decided_at) AS at FROM pgsched.schedule_occurrences WHERE decision = 'withdrawn'"
    ).fetchone()
    assert paused_at is not None
    assert paused_at["at"] is not None
    withdrawn = [o for o in occurrences(conn, "beat") if o["decision"] == "withdrawn"]
    assert len(withdrawn) >= 20  # the rest of the horizon
    assert {o["reason"] for o in withdrawn} == {"schedule changed (version 2)"}

    # Paused for a few seconds: nothing of that time is run later.
    wait_for(lambda: db_now(conn) > paused_at["at"] + timedelta(seconds=3), interval=0.1, what="the pause")
    resumed_at = db_now(conn)
    conn.execute("SELECT pgsched.resume_schedule('beat')")
    wait_for(processed(conn, "beat"), what="the resume reaching the scanner")

    every = [j["run_at"] for j in jobs(conn, "beat")]
    assert [at for at in every if paused_at["at"] + timedelta(seconds=1) < at < resumed_at] == []
    after = [at for at in every if at >= resumed_at]
    assert len(after) >= 50
    assert after[0] - resumed_at < timedelta(seconds=10)  # from now, not from where the horizon had reached
    assert duplicates(conn) == []


def test_removing_a_schedule_withdraws_what_has_not_started(
    conn: Conn, start_scanner: Callable[..., RunningScanner]
) -> None:
    add_schedule(conn, "beat", "* * * * * *", concurrency="allow", horizon=timedelta(minutes=1))
    scanner = start_scanner("scanner-a", expansion_interval=0.05)
    # Promoted, not yet claimed by anyone: queued.
    wait_for(
        lambda: conn.execute(
            "SELECT count(*) >= 2 AS ok FROM pgsched.jobs WHERE schedule = 'beat' AND state = 'available'"
        ).fetchone()["ok"],  # type: ignore[index]
        what="occurrences promoted",
    )
    [running] = conn.execute(
        "SELECT id, lease_token FROM pgsched.claim('w1', ARRAY['default'], 1, '1 minute')"
    ).fetchall()

    removed = conn.execute("SELECT pgsched.remove_schedule('beat') AS n").fetchone()
    assert removed is not None
    assert removed["n"] >= 25

    left = conn.execute("SELECT id, state::text AS state FROM pgsched.jobs WHERE schedule = 'beat'").fetchall()
    assert left == [{"id": running["id"], "state": "running"}]  # running ones finish; the rest never run
    assert {o["decision"] for o in occurrences(conn, "beat") if o["job_id"] != running["id"]} == {"withdrawn"}
    gone = conn.execute(
        "SELECT count(*) AS n FROM pgsched.schedule_occurrences WHERE decision = 'withdrawn'"
        " AND reason = 'schedule removed'"
    ).fetchone()
    assert gone == {"n": removed["n"]}
    # The scanner does not bring any of it back.
    scans = scanner.scanner.stats.scans
    wait_for(lambda: scanner.scanner.stats.scans >= scans + 3, what="more scans")
    assert conn.execute("SELECT id FROM pgsched.jobs WHERE schedule = 'beat'").fetchall() == [{"id": running["id"]}]
    assert conn.execute("SELECT count(*) AS n FROM pgsched.schedules").fetchone() == {"n": 0}
