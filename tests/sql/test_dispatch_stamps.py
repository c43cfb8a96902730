"""Every way in stamps a job's claim order and default labels from its queue's policy, the same way.

enqueue() and enqueue_many() compute the dispatch_* columns in their own
INSERT and skip tg_jobs__dispatch; every other writer goes through it. Each
path is checked against the policy's formula and against the trigger itself
(`UPDATE ... SET queue = queue` re-stamps a row through it).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.sql.helpers import Conn, cancel, db_now, enqueue, enqueue_many, refused, register_tasks, retry, scalar

AGING = timedelta(seconds=10)
POLICIES: dict[str, dict[str, Any]] = {
    "strict": {},
    "aging": {"aging": AGING},
    "fairness": {"tenant_fairness": True},
    "aging+fairness": {"aging": AGING, "tenant_fairness": True},
}
#: (priority, tenant, seconds from now to run_at)
#: the last one backdated 31 years: its aged rank is clamped to the priority cap
JOBS = [
    (0, None, -100), (5, "acme", 0), (-3, "beta", 30), (1000000, None, 3600), (-1000000, "acme", -1),
    (7, "beta", -10**9),
]  # fmt: skip
PRIORITY_CAP = 1000000

Stamp = tuple[str, int, datetime]


def configure(conn: Conn, queue: str = "default", **settings: Any) -> None:
    names = ", ".join(f"{k} => %({k})s" for k in settings)
    conn.execute(f"SELECT pgsched.configure_queue(%(name)s, {names})", {"name": queue, **settings})


def expected(policy: dict[str, Any], priority: int, tenant: str | None, run_at: datetime, now: datetime) -> Stamp:
    """The stamp outside fairness; for a job aged past the cap, its lower bound (the clock moves on while the
    test writes)."""
    if "aging" in policy:
        # No job is aged past the priority cap: at most what a fresh job of the top priority gets.
        return ("", 0, max(run_at - priority * policy["aging"], now - PRIORITY_CAP * policy["aging"]))
    return ("", -priority, run_at)


def expected_fair(policy: dict[str, Any], now: datetime, batch: bool = False) -> list[Stamp]:
    """The stamps of JOBS written one after the other into an empty fair queue (see _fair_stamp): a job's
    virtual time is the head's (the first in claim order), or 1 ms after its tenant's latest due one, or its
    run_at in an empty queue; the claim order is that minus priority x aging. In one batch (enqueue_many,
    _fair_stamps) the queue is read as it was before the batch: each tenant's rows follow its first."""
    aging = policy.get("aging")
    due: list[tuple[int, datetime, str, datetime]] = []  # (rank, dispatch_at, tenant, virtual time)
    out: list[Stamp] = []
    seen: dict[str, int] = {}
    for priority, tenant, seconds in JOBS:
        run_at = now + timedelta(seconds=seconds)
        if batch:
            ahead = seen.get(tenant or "", 0)
            seen[tenant or ""] = ahead + 1
            virtual = run_at + ahead * timedelta(milliseconds=1)
        elif due:
            head = min(due)[3]
            own = [d for d in due if d[2] == (tenant or "")]
            tail = max(own, key=lambda d: d[1])[3] + timedelta(milliseconds=1) if own else head
            virtual = max(head, tail)
        else:
            virtual = run_at
        rank = 0 if aging else -priority
        stamp = ("*", rank, virtual - priority * aging if aging else virtual)
        out.append(stamp)
        if run_at <= now:
            due.append((rank, stamp[2], tenant or "", virtual))
    return out


def same(conn: Conn, policy: dict[str, Any], got: list[Stamp], want: list[Stamp]) -> bool:
    """got == want, but a capped stamp may be as late as the database's clock now allows."""
    if "aging" not in policy:
        return got == want
    latest = db_now(conn) - PRIORITY_CAP * policy["aging"]
    return len(got) == len(want) and all(
        g == w or (g[:2] == w[:2] and w[2] < g[2] <= latest and w[2] < latest) for g, w in zip(got, want, strict=True)
    )


def stamps(conn: Conn, ids: list[int]) -> list[Stamp]:
    rows = conn.execute(
        "SELECT dispatch_group, dispatch_rank, dispatch_at FROM pgsched.jobs WHERE id = ANY(%s)"
        " ORDER BY array_position(%s, id)",
        [ids, ids],
    ).fetchall()
    return [(r["dispatch_group"], r["dispatch_rank"], r["dispatch_at"]) for r in rows]


def by_trigger(conn: Conn, ids: list[int]) -> list[Stamp]:
    """The stamps tg_jobs__dispatch gives the same rows."""
    conn.execute("UPDATE pgsched.jobs SET queue = queue WHERE id = ANY(%s)", [ids])
    return stamps(conn, ids)


def via_enqueue(conn: Conn, now: datetime) -> list[int]:
    return [
        enqueue(
            conn, priority=p, tenant=t, run_at=now + timedelta(seconds=s), idempotency_key=None if i % 2 else f"k{i}"
        )
        for i, (p, t, s) in enumerate(JOBS)
    ]


def via_enqueue_many(conn: Conn, now: datetime, keys: bool) -> list[int]:
    return enqueue_many(
        conn,
        ["t"] * len(JOBS),
        priorities=[p for p, _, _ in JOBS],
        tenants=[t for _, t, _ in JOBS],
        run_ats=[now + timedelta(seconds=s) for _, _, s in JOBS],
        idempotency_keys=[f"m{i}" for i in range(len(JOBS))] if keys else None,
    )


def via_insert(conn: Conn, now: datetime) -> list[int]:
    return [
        int(
            scalar(
                conn,
                "INSERT INTO pgsched.jobs (task, priority, tenant, run_at) VALUES ('t', %s, %s, %s) RETURNING id",
                [p, t, now + timedelta(seconds=s)],
            )
        )
        for p, t, s in JOBS
    ]


def via_service(conn: Conn, now: datetime) -> list[int]:
    return [
        int(
            scalar(
                conn,
                "SELECT pgsched.enqueue_service('svc', priority => %s, tenant => %s, run_at => %s,"
                " idempotency_key => %s)",
                [p, t, now + timedelta(seconds=s), f"s{i}"],
            )
        )
        for i, (p, t, s) in enumerate(JOBS)
    ]


PATHS: dict[str, Callable[[Conn, datetime], list[int]]] = {
    "enqueue": via_enqueue,
    "enqueue_many": lambda c, n: via_enqueue_many(c, n, keys=False),
    "enqueue_many with keys": lambda c, n: via_enqueue_many(c, n, keys=True),
    "plain INSERT": via_insert,
    "enqueue_service": via_service,
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("policy", POLICIES)
def test_each_path_stamps_the_claim_order_of_its_queues_policy(
    conn: Conn, now: datetime, policy: str, path: str
) -> None:
    if POLICIES[policy]:
        configure(conn, **POLICIES[policy])
    ids = PATHS[path](conn, now)
    if POLICIES[policy].get("tenant_fairness"):
        want = expected_fair(POLICIES[policy], now, batch=path.startswith("enqueue_many"))
        assert stamps(conn, ids) == want
        # Stamped again, a job takes its place behind those already there: the line and rank stay.
        assert [s[:2] for s in by_trigger(conn, ids)] == [w[:2] for w in want]
        return
    want = [expected(POLICIES[policy], p, t, now + timedelta(seconds=s), now) for p, t, s in JOBS]
    assert same(conn, POLICIES[policy], stamps(conn, ids), want), (stamps(conn, ids), want)
    assert same(conn, POLICIES[policy], by_trigger(conn, ids), want), (stamps(conn, ids), want)


@pytest.mark.parametrize("path", PATHS)
def test_each_path_stamps_with_the_policy_configure_queue_left(conn: Conn, now: datetime, path: str) -> None:
    configure(conn, aging=AGING, tenant_fairness=True)
    configure(conn, aging=timedelta(minutes=3))
    policy = {"aging": timedelta(minutes=3), "tenant_fairness": True}
    ids = PATHS[path](conn, now)
    assert stamps(conn, ids) == expected_fair(policy, now, batch=path.startswith("enqueue_many"))
    conn.execute("SELECT pgsched.configure_queue('default', p_clear => '{aging}', tenant_fairness => false)")
    conn.execute("DELETE FROM pgsched.jobs")
    conn.execute("DELETE FROM pgsched.idempotency_keys")
    ids = PATHS[path](conn, now)
    assert stamps(conn, ids) == [expected({}, p, t, now + timedelta(seconds=s), now) for p, t, s in JOBS]


def test_another_queues_policy_is_not_used(conn: Conn, now: datetime) -> None:
    configure(conn, "aged", aging=AGING, tenant_fairness=True)
    plain = enqueue(conn, priority=4, tenant="acme", run_at=now)
    aged = enqueue(conn, queue="aged", priority=4, tenant="acme", run_at=now)
    many = enqueue_many(
        conn, ["t", "t"], queues=["default", "aged"], priorities=[4, 4], tenants=["acme", "acme"], run_ats=[now, now]
    )
    assert stamps(conn, [plain, aged, *many]) == [
        ("", -4, now),
        ("*", 0, now - 4 * AGING),
        ("", -4, now),
        ("*", 0, now + timedelta(milliseconds=1) - 4 * AGING),  # 1 ms behind acme's first
    ]


def test_a_changed_run_at_or_priority_restamps_from_the_policy(conn: Conn, now: datetime) -> None:
    configure(conn, aging=AGING)
    job_id = enqueue(conn, priority=2, run_at=now)
    conn.execute("UPDATE pgsched.jobs SET run_at = %s, priority = 7 WHERE id = %s", [now + timedelta(hours=1), job_id])
    assert stamps(conn, [job_id]) == [("", 0, now + timedelta(hours=1) - 7 * AGING)]


def test_a_retried_job_is_stamped_from_the_policy_of_its_redrive(conn: Conn, now: datetime) -> None:
    job_id = enqueue(conn, priority=2, tenant="acme", run_at=now)
    assert cancel(conn, job_id) == "cancelled"
    configure(conn, aging=AGING, tenant_fairness=True)
    assert retry(conn, job_id) == "retried"
    ((group, rank, at),) = stamps(conn, [job_id])
    run_at = scalar(conn, "SELECT run_at FROM pgsched.jobs WHERE id = %s", [job_id])
    assert (group, rank, at) == ("*", 0, run_at - 2 * AGING)


@pytest.mark.parametrize("path", ["enqueue", "enqueue_many", "enqueue_many with keys", "plain INSERT"])
def test_each_path_gives_a_job_without_labels_its_tasks_else_its_queues(conn: Conn, now: datetime, path: str) -> None:
    configure(conn, labels=["cpu"])
    register_tasks(conn, [{"name": "gpu_task", "labels": ["gpu"]}])
    if path == "enqueue":
        ids = [
            enqueue(conn, "gpu_task"),
            enqueue(conn, "t"),
            enqueue(conn, "t", labels=["mine"]),
            enqueue(conn, "gpu_task", labels=[]),
        ]
    elif path == "plain INSERT":
        ids = [
            int(scalar(conn, "INSERT INTO pgsched.jobs (task, labels) VALUES (%s, %s) RETURNING id", [task, labels]))
            for task, labels in (("gpu_task", []), ("t", []), ("t", ["mine"]), ("gpu_task", []))
        ]
    else:
        ids = enqueue_many(
            conn,
            ["gpu_task", "t", "t", "gpu_task"],
            labels=[None, None, ["mine"], []],
            idempotency_keys=["a", "b", "c", "d"] if path.endswith("keys") else None,
        )
    got = [scalar(conn, "SELECT labels FROM pgsched.jobs WHERE id = %s", [i]) for i in ids]
    assert got == [["gpu"], ["cpu"], ["mine"], ["gpu"]]


def test_a_row_of_the_owner_without_a_stamp_is_stamped_by_the_trigger(conn: Conn, now: datetime) -> None:
    configure(conn, aging=AGING)
    job_id = int(
        scalar(conn, "INSERT INTO pgsched.jobs (task, priority, run_at) VALUES ('t', 3, %s) RETURNING id", [now])
    )
    assert stamps(conn, [job_id]) == [("", 0, now - 3 * AGING)]


def test_dispatch_columns_have_no_default(conn: Conn) -> None:
    # A default would let a row that nobody stamped skip the trigger.
    defaults = conn.execute(
        "SELECT attname, pg_get_expr(d.adbin, d.adrelid) AS def FROM pg_attribute a"
        " LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum"
        " WHERE a.attrelid = 'pgsched.jobs'::regclass AND a.attname LIKE 'dispatch%%' ORDER BY attname"
    ).fetchall()
    assert [(r["attname"], r["def"]) for r in defaults] == [
        ("dispatch_at", None),
        ("dispatch_group", None),
        ("dispatch_rank", None),
    ]
    with refused("23502"):
        conn.execute("INSERT INTO pgsched.jobs (task, dispatch_at) VALUES ('t', now())")


def test_a_trusted_mark_set_by_the_caller_changes_no_stamp(conn: Conn, now: datetime) -> None:
    configure(conn, aging=AGING)
    conn.execute("SET pgsched.trusted_insert = 'on'")
    try:
        job_id = enqueue(conn, priority=3, run_at=now)
        many = enqueue_many(conn, ["t"], priorities=[3], run_ats=[now])
        assert stamps(conn, [job_id, *many]) == [("", 0, now - 3 * AGING)] * 2
    finally:
        conn.execute("RESET pgsched.trusted_insert")
