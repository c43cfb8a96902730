"""pgsched.enqueue(key_scope => ...): an idempotency key reserved while its job is active, or for the retention."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from tests.sql.helpers import (
    Conn,
    cancel,
    claim_one,
    complete,
    enqueue,
    enqueue_many,
    fail,
    job,
    pair,
    refused,
    state,
)


def test_active_scope_returns_the_running_job_then_a_new_one_after_it_completed(conn: Conn, now: datetime) -> None:
    first = enqueue(conn, "t", {}, idempotency_key="k", key_scope="active", p_now=now)
    claimed = claim_one(conn, now=now)
    assert enqueue(conn, "t", {}, idempotency_key="k", key_scope="active", p_now=now + timedelta(seconds=1)) == first
    complete(conn, [pair(claimed)], now=now + timedelta(seconds=2))
    second = enqueue(conn, "t", {}, idempotency_key="k", key_scope="active", p_now=now + timedelta(seconds=3))
    assert second != first
    assert state(conn, second) == "available"


@pytest.mark.parametrize("outcome", ["dead", "cancelled"])
def test_active_scope_frees_the_key_whatever_the_outcome(conn: Conn, now: datetime, outcome: str) -> None:
    first = enqueue(conn, "t", {}, idempotency_key="k", key_scope="active", max_attempts=1)
    if outcome == "dead":
        fail(conn, *pair(claim_one(conn)))
    else:
        cancel(conn, first)
    assert state(conn, first) == outcome
    assert enqueue(conn, "t", {}, idempotency_key="k", p_now=now + timedelta(seconds=1)) != first


def test_retention_scope_is_the_default_and_keeps_the_key_after_the_job_ended(conn: Conn, now: datetime) -> None:
    for scope in (None, "retention"):
        key = f"k-{scope}"
        first = enqueue(conn, "t", {}, idempotency_key=key, key_scope=scope)
        complete(conn, [pair(claim_one(conn))], now=now)
        assert enqueue(conn, "t", {}, idempotency_key=key, p_now=now + timedelta(hours=1)) == first


def test_the_first_enqueue_sets_the_scope(conn: Conn, now: datetime) -> None:
    first = enqueue(conn, "t", {}, idempotency_key="k", key_scope="retention")
    assert enqueue(conn, "t", {}, idempotency_key="k", key_scope="active") == first
    complete(conn, [pair(claim_one(conn))], now=now)
    assert enqueue(conn, "t", {}, idempotency_key="k", key_scope="active", p_now=now + timedelta(seconds=1)) == first


def test_bad_key_scope_is_refused_naming_the_value(conn: Conn) -> None:
    with refused("22023") as info:
        enqueue(conn, "t", {}, idempotency_key="k", key_scope="forever")
    assert "'forever'" in str(info.value)
    assert job(conn, 1) is None


def test_enqueue_many_takes_a_scope_per_job(conn: Conn, now: datetime) -> None:
    active, kept = enqueue_many(
        conn, ["t", "t"], idempotency_keys=["a", "r"], key_scopes=["active", None], max_attempts=[1, 1]
    )
    cancel(conn, active, now=now)
    cancel(conn, kept, now=now)
    assert enqueue(conn, "t", {}, idempotency_key="a", p_now=now + timedelta(seconds=1)) != active
    assert enqueue(conn, "t", {}, idempotency_key="r", p_now=now + timedelta(seconds=1)) == kept
    with refused("22023") as info:
        enqueue_many(conn, ["t"], idempotency_keys=["b"], key_scopes=["forever"])
    assert "row 1 of the batch" in str(info.value)
    assert "'forever'" in str(info.value)
