"""The dashboard's loaders: a request's parameters checked, and the data each page and its JSON twin show."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from starlette.exceptions import HTTPException
from starlette.requests import Request

from pgsched.dashboard import charts
from pgsched.dashboard.queries import ACTIVE_STATES, STATES, Store

PAGE_SIZE: Final = 50
# Bulk actions: at most this many jobs at once, of these states, confirmed (once) within this many seconds.
# The preview reads one job more than the cap, and pgsched.find_jobs returns at most 10,000 a call.
BULK_CAP: Final = 5_000
BULK_STATES: Final = {"cancel": ACTIVE_STATES, "retry": ("dead", "cancelled")}
BULK_TOKEN_TTL: Final = 900
FILTER_KEYS: Final = ("task", "state", "queue", "tenant", "args", "since", "until", "time")
TIME_FIELDS: Final = ("created", "due", "finished")
_AGO: Final = re.compile(r"([0-9]{1,6}) ?(s|m|min|h|d)")
_AGO_UNITS: Final = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}

Data = dict[str, Any]


def request_store(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


def int_param(request: Request, name: str, *, low: int, high: int, default: int | None = None) -> int | None:
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise HTTPException(400, f"{name} must be a whole number") from None
    if not low <= value <= high:
        raise HTTPException(400, f"{name} must be between {low} and {high}")
    return value


def _limit(request: Request) -> int:
    return int_param(request, "limit", low=1, high=500, default=PAGE_SIZE) or PAGE_SIZE


def _text(request: Request, name: str) -> str | None:
    value = request.query_params.get(name)
    return value or None


def _window(request: Request) -> str:
    window = request.query_params.get("window") or "1h"
    if window not in charts.WINDOWS:
        raise HTTPException(400, f"window must be one of {', '.join(charts.WINDOWS)}")
    return window


async def _history(request: Request, queue: str | None) -> Data:
    window = _window(request)
    spec = charts.WINDOWS[window]
    found = await request_store(request).history(queue=queue, span=spec.span, bucket=spec.bucket)
    return {**found, "window": window}


async def load_overview(request: Request) -> Data | None:
    return {**await request_store(request).overview(), "history": await _history(request, None)}


async def load_history(request: Request) -> Data | None:
    return await _history(request, _text(request, "queue"))


async def load_queue(request: Request) -> Data | None:
    state = _text(request, "state")
    if state is not None and state not in STATES:
        raise HTTPException(400, f"state must be one of {', '.join(STATES)}")
    before = int_param(request, "before", low=1, high=2**63 - 1)
    name = request.path_params["queue"]
    found = await request_store(request).queue(name, state=state, before=before, limit=_limit(request))
    return {**found, "history": await _history(request, name)}


async def load_job(request: Request) -> Data | None:
    return await request_store(request).job(request.path_params["job_id"])


async def load_dead(request: Request) -> Data | None:
    before = int_param(request, "before", low=1, high=2**63 - 1)
    return await request_store(request).dead_letters(
        queue=_text(request, "queue"), before=before, limit=_limit(request)
    )


def search_filters(params: Mapping[str, str]) -> tuple[Data, dict[str, str]]:
    """The parameters of pgsched.find_jobs from a query string or form, and the filters as given (for links)."""
    given = {k: params[k].strip() for k in FILTER_KEYS if (params.get(k) or "").strip()}
    states = None
    if "state" in given:
        states = [s.strip() for s in given["state"].split(",") if s.strip()]
        bad = [s for s in states if s not in STATES]
        if bad:
            raise HTTPException(400, f"state must be one of {', '.join(STATES)} (or several, comma-separated)")
    args = None
    if "args" in given:
        try:
            parsed = json.loads(given["args"])
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            raise HTTPException(400, 'args must be a JSON object the job\'s args contain, e.g. {"user_id": 42}')
        args = json.dumps(parsed)
    field = given.get("time", "created")
    if field not in TIME_FIELDS:
        raise HTTPException(400, f"time must be one of {', '.join(TIME_FIELDS)}")
    found: Data = {
        "task": given.get("task"),
        "states": states,
        "queue": given.get("queue"),
        "tenant": given.get("tenant"),
        "args": args,
        "field": field,
    }
    for key in ("since", "until"):
        at, ago = _when(key, given.get(key))
        found[key], found[f"{key}_ago"] = at, ago
    return found, given


def _when(name: str, text: str | None) -> tuple[datetime | None, timedelta | None]:
    """A time as ISO 8601 (UTC unless it says otherwise), or as an age: '90s', '15m', '2h', '7d'."""
    if text is None:
        return None, None
    ago = _AGO.fullmatch(text)
    if ago:
        return None, timedelta(seconds=int(ago.group(1)) * _AGO_UNITS[ago.group(2)])
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise HTTPException(400, f"{name} must be a time (2026-12-01T09:30, UTC) or an age (15m, 2h, 7d)") from None
    return (at if at.tzinfo else at.replace(tzinfo=UTC)), None


async def load_jobs(request: Request) -> Data | None:
    filters, given = search_filters(request.query_params)
    before = int_param(request, "before", low=1, high=2**63 - 1)
    found = await request_store(request).search(filters, before=before, limit=_limit(request))
    return {"filters": given, **found}


def bulk_verb(request: Request) -> str:
    verb = str(request.path_params["verb"])
    if verb not in BULK_STATES:
        raise HTTPException(404, "Bulk actions are cancel and retry.")
    return verb


def bulk_filters(verb: str, filters: Data) -> Data | None:
    """The filters narrowed to the states the action applies to (None: no state left)."""
    allowed = BULK_STATES[verb]
    states = [s for s in (filters["states"] or allowed) if s in allowed]
    return {**filters, "states": states} if states else None


def bulk_token(secret: bytes, verb: str, given: Mapping[str, str], max_id: int, issued: int, nonce: str) -> str:
    message = json.dumps([verb, sorted(given.items()), max_id, issued, nonce]).encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def spend_token(used: dict[str, float], token: str, now: float) -> bool:
    """Mark a valid confirmation used; False when it was used before. Entries are kept until they expire
    anyway, so the set holds at most the confirmations of the last BULK_TOKEN_TTL seconds. No await between
    the check and the mark: two concurrent POSTs of one confirmation cannot both pass."""
    for old in [t for t, expires in used.items() if expires < now]:
        del used[old]
    if token in used:
        return False
    used[token] = now + BULK_TOKEN_TTL + 1
    return True


async def load_bulk(request: Request) -> Data | None:
    verb = bulk_verb(request)
    filters, given = search_filters(request.query_params)
    narrowed = bulk_filters(verb, filters)
    rows = [] if narrowed is None else await request_store(request).bulk_preview(narrowed, cap=BULK_CAP)
    total = sum(int(r["n"]) for r in rows)
    max_id = max((int(r["max_id"]) for r in rows), default=0)
    issued = int(time.time())
    nonce = secrets.token_hex(8)
    return {
        "verb": verb,
        "filters": given,
        "by_state": rows,
        "total": min(total, BULK_CAP),
        "too_many": total > BULK_CAP,
        "cap": BULK_CAP,
        "max_id": max_id,
        "issued": issued,
        "nonce": nonce,
        "token": bulk_token(request.app.state.secret, verb, given, max_id, issued, nonce),
    }


async def load_schedules(request: Request) -> Data | None:
    return await request_store(request).schedules(schedule=_text(request, "schedule"), limit=_limit(request) * 2)
