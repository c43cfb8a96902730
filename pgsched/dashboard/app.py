"""The dashboard's ASGI app: pages, their JSON twins under /api/, POST actions and /metrics."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import math
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit

import psycopg
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from pgsched.dashboard import charts, pages
from pgsched.dashboard.html import Safe, layout
from pgsched.dashboard.middleware import (
    LOOPBACK_HOSTS,
    BasicAuth,
    HostAllowList,
    SecurityHeaders,
    allowed_hosts_from_env,
    credentials_from_env,
)
from pgsched.dashboard.queries import ACTIVE_STATES, STATES, Store
from pgsched.observe.metrics import QueueSnapshot, StaticCollector, queue_families, replica_families
from pgsched.observe.redact import redact, remember

log = logging.getLogger(__name__)

PAGE_SIZE: Final = 50
# Flash messages come back through the redirect's query string; only this shape is shown.
_FLASH: Final = re.compile(r"[a-z ]{1,40} [A-Za-z0-9_.:-]{1,128}: [a-z_]{1,40}")
_BULK_FLASH: Final = re.compile(r"(cancel|retry) [0-9]{1,6} jobs?: [0-9a-z_, ]{0,300}")

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
Loader = Callable[[Request], Awaitable[Data | None]]
Renderer = Callable[[pages.View, Data, Request], Safe]


def create_app(
    dsn: str,
    *,
    read_only: bool = False,
    auth: tuple[str, str] | None = None,
    db_timeout: float = 10.0,
    allowed_hosts: Sequence[str] = (),
    read_dsn: str | None = None,
) -> Starlette:
    """The dashboard for the database at dsn; basic auth from auth, else from PGSCHED_DASHBOARD_USER/_PASSWORD.

    Requests must name localhost, 127.0.0.1, [::1], one of allowed_hosts or one
    of PGSCHED_DASHBOARD_ALLOWED_HOSTS in their Host header (others get 400).
    read_dsn: pages, JSON and /metrics read from there (a streaming replica); actions still go to dsn.
    """
    remember(dsn)
    if read_dsn is not None:
        remember(read_dsn)
    store = Store(dsn, read_dsn=read_dsn, timeout=db_timeout)

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await store.open()
        try:
            yield
        finally:
            await store.close()

    credentials = auth or credentials_from_env()
    hosts = [*LOOPBACK_HOSTS, *allowed_hosts, *allowed_hosts_from_env()]
    middleware = [Middleware(SecurityHeaders), Middleware(HostAllowList, hosts=hosts)]
    if credentials is not None:
        middleware.append(Middleware(BasicAuth, username=credentials[0], password=credentials[1]))
    app = Starlette(
        routes=_routes(),
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={
            HTTPException: _http_error,
            psycopg.Error: _database_error,
        },
    )
    app.state.store = store
    app.state.read_only = read_only
    app.state.secret = secrets.token_bytes(32)  # signs bulk-action confirmations; new at every start
    app.state.used_confirmations = {}  # each confirmation acts once: token -> when it may be forgotten
    return app


# -- loading -------------------------------------------------------------------


def _store(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


def _int(request: Request, name: str, *, low: int, high: int, default: int | None = None) -> int | None:
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
    return _int(request, "limit", low=1, high=500, default=PAGE_SIZE) or PAGE_SIZE


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
    found = await _store(request).history(queue=queue, span=spec.span, bucket=spec.bucket)
    return {**found, "window": window}


async def load_overview(request: Request) -> Data | None:
    return {**await _store(request).overview(), "history": await _history(request, None)}


async def load_history(request: Request) -> Data | None:
    return await _history(request, _text(request, "queue"))


async def load_queue(request: Request) -> Data | None:
    state = _text(request, "state")
    if state is not None and state not in STATES:
        raise HTTPException(400, f"state must be one of {', '.join(STATES)}")
    before = _int(request, "before", low=1, high=2**63 - 1)
    name = request.path_params["queue"]
    found = await _store(request).queue(name, state=state, before=before, limit=_limit(request))
    return {**found, "history": await _history(request, name)}


async def load_job(request: Request) -> Data | None:
    return await _store(request).job(request.path_params["job_id"])


async def load_dead(request: Request) -> Data | None:
    before = _int(request, "before", low=1, high=2**63 - 1)
    return await _store(request).dead_letters(queue=_text(request, "queue"), before=before, limit=_limit(request))


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
    before = _int(request, "before", low=1, high=2**63 - 1)
    found = await _store(request).search(filters, before=before, limit=_limit(request))
    return {"filters": given, **found}


def _bulk_verb(request: Request) -> str:
    verb = str(request.path_params["verb"])
    if verb not in BULK_STATES:
        raise HTTPException(404, "Bulk actions are cancel and retry.")
    return verb


def _bulk_filters(verb: str, filters: Data) -> Data | None:
    """The filters narrowed to the states the action applies to (None: no state left)."""
    allowed = BULK_STATES[verb]
    states = [s for s in (filters["states"] or allowed) if s in allowed]
    return {**filters, "states": states} if states else None


def bulk_token(secret: bytes, verb: str, given: Mapping[str, str], max_id: int, issued: int, nonce: str) -> str:
    message = json.dumps([verb, sorted(given.items()), max_id, issued, nonce]).encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def _spend(used: dict[str, float], token: str, now: float) -> bool:
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
    verb = _bulk_verb(request)
    filters, given = search_filters(request.query_params)
    narrowed = _bulk_filters(verb, filters)
    rows = [] if narrowed is None else await _store(request).bulk_preview(narrowed, cap=BULK_CAP)
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
    return await _store(request).schedules(schedule=_text(request, "schedule"), limit=_limit(request) * 2)


# -- pages and their JSON ------------------------------------------------------


def _view(request: Request) -> pages.View:
    return pages.View(
        path=request.url.path, query=dict(request.query_params), read_only=bool(request.app.state.read_only)
    )


def _refresh(request: Request) -> int | None:
    return _int(request, "refresh", low=1, high=3600)


def _flash(request: Request) -> str | None:
    msg = request.query_params.get("msg")
    return msg if msg and (_FLASH.fullmatch(msg) or _BULK_FLASH.fullmatch(msg)) else None


def html_page(
    title: Callable[[Data], str], section: str, load: Loader, render: Renderer, *, live: bool = False
) -> Callable[..., Any]:
    """An endpoint that loads data and renders it as a page (404 when the loader finds nothing); live pages
    carry the script that keeps their charts up to date."""

    async def endpoint(request: Request) -> Response:
        data = await load(request)
        if data is None:
            raise HTTPException(404, "Not found: it may have been removed by retention, or never existed.")
        view = _view(request)
        body = render(view, data, request)
        return HTMLResponse(
            layout(
                title(data),
                body,
                section=section,
                read_only=view.read_only,
                refresh=_refresh(request),
                flash=_flash(request),
                live=live,
            )
        )

    return endpoint


def json_api(load: Loader) -> Callable[..., Any]:
    """An endpoint that returns the same data as the page, as JSON."""

    async def endpoint(request: Request) -> Response:
        data = await load(request)
        if data is None:
            raise HTTPException(404, "not found")
        return JsonResponse(data)

    return endpoint


class JsonResponse(Response):
    """JSON with times as ISO 8601, durations as seconds, NaN as null."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return json.dumps(_jsonable(content), ensure_ascii=False, allow_nan=False).encode()


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


# -- actions -------------------------------------------------------------------


def action(name: str, param: str, what: str) -> Callable[..., Any]:
    """A POST endpoint running one Store action on a path parameter; forms are sent back where they came from."""

    async def endpoint(request: Request) -> Response:
        api = request.url.path.startswith("/api/")
        if request.app.state.read_only:
            raise HTTPException(403, "This dashboard is read-only.")
        if not _same_origin(request):
            raise HTTPException(403, "Cross-site request refused.")
        target = request.path_params[param]
        result = await _store(request).act(name, target)
        log.info(
            "dashboard: %s %s -> %s",
            name,
            target,
            result,
            extra={"action": name, "target": str(target), "result": result, "client": _client(request)},
        )
        if api:
            return JsonResponse({"action": name, "target": target, "result": result})
        form = dict(parse_qsl((await request.body()).decode("utf-8", "replace")))
        back = _safe_next(form.get("next"))
        return RedirectResponse(_with_msg(back, f"{what} {target}: {result}"), status_code=303)

    return endpoint


async def bulk_action(request: Request) -> Response:
    """POST of a confirmed bulk action: the filters, max_id, issued and token from its confirmation page."""
    api = request.url.path.startswith("/api/")
    if request.app.state.read_only:
        raise HTTPException(403, "This dashboard is read-only.")
    if not _same_origin(request):
        raise HTTPException(403, "Cross-site request refused.")
    verb = _bulk_verb(request)
    form = dict(parse_qsl((await request.body()).decode("utf-8", "replace")))
    filters, given = search_filters(form)
    try:
        max_id, issued = int(form.get("max_id", "")), int(form.get("issued", ""))
    except ValueError:
        raise HTTPException(400, "Confirm the action from its confirmation page.") from None
    expected = bulk_token(request.app.state.secret, verb, given, max_id, issued, form.get("nonce", ""))
    if not hmac.compare_digest(expected, form.get("token", "")):
        raise HTTPException(403, "This confirmation is not valid (was the dashboard restarted?). Confirm again.")
    now = time.time()
    if not 0 <= now - issued <= BULK_TOKEN_TTL:
        raise HTTPException(403, "This confirmation has expired. Confirm again.")
    if not _spend(request.app.state.used_confirmations, expected, now):
        raise HTTPException(403, "This confirmation has already been used. Confirm again.")
    narrowed = _bulk_filters(verb, filters)
    rows = [] if narrowed is None else await _store(request).bulk(verb, narrowed, max_id=max_id, cap=BULK_CAP)
    results = {str(r["result"]): int(r["n"]) for r in rows}
    total = sum(results.values())
    log.info(
        "dashboard: bulk %s of %d jobs -> %s",
        verb,
        total,
        results,
        extra={"action": f"{verb}_many", "filters": given, "result": results, "client": _client(request)},
    )
    if api:
        return JsonResponse({"action": f"{verb}_many", "total": total, "results": results})
    summary = ", ".join(f"{n} {result}" for result, n in sorted(results.items()))
    back = "/jobs" + ("?" + urlencode(given) if given else "")
    return RedirectResponse(_with_msg(back, f"{verb} {total} jobs: {summary}"), status_code=303)


async def charts_fragment(request: Request) -> Response:
    """The charts of one queue (or all) alone, for the page's live updates."""
    return HTMLResponse(charts.queue_charts(await load_history(request) or {}))


def _client(request: Request) -> str:
    return request.client.host if request.client else ""


def _same_origin(request: Request) -> bool:
    """Refuse what a browser marks as sent from another site (forms posted by someone else's page)."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None:
        return True
    if origin == "null":
        # Under the dashboard's Referrer-Policy: no-referrer, browsers send "Origin: null" with their own
        # form posts; Sec-Fetch-Site still says where the form was.
        return site == "same-origin"
    return urlsplit(origin).netloc == request.headers.get("host", "")


def _safe_next(value: str | None) -> str:
    """A local path to go back to; anything else (another site, a scheme) becomes the overview."""
    if not value or not value.startswith("/") or value.startswith(("//", "/\\")):
        return "/"
    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return "/"
    return value


def _with_msg(path: str, msg: str) -> str:
    parts = urlsplit(path)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "msg"] + [("msg", msg)]
    return parts.path + "?" + urlencode(query)


# -- metrics, health and errors -----------------------------------------------


async def metrics(request: Request) -> Response:
    """Prometheus exposition of the queue gauges, read from the database now."""
    snap: QueueSnapshot | None
    replica: dict[str, Any] | None = None
    try:
        snap = await _store(request).snapshot()
        replica = await _store(request).replica()
    except psycopg.Error as exc:  # PoolTimeout included
        log.warning("metrics: could not read queue state: %s", redact(str(exc)))
        snap = None
    families = queue_families(snap)
    if replica is not None:
        families += replica_families(replica)
    return Response(generate_latest(StaticCollector(families)), media_type=CONTENT_TYPE_LATEST)


async def healthz(request: Request) -> Response:
    try:
        await _store(request).row("SELECT 1 AS ok")
    except psycopg.Error as exc:  # PoolTimeout included
        return PlainTextResponse(redact(f"database unavailable: {exc}\n"), status_code=503)
    return PlainTextResponse("ok\n")


def _error_page(request: Request, status: int, title: str, text: str) -> Response:
    if request.url.path.startswith("/api/"):
        return JsonResponse({"error": text}, status_code=status)
    body = layout(title, pages.message(title, text), read_only=bool(request.app.state.read_only))
    return HTMLResponse(body, status_code=status)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    titles = {400: "Bad request", 403: "Refused", 404: "Not found", 405: "Method not allowed"}
    return _error_page(request, exc.status_code, titles.get(exc.status_code, "Error"), str(exc.detail))


async def _database_error(request: Request, exc: Exception) -> Response:
    if isinstance(exc, psycopg.DataError):
        # A value from the request the database cannot take (a NUL byte in a filter, say): the
        # request is wrong, the database is fine.
        return _error_page(request, 400, "Bad request", redact(f"This request holds a value pgsched cannot use: {exc}"))
    log.warning("dashboard: database error on %s: %s", request.url.path, exc)
    return _error_page(request, 503, "Database unavailable", redact(f"The database could not be read: {exc}"))


# -- routes --------------------------------------------------------------------


def _routes() -> list[Route]:
    def render_overview(view: pages.View, data: Data, request: Request) -> Safe:
        return pages.overview(view, data, _refresh(request))

    def render_queue(view: pages.View, data: Data, request: Request) -> Safe:
        return pages.queue(view, data, _refresh(request))

    def render_job(view: pages.View, data: Data, _request: Request) -> Safe:
        return pages.job(view, data)

    def render_dead(view: pages.View, data: Data, _request: Request) -> Safe:
        return pages.dead_letters(view, data)

    def render_schedules(view: pages.View, data: Data, _request: Request) -> Safe:
        return pages.schedules(view, data)

    def render_jobs(view: pages.View, data: Data, _request: Request) -> Safe:
        return pages.jobs(view, data)

    def render_bulk(view: pages.View, data: Data, _request: Request) -> Safe:
        return pages.bulk_confirm(view, data)

    post = ["POST"]
    return [
        Route("/", html_page(lambda _: "Overview", "overview", load_overview, render_overview, live=True)),
        Route("/queues/{queue}", html_page(lambda d: f"Queue {d['queue']}", "", load_queue, render_queue, live=True)),
        Route("/jobs", html_page(lambda _: "Jobs", "jobs", load_jobs, render_jobs)),
        Route("/jobs/bulk/{verb}", html_page(lambda d: f"{d['verb'].title()} jobs", "jobs", load_bulk, render_bulk)),
        Route("/jobs/bulk/{verb}", bulk_action, methods=post),
        Route("/api/jobs/bulk/{verb}", json_api(load_bulk)),
        Route("/api/jobs/bulk/{verb}", bulk_action, methods=post),
        Route("/api/jobs", json_api(load_jobs)),
        Route("/api/history", json_api(load_history)),
        Route("/fragments/charts", charts_fragment),
        Route("/jobs/{job_id:int}", html_page(lambda d: f"Job {d['job']['id']}", "", load_job, render_job)),
        Route("/dead", html_page(lambda _: "Dead letters", "dead", load_dead, render_dead)),
        Route("/schedules", html_page(lambda _: "Schedules", "schedules", load_schedules, render_schedules)),
        Route("/api/overview", json_api(load_overview)),
        Route("/api/queues/{queue}", json_api(load_queue)),
        Route("/api/jobs/{job_id:int}", json_api(load_job)),
        Route("/api/dead", json_api(load_dead)),
        Route("/api/schedules", json_api(load_schedules)),
        Route("/metrics", metrics),
        Route("/healthz", healthz),
        *(
            Route(f"{prefix}/jobs/{{job_id:int}}/{verb}", action(f"{verb}_job", "job_id", f"{verb} job"), methods=post)
            for prefix in ("", "/api")
            for verb in ("cancel", "retry")
        ),
        *(
            Route(f"{prefix}/queues/{{name}}/{verb}", action(f"{verb}_queue", "name", f"{verb} queue"), methods=post)
            for prefix in ("", "/api")
            for verb in ("pause", "resume")
        ),
        *(
            Route(
                f"{prefix}/schedules/{{name}}/{verb}",
                action(f"{verb}_schedule", "name", f"{verb} schedule"),
                methods=post,
            )
            for prefix in ("", "/api")
            for verb in ("pause", "resume")
        ),
    ]
