"""Dispatch policies of queues (docs/dispatch.md): setting them through pgsched.configure_queue, describing them.

The policy itself lives in the database (``pgsched.queues``) and is enforced
by ``pgsched.claim()``; this module only writes and reads it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, Final

import psycopg
from psycopg.types.json import Jsonb

from pgsched.db import queries

CLEARABLE: Final = ("concurrency", "key_concurrency", "rate", "key_rate", "aging", "labels", "tenant_weights", "all")

_RATE: Final = re.compile(r"^\s*(\d+)\s*/\s*(\S+)\s*$")
_PERIOD_WORDS: Final = {"s": "1s", "sec": "1s", "second": "1s", "m": "1m", "min": "1m", "minute": "1m",
                        "h": "1h", "hour": "1h", "d": "1d", "day": "1d"}  # fmt: skip


def parse_rate(text: str, parse_duration: Any) -> tuple[int, timedelta]:
    """'100/1s', '10/min', '5000/1h' as (starts, period)."""
    found = _RATE.match(text)
    if not found:
        raise ValueError(f"{text!r} is not a rate: use N/PERIOD, e.g. 100/1s, 10/min, 5000/1h")
    period_text = _PERIOD_WORDS.get(found.group(2).lower(), found.group(2))
    period = parse_duration(period_text)
    if not isinstance(period, timedelta) or period <= timedelta(0):
        raise ValueError(f"{text!r}: the period must be longer than 0")
    return int(found.group(1)), period


def parse_tenant_weights(items: Sequence[str]) -> dict[str, float]:
    """['acme=3', 'beta=0.5'] as {'acme': 3, 'beta': 0.5}; the database checks the range (0.001 to 1000)."""
    weights: dict[str, float] = {}
    for item in items:
        tenant, sep, value = item.rpartition("=")
        try:
            weight = float(value)
        except ValueError:
            weight = float("nan")
        if not sep or not tenant or weight != weight:
            raise ValueError(f"{item!r} is not a tenant weight: use TENANT=WEIGHT, e.g. acme=3")
        weights[tenant] = int(weight) if weight.is_integer() else weight
    return weights


def configure_queue(
    conn: psycopg.Connection[Any],
    name: str,
    *,
    concurrency: int | None = None,
    key_concurrency: int | None = None,
    rate: int | None = None,
    key_rate: int | None = None,
    rate_period: timedelta | None = None,
    aging: timedelta | None = None,
    tenant_fairness: bool | None = None,
    labels: Sequence[str] | None = None,
    clear: Sequence[str] = (),
    tenant_weights: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """pgsched.configure_queue(): None leaves a setting as it is, ``clear`` removes settings; returns them all."""
    params = {
        "name": name,
        "concurrency": concurrency,
        "key_concurrency": key_concurrency,
        "rate": rate,
        "key_rate": key_rate,
        "rate_period": rate_period,
        "aging": aging,
        "tenant_fairness": tenant_fairness,
        "labels": list(labels) if labels is not None else None,
        "clear": list(clear) or None,
        "tenant_weights": Jsonb(dict(tenant_weights)) if tenant_weights is not None else None,
    }
    row = conn.execute(queries.CONFIGURE_QUEUE, params).fetchone()
    assert row is not None
    settings = row["settings"] if isinstance(row, Mapping) else row[0]
    return dict(settings)


def _seconds(value: float | None) -> str:
    if value is None:
        return ""
    value = float(value)
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m"), (1, "s")):
        if value >= size and value % size == 0:
            return f"{int(value // size)}{unit}"
    return f"{round(value * 1000)}ms" if value < 1 else f"{value:g}s"


def describe(policy: Mapping[str, Any]) -> str:
    """One line for people: 'concurrency 5, 2 per key, rate 10/1s, aging 30s, tenant fairness, labels gpu'."""
    parts = []
    if policy.get("concurrency") is not None:
        parts.append(f"concurrency {policy['concurrency']}")
    if policy.get("key_concurrency") is not None:
        parts.append(f"{policy['key_concurrency']} running per key")
    period = _seconds(policy.get("rate_period_s"))
    if policy.get("rate") is not None:
        parts.append(f"rate {policy['rate']}/{period}")
    if policy.get("key_rate") is not None:
        parts.append(f"{policy['key_rate']}/{period} per key")
    if policy.get("aging_s") is not None:
        parts.append(f"aging {_seconds(policy['aging_s'])}")
    if policy.get("tenant_fairness"):
        weights = policy.get("tenant_weights") or {}
        shown = ", ".join(f"{t}={w:g}" for t, w in sorted(weights.items()))
        parts.append(f"tenant fairness (weights {shown})" if shown else "tenant fairness")
    if policy.get("labels"):
        parts.append("labels " + ",".join(policy["labels"]))
    return ", ".join(parts) or "strict priority, no limits"
