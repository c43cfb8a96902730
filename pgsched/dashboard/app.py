"""The dashboard's ASGI app: pages, their JSON twins under /api/, POST actions and /metrics."""

from __future__ import annotations

import hmac
import json
import logging
import math
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import date, datetime, timedelta
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
from pgsched.dashboard.loaders import (
    BULK_CAP,
    BULK_TOKEN_TTL,
    Data,
    bulk_filters,
    bulk_token,
    bulk_verb,
    int_param,
    load_bulk,
    load_dead,
    load_history,
    load_job,
    load_jobs,
    load_overview,
    load_queue,
    load_schedules,
    request_store,
    search_filters,
    spend_token,
)
from pgsched.dashboard.middleware import (
    LOOPBACK_HOSTS,
    BasicAuth,
    HostAllowList,
    SecurityHeaders,
    allowed_hosts_from_env,
    credentials_from_env,
)
from pgsched.dashboard.queries import Store
from pgsched.observe.metrics import QueueSnapshot, StaticCollector, queue_families, replica_families
from pgsched.observe.redact import redact, remember

log = logging.getLogger(__name__)

# Flash messages come back through the redirect's query string; only this shape is shown.
_FLASH: Final = re.compile(r"[a-z ]{1,40} [A-Za-z0-9_.:-]{1,128}: [a-z_]{1,40}")
_BULK_FLASH: Final = re.compile(r"(cancel|retry) [0-9]{1,6} jobs?: [0-9a-z_, ]{0,300}")

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


# -- pages and their JSON ------------------------------------------------------


def _view(request: Request) -> pages.View:
    return pages.View(
        path=request.url.path, query=dict(request.query_params), read_only=bool(request.app.state.read_only)
    )


def _refresh(request: Request) -> int | None:
    return int_param(request, "refresh", low=1, high=3600)


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
        result = await request_store(request).act(name, target)
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
    verb = bulk_verb(request)
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
    if not spend_token(request.app.state.used_confirmations, expected, now):
        raise HTTPException(403, "This confirmation has already been used. Confirm again.")
    narrowed = bulk_filters(verb, filters)
    rows = [] if narrowed is None else await request_store(request).bulk(verb, narrowed, max_id=max_id, cap=BULK_CAP)
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
        snap = await request_store(request).snapshot()
        replica = await request_store(request).replica()
    except psycopg.Error as exc:  # PoolTimeout included
        log.warning("metrics: could not read queue state: %s", redact(str(exc)))
        snap = None
    families = queue_families(snap)
    if replica is not None:
        families += replica_families(replica)
    return Response(generate_latest(StaticCollector(families)), media_type=CONTENT_TYPE_LATEST)


async def healthz(request: Request) -> Response:
    try:
        await request_store(request).row("SELECT 1 AS ok")
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
