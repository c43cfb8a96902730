"""Weighted fair share (configure_queue(tenant_weights => ...)): claims in proportion to tenants' weights,
work-conserving, from virtual-time stamps given at enqueue, so a claim reads no more rows than its batch."""

from __future__ import annotations

from collections import Counter

import pytest
from psycopg.types.json import Jsonb

from tests.sql.helpers import Conn, claim, enqueue, enqueue_many, fail, pair, refused, scalar


def weights(conn: Conn, queue: str = "default", **by_tenant: float) -> dict[str, object]:
    return scalar(  # type: ignore[no-any-return]
        conn,
        "SELECT pgsched.configure_queue(%s, tenant_fairness => true, tenant_weights => %s)",
        [queue, Jsonb(by_tenant)],
    )


def shares(rows: list[dict[str, object]]) -> Counter[object]:
    return Counter(r["tenant"] for r in rows)


@pytest.mark.parametrize("start_shard", [None, "rotating"])
def test_weights_3_to_1_give_the_heavy_tenant_three_quarters_of_the_first_400_starts(
    conn: Conn, start_shard: str | None
) -> None:
    weights(conn, heavy=3)
    enqueue_many(conn, ["t"] * 2000, tenants=["heavy"] * 2000)
    enqueue_many(conn, ["t"] * 2000, tenants=["light"] * 2000)
    started: list[dict[str, object]] = []
    for i in range(40):  # a worker's batches of 10, from a rotating shard (or all shards at once)
        started += claim(conn, 10, start_shard=None if start_shard is None else i % 8)
    assert len(started) == 400
    share = shares(started)["heavy"] / 400
    assert 0.70 <= share <= 0.80, share


def test_an_idle_tenants_share_goes_to_the_others(conn: Conn) -> None:
    weights(conn, a=5, b=1)
    enqueue_many(conn, ["t"] * 30, tenants=["b"] * 30)
    # a has nothing due: b gets every claim.
    assert shares(claim(conn, 10, start_shard=None)) == {"b": 10}
    enqueue_many(conn, ["t"] * 30, tenants=["a"] * 30)
    # a arrives and takes its share from now on, without credit for the time it was idle.
    assert shares(claim(conn, 12, start_shard=None)) == {"a": 10, "b": 2}


def test_missing_tenants_weigh_one_and_equal_weights_take_turns(conn: Conn) -> None:
    weights(conn, other=7)
    for tenant in ("A", "B", "C"):
        enqueue_many(conn, ["t"] * 20, tenants=[tenant] * 20)
    enqueue(conn, tenant=None)
    assert shares(claim(conn, 10, start_shard=None)) == {"A": 3, "B": 3, "C": 3, None: 1}


def test_a_retried_job_goes_to_the_back_of_its_tenants_line(conn: Conn) -> None:
    weights(conn)
    enqueue_many(conn, ["t"] * 5, tenants=["A"] * 5, max_attempts=[3] * 5)
    enqueue_many(conn, ["t"] * 5, tenants=["B"] * 5)
    (first,) = claim(conn, 1, start_shard=None)
    fail(conn, *pair(first), retry_at=scalar(conn, "SELECT now() - interval '1 second'"))
    # One claim at a time, to see the order: the other 9 (A's 4 interleaved with B's 5), then it.
    order = [claim(conn, 1, start_shard=None)[0]["id"] for _ in range(10)]
    assert order[-1] == first["id"], order


def test_weights_are_shown_cleared_and_checked(conn: Conn) -> None:
    assert weights(conn, acme=3, beta=0.5)["tenant_weights"] == {"acme": 3, "beta": 0.5}
    cleared = scalar(conn, "SELECT pgsched.configure_queue('default', p_clear => '{tenant_weights}')")
    assert cleared["tenant_weights"] is None
    assert cleared["tenant_fairness"] is True
    refusals = (
        ({"acme": 0}, "0"),
        ({"acme": -1}, "-1"),
        ({"acme": 0.0001}, "0.0001"),
        ({"acme": "3"}, '"3"'),
        ({"acme": 1001}, "1001"),
    )
    for bad, shown in refusals:
        with refused("22023") as info:
            weights(conn, **bad)  # type: ignore[arg-type]
        assert shown in str(info.value)
    with refused("22023"):
        scalar(conn, "SELECT pgsched.configure_queue('default', tenant_weights => '[1, 2]')")


def test_a_claim_reads_no_more_rows_than_its_batch_whatever_the_tenants(conn: Conn) -> None:
    """1,000 tenants with due jobs: a claim of 10 reads as many index entries as with 10 tenants, a few per job
    of its batch (about 30 on PostgreSQL 18; PostgreSQL 15 plans the probe across shards with a few hundred,
    still the same for any number of tenants), never one per tenant (the round-robin claim read 8,017)."""
    weights(conn)

    def read() -> int:
        # This backend's index reads not yet reported: a difference inside one transaction is its own.
        return int(
            scalar(
                conn,
                "SELECT coalesce(sum(idx_tup_fetch), 0) FROM pg_stat_xact_user_tables WHERE schemaname = 'pgsched'",
            )
        )

    entries = {}
    for tenants in (10, 1000):
        with conn.transaction(force_rollback=True):
            enqueue_many(conn, ["t"] * 2000, tenants=[f"t{n % tenants:04d}" for n in range(2000)])
            before = read()
            assert len(claim(conn, 10, start_shard=0)) == 10
            entries[tenants] = read() - before
    assert entries[1000] <= entries[10] * 1.5 + 20, entries
    assert entries[1000] < 500, entries
