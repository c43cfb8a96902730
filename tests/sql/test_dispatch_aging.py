"""Priority aging: a waiting job gains one priority step per `aging` interval, without rewriting rows."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from tests.sql.helpers import Conn, claim, enqueue, refused, scalar


def claim_order(conn: Conn, n: int, now: datetime) -> list[int]:
    """The ids n one-job claims get, in turn (a batch's rows come back in no particular order)."""
    return [r["id"] for _ in range(n) for r in claim(conn, 1, now=now, start_shard=None)]


def configure(conn: Conn, queue: str = "default", **settings: object) -> dict[str, object]:
    names = ", ".join(f"{k} => %({k})s" for k in settings)
    row = conn.execute(
        f"SELECT pgsched.configure_queue(%(name)s{', ' if names else ''}{names}) AS s",
        {"name": queue, **settings},
    ).fetchone()
    assert row is not None
    return row["s"]  # type: ignore[no-any-return]


def test_strict_priority_is_the_default(conn: Conn, now: datetime) -> None:
    old_low = enqueue(conn, priority=0, run_at=now - timedelta(hours=5))
    fresh_high = enqueue(conn, priority=1, run_at=now)
    got = claim_order(conn, 2, now)
    assert got == [fresh_high, old_low]


def test_an_aged_low_priority_job_passes_fresh_high_priority_ones(conn: Conn, now: datetime) -> None:
    configure(conn, aging=timedelta(seconds=10))
    # Priority 0, due 101 s ago: it waited longer than (10 - 0) x 10 s.
    old_low = enqueue(conn, priority=0, run_at=now - timedelta(seconds=101))
    # Priority 0, due 99 s ago: not yet.
    younger_low = enqueue(conn, priority=0, run_at=now - timedelta(seconds=99))
    fresh_high = [enqueue(conn, priority=10, run_at=now) for _ in range(3)]
    got = claim_order(conn, 5, now)
    assert got == [old_low, *fresh_high, younger_low]


@pytest.mark.parametrize("how", ["enqueue", "plain INSERT"])
def test_a_backdated_run_at_does_not_age_a_job_past_the_priority_cap(conn: Conn, now: datetime, how: str) -> None:
    configure(conn, aging=timedelta(seconds=1))
    top = enqueue(conn, priority=1000000, run_at=now)
    # Priority 0 due 30 years ago: 946 million steps of aging, were it not capped at priority 1,000,000.
    long_ago = now - timedelta(days=30 * 365)
    if how == "enqueue":
        backdated = enqueue(conn, priority=0, run_at=long_ago)
    else:
        backdated = scalar(conn, "INSERT INTO pgsched.jobs (task, run_at) VALUES ('t', %s) RETURNING id", [long_ago])
    below_top = enqueue(conn, priority=999999, run_at=now)
    got = claim_order(conn, 3, now)
    assert got == [top, backdated, below_top], "aged up to the cap (it passes 999,999), never past it"


def test_aging_orders_the_due_jobs_by_one_index_scan(conn: Conn, now: datetime) -> None:
    configure(conn, aging=timedelta(seconds=1))
    for i in range(200):
        enqueue(conn, priority=i % 7, run_at=now - timedelta(seconds=i))
    # Whatever the planner prefers for 200 rows: can the index give the order, with no sort?
    conn.execute("SET enable_seqscan = off")
    conn.execute("SET enable_sort = off")
    plan = "\n".join(
        r["QUERY PLAN"]
        for r in conn.execute(
            "EXPLAIN SELECT r.id FROM pgsched.ready r WHERE r.queue = 'default' "
            "ORDER BY r.dispatch_group, r.dispatch_rank, r.dispatch_at, r.id LIMIT 10"
        ).fetchall()
    )
    assert "Index Scan using" in plan or "Index Only Scan using" in plan, plan
    assert "dispatch_group_dispatch_rank_dispatch_at" in plan, plan
    assert not [line for line in plan.splitlines() if line.strip().startswith("->  Sort")], plan


def test_changing_aging_restamps_waiting_jobs_once(conn: Conn, now: datetime) -> None:
    old_low = enqueue(conn, priority=0, run_at=now - timedelta(seconds=100))
    high = enqueue(conn, priority=5, run_at=now)
    assert claim_order(conn, 1, now) == [high]
    high2 = enqueue(conn, priority=5, run_at=now)
    row = configure(conn, aging=timedelta(seconds=1))
    assert row["restamped"] == 2
    assert claim_order(conn, 2, now) == [old_low, high2]


def test_clearing_aging_brings_strict_priority_back(conn: Conn, now: datetime) -> None:
    configure(conn, aging=timedelta(seconds=1))
    old_low = enqueue(conn, priority=0, run_at=now - timedelta(seconds=100))
    high = enqueue(conn, priority=5, run_at=now)
    row = configure(conn, p_clear=["aging"])
    assert row["aging_s"] is None
    assert claim_order(conn, 2, now) == [high, old_low]


def test_a_retry_is_stamped_from_its_new_run_at(conn: Conn, now: datetime) -> None:
    configure(conn, aging=timedelta(seconds=1))
    job = enqueue(conn, priority=0, run_at=now - timedelta(seconds=100))
    [c] = claim(conn, 1, now=now, start_shard=None)
    conn.execute("SELECT pgsched.fail(%s, %s, 'x', %s)", [job, c["lease_token"], now])
    stamped = scalar(conn, "SELECT dispatch_at FROM pgsched.jobs WHERE id = %s", [job])
    assert stamped == now


@pytest.mark.parametrize(
    "settings",
    [
        {"aging": timedelta(0)},
        {"aging": timedelta(days=2)},
        {"concurrency": 0},
        {"rate": 5},
        {"rate_period": timedelta(seconds=1)},
        {"rate": 0, "rate_period": timedelta(seconds=1)},
        {"p_clear": ["nonsense"]},
        {"labels": ["gpu", ""]},
    ],
)
def test_a_bad_setting_is_refused_and_changes_nothing(conn: Conn, settings: dict[str, object]) -> None:
    configure(conn, concurrency=3)
    sqlstate = "23514" if "labels" in settings else "22023"
    with refused(sqlstate):
        configure(conn, **settings)
    assert scalar(conn, "SELECT concurrency FROM pgsched.queues WHERE name = 'default'") == 3
