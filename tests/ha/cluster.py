"""A three-node PostgreSQL cluster managed by Patroni, etcd as its store, all on 127.0.0.1 in a temp dir.

Debian's PostgreSQL 15 and its `patroni` (3.0) and `etcd-server` (3.4)
packages. PostgreSQL refuses to run as root, so as root everything (etcd,
the Patroni agents and through them postgres) runs as the ``postgres`` OS
user. Replication is synchronous (Patroni's ``synchronous_mode``): an
acknowledged commit is on the primary and on its synchronous standby. fsync
stays on. ``destroy()`` kills every process it started and removes the
directory, whatever state the cluster is in.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import psycopg

from tests.chaos.cluster import free_port

PG_BIN = Path("/usr/lib/postgresql/15/bin")
SCOPE = "pgsched-ha"
USER = "postgres"


def missing() -> str | None:
    """Why this machine cannot run the cluster, or None."""
    for tool in ("patroni", "patronictl", "etcd"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install -y patroni etcd-server)"
    if not (PG_BIN / "postgres").exists():
        return f"no PostgreSQL 15 in {PG_BIN}"
    return None


def _os_user() -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", USER], check=False, capture_output=True)
        return pwd.getpwnam(USER)


class Node:
    def __init__(self, cluster: HACluster, index: int) -> None:
        self.name = f"node{index}"
        self.cluster = cluster
        self.port = free_port()
        self.api_port = free_port()
        self.data = cluster.root / self.name
        self.config = cluster.root / f"{self.name}.yml"
        self.log = cluster.root / f"{self.name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def write_config(self) -> None:
        c = self.cluster
        config: dict[str, Any] = {
            "scope": SCOPE,
            "name": self.name,
            "log": {"level": "WARNING"},
            "restapi": {"listen": f"127.0.0.1:{self.api_port}", "connect_address": f"127.0.0.1:{self.api_port}"},
            "etcd3": {"hosts": [f"127.0.0.1:{c.etcd_port}"]},
            "bootstrap": {
                "dcs": {
                    "ttl": 20,
                    "loop_wait": 1,
                    "retry_timeout": 5,
                    "maximum_lag_on_failover": 16 * 1024 * 1024,
                    "synchronous_mode": True,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "remove_data_directory_on_rewind_failure": True,
                        "remove_data_directory_on_diverged_timelines": True,
                        "parameters": {
                            "shared_buffers": "32MB",
                            "max_connections": 100,
                            "max_wal_senders": 10,
                            "max_replication_slots": 10,
                            "wal_keep_size": "128MB",
                            "hot_standby": "on",
                            "wal_log_hints": "on",
                            "synchronous_commit": "on",
                            "fsync": "on",
                            "autovacuum_naptime": "5s",
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"auth": "trust"}, "no-sync"],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{self.port}",
                "connect_address": f"127.0.0.1:{self.port}",
                "data_dir": str(self.data),
                "bin_dir": str(PG_BIN),
                "pgpass": str(c.root / f"{self.name}.pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres", "password": "postgres"},
                    "replication": {"username": "replicator", "password": "replicator"},
                    "rewind": {"username": "postgres", "password": "postgres"},
                },
                "pg_hba": [
                    "local all all trust",
                    "host all all 127.0.0.1/32 trust",
                    "host replication all 127.0.0.1/32 trust",
                ],
                "parameters": {
                    "unix_socket_directories": str(c.root),
                    "log_min_messages": "warning",
                    "logging_collector": "off",
                },
            },
            "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False, "nosync": False},
        }
        # JSON is YAML.
        self.config.write_text(json.dumps(config, indent=1))
        self.cluster.chown(self.config)

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [*self.cluster.runas, "patroni", str(self.config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def kill(self) -> None:
        """SIGKILL of the Patroni agent, then of the postmaster and all its children (a crashed machine)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        pid = self.postmaster_pid()
        if pid is not None:
            children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
            for p in [pid, *map(int, children)]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and _alive(pid):
                time.sleep(0.05)

    def api(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.api_port}{path}", timeout=3) as resp:
            return json.loads(resp.read() or b"null")

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (our own child) counts as dead.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


class HACluster:
    def __init__(self, nodes: int = 3) -> None:
        self.user = _os_user()
        self.runas = ["runuser", "-u", USER, "--"] if self.user is not None else []
        self.root = Path(tempfile.mkdtemp(prefix="pgsched-ha-"))
        self.chown(self.root)
        self.root.chmod(0o755)
        self.etcd_port = free_port()
        self.etcd_peer_port = free_port()
        self.etcd: subprocess.Popen[bytes] | None = None
        self.nodes = [Node(self, i + 1) for i in range(nodes)]

    def chown(self, path: Path) -> None:
        if self.user is not None:
            os.chown(path, self.user.pw_uid, self.user.pw_gid)

    def start(self, timeout: float = 180.0) -> None:
        etcd_dir = self.root / "etcd"
        etcd_dir.mkdir()
        self.chown(etcd_dir)
        with open(self.root / "etcd.log", "ab") as out:
            self.etcd = subprocess.Popen(
                [
                    *self.runas,
                    "etcd",
                    "--name",
                    "etcd0",
                    "--data-dir",
                    str(etcd_dir),
                    "--listen-client-urls",
                    f"http://127.0.0.1:{self.etcd_port}",
                    "--advertise-client-urls",
                    f"http://127.0.0.1:{self.etcd_port}",
                    "--listen-peer-urls",
                    f"http://127.0.0.1:{self.etcd_peer_port}",
                    "--initial-advertise-peer-urls",
                    f"http://127.0.0.1:{self.etcd_peer_port}",
                    "--initial-cluster",
                    f"etcd0=http://127.0.0.1:{self.etcd_peer_port}",
                    "--log-level",
                    "warn",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._wait(lambda: self._etcd_ok(), 30, "etcd answering")
        for node in self.nodes:
            node.write_config()
        self.nodes[0].start()
        self.wait_primary(timeout)
        for node in self.nodes[1:]:
            node.start()
        self.wait_healthy(timeout)

    def _etcd_ok(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.etcd_port}/health", timeout=2) as resp:
                return bool(json.loads(resp.read()).get("health") == "true")
        except OSError:
            return False

    def _wait(self, predicate: Any, timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}\n{self.log_tails()}")
            time.sleep(0.2)

    def members(self) -> list[dict[str, Any]]:
        for node in self.nodes:
            if node.proc is None or node.proc.poll() is not None:
                continue
            try:
                return list(node.api("/cluster")["members"])
            except (OSError, ValueError, KeyError):
                continue
        return []

    def primary(self) -> Node | None:
        """The node that answers as a writable primary, per Patroni and per PostgreSQL."""
        for m in self.members():
            if m.get("role") == "leader" and m.get("state") == "running":
                node = self.node(m["name"])
                try:
                    with psycopg.connect(node.dsn(), connect_timeout=2, autocommit=True) as conn:
                        row = conn.execute("SELECT NOT pg_is_in_recovery()").fetchone()
                        if row and row[0]:
                            return node
                except psycopg.Error:
                    return None
        return None

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def wait_primary(self, timeout: float, other_than: Node | None = None) -> Node:
        def found() -> Node | None:
            p = self.primary()
            return p if p is not None and p is not other_than else None

        node: Node = self._wait(found, timeout, "a writable primary")
        return node

    def healthy(self) -> bool:
        """Every node running, one leader, the others streaming, one of them the synchronous standby."""
        members = self.members()
        if len(members) != len(self.nodes) or any(m.get("state") not in ("running", "streaming") for m in members):
            return False
        roles = sorted(m.get("role", "") for m in members)
        return roles.count("leader") == 1 and "sync_standby" in roles and self.primary() is not None

    def wait_healthy(self, timeout: float) -> None:
        self._wait(self.healthy, timeout, "all nodes running with a synchronous standby")

    def sync_standby(self) -> Node | None:
        for m in self.members():
            if m.get("role") == "sync_standby":
                return self.node(m["name"])
        return None

    def replicas(self) -> list[Node]:
        return [self.node(m["name"]) for m in self.members() if m.get("role") in ("replica", "sync_standby")]

    def switchover(self) -> subprocess.CompletedProcess[str]:
        """A planned switchover to the synchronous standby through patronictl."""
        primary = self.primary()
        assert primary is not None
        return subprocess.run(
            [
                *self.runas,
                "patronictl",
                "-c",
                str(primary.config),
                "switchover",
                "--leader",
                primary.name,
                "--force",
                SCOPE,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )

    def multi_dsn(self, dbname: str = "postgres", **extra: str) -> str:
        hosts = ",".join("127.0.0.1" for _ in self.nodes)
        ports = ",".join(str(n.port) for n in self.nodes)
        tail = "".join(f" {k}={v}" for k, v in extra.items())
        return (
            f"host={hosts} port={ports} user=postgres dbname={dbname} target_session_attrs=read-write"
            f" connect_timeout=3{tail}"
        )

    def log_tails(self, lines: int = 15) -> str:
        out = []
        for path in sorted(self.root.glob("*.log")):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"----- {path.name} -----\n" + "\n".join(text))
        return "\n".join(out)

    def destroy(self) -> None:
        for node in self.nodes:
            with contextlib.suppress(Exception):
                node.kill()
        if self.etcd is not None and self.etcd.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.etcd.pid, signal.SIGKILL)
            self.etcd.wait(10)
        # Anything left under our directory (a postmaster started by a killed agent).
        leftovers = subprocess.run(["pgrep", "-f", str(self.root)], capture_output=True, text=True).stdout.split()
        for pid in leftovers:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)
