"""What wraps every dashboard response: a Host allow-list, optional HTTP basic auth and strict security headers."""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
import os
from collections.abc import Iterable
from typing import Final

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pgsched.dashboard.html import CONTENT_SECURITY_POLICY
from pgsched.errors import ConfigurationError

log = logging.getLogger(__name__)

USER_ENV: Final = "PGSCHED_DASHBOARD_USER"
ALLOWED_HOSTS_ENV: Final = "PGSCHED_DASHBOARD_ALLOWED_HOSTS"
# Names a browser on this machine uses; the CLI adds the address it listens on.
LOOPBACK_HOSTS: Final = ("localhost", "127.0.0.1", "::1")
PASSWORD_ENV: Final = "PGSCHED_DASHBOARD_PASSWORD"
# Liveness stays reachable without credentials (it tells nothing about the jobs).
OPEN_PATHS: Final = frozenset({"/healthz"})

SECURITY_HEADERS: Final = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


def credentials_from_env() -> tuple[str, str] | None:
    """(user, password) from PGSCHED_DASHBOARD_USER/_PASSWORD; None if neither is set; an error if one is."""
    user = os.environ.get(USER_ENV, "")
    password = os.environ.get(PASSWORD_ENV, "")
    if not user and not password:
        return None
    if not user or not password:
        raise ConfigurationError(f"set both {USER_ENV} and {PASSWORD_ENV} for basic auth, or neither")
    return user, password


def allowed_hosts_from_env() -> list[str]:
    """Host names from PGSCHED_DASHBOARD_ALLOWED_HOSTS (comma- or space-separated)."""
    return [name for name in os.environ.get(ALLOWED_HOSTS_ENV, "").replace(",", " ").split() if name]


def host_name(value: str) -> str:
    """The name part of a Host header or an address, lower case, without port or IPv6 brackets."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else ""
    if value.count(":") == 1:  # name:port (a bare IPv6 address has several colons)
        value = value.partition(":")[0]
    return value.rstrip(".")


class HostAllowList:
    """Answers 400 to a request whose Host header names none of the allowed hosts.

    A page on a hostile name that resolves to this machine (DNS rebinding) is
    same-origin with itself, so the Origin check alone cannot tell it from
    the dashboard; its requests carry the hostile name in Host, and stop here
    before any route runs. ``*`` allows every Host (behind a proxy that checks it).
    /healthz stays open to probes that address the server by IP (it tells nothing about jobs).
    """

    def __init__(self, app: ASGIApp, *, hosts: Iterable[str]) -> None:
        self.app = app
        self._hosts = frozenset(host_name(h) for h in hosts if h.strip())
        self._any = "*" in self._hosts
        self._reported: set[str] = set()

    def allows(self, header: str | None) -> bool:
        return self._any or (header is not None and host_name(header) in self._hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        header = Headers(scope=scope).get("host")
        if self.allows(header):
            await self.app(scope, receive, send)
            return
        name = host_name(header or "")[:100]
        if name not in self._reported and len(self._reported) < 100:
            self._reported.add(name)
            log.warning(
                "dashboard: refused a request for host %r (allowed: %s); add it with --allowed-host or %s",
                name,
                ", ".join(sorted(self._hosts)),
                ALLOWED_HOSTS_ENV,
            )
        refusal = PlainTextResponse("host not allowed\n", status_code=400)
        await refusal(scope, receive, send)


class BasicAuth:
    """Requires HTTP basic auth with one user and password on every path but OPEN_PATHS."""

    def __init__(self, app: ASGIApp, *, username: str, password: str) -> None:
        self.app = app
        self._expected = (username.encode(), password.encode())

    def _allowed(self, header: str | None) -> bool:
        if not header or not header.lower().startswith("basic "):
            return False
        try:
            decoded = base64.b64decode(header[6:].strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        user, sep, password = decoded.partition(b":")
        # Compare both in full whatever the first says: no timing hint of which was wrong.
        ok_user = hmac.compare_digest(user, self._expected[0])
        ok_password = hmac.compare_digest(password, self._expected[1])
        return bool(sep) and ok_user and ok_password

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        if self._allowed(Headers(scope=scope).get("authorization")):
            await self.app(scope, receive, send)
            return
        refusal = PlainTextResponse(
            "authentication required\n",
            status_code=401,
            headers={"WWW-Authenticate": 'Basic realm="pgsched", charset="UTF-8"'},
        )
        await refusal(scope, receive, send)


class SecurityHeaders:
    """Adds SECURITY_HEADERS (no scripts, no framing, no sniffing, no caching) to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)
