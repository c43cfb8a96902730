"""Where the database is: an explicit DSN, PGSCHED_DSN, DATABASE_URL, else the embedded server."""

from __future__ import annotations

import os

from pgsched.errors import ConfigurationError

# DSNs that resolve_dsn fell back to (the embedded server), so that a worker can say so.
_embedded_fallbacks: set[str] = set()


def is_embedded_fallback(dsn: str) -> bool:
    """True when dsn is the embedded server resolve_dsn started because no database was configured."""
    return dsn in _embedded_fallbacks


def configured_dsn() -> str | None:
    """The DSN from the environment (PGSCHED_DSN, then DATABASE_URL), or None."""
    for name in ("PGSCHED_DSN", "DATABASE_URL"):
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return None


def resolve_dsn(dsn: str | None = None, *, embedded: bool = True, migrate: bool = True) -> str:
    """Return the DSN to use, starting (and migrating) the embedded server when nothing is configured."""
    chosen = dsn or configured_dsn()
    if chosen:
        return chosen
    if not embedded or os.environ.get("PGSCHED_NO_EMBEDDED"):
        raise ConfigurationError("no database configured: pass --dsn, or set PGSCHED_DSN or DATABASE_URL")
    from pgsched.db.embedded import EmbeddedServer

    url = EmbeddedServer().start()
    _embedded_fallbacks.add(url)
    if migrate:
        from pgsched.db.schema import ensure_installed

        ensure_installed(url)
    return url
