"""Scenario 9: everything through PgBouncer in transaction pooling mode.

Workers run with --no-listen --no-prepare; the SIGKILL scenario and the races
still pass through it, and a worker left with LISTEN on says once, clearly,
that LISTEN is unavailable and polls instead.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.cluster import Cluster, free_port, wait_ready
from tests.chaos.conftest import Env, wait_until
from tests.chaos.test_kill import Kill, run_kill
from tests.chaos.test_races import Sizes, run_races

FLAGS = ("--no-listen", "--no-prepare")


def _pgbouncer_binary() -> str | None:
    found = shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None)
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        quiet = {"capture_output": True, "timeout": 600, "env": {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}}
        if subprocess.run(["apt-get", "install", "-y", "pgbouncer"], **quiet).returncode != 0:  # type: ignore[call-overload]
            subprocess.run(["apt-get", "update"], **quiet)  # type: ignore[call-overload]
            subprocess.run(["apt-get", "install", "-y", "pgbouncer"], **quiet)  # type: ignore[call-overload]
        found = shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None)
    return found


class PgBouncer:
    def __init__(self, binary: str, cluster: Cluster, root: Path) -> None:
        self.port = free_port()
        self.root = root
        self.log = root / "pgbouncer.log"
        (root / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host=127.0.0.1 port={cluster.port} user=postgres\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            "auth_type = any\npool_mode = transaction\n"
            "max_client_conn = 400\ndefault_pool_size = 40\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
            f"logfile = {self.log}\npidfile = {root / 'pgbouncer.pid'}\n"
        )
        cmd = [binary, str(root / "pgbouncer.ini")]
        if os.geteuid() == 0:
            entry = pwd.getpwnam("pgserver" if _has_user("pgserver") else "postgres")
            os.chown(root, entry.pw_uid, entry.pw_gid)
            cmd = ["runuser", "-u", entry.pw_name, "--", *cmd]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)

    def dsn(self, dbname: str) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname}"

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


@pytest.fixture
def bouncer(env: Env) -> Iterator[PgBouncer]:
    binary = _pgbouncer_binary()
    if binary is None:
        pytest.skip("PgBouncer is not installed and could not be installed (apt-get install pgbouncer)")
    root = Path(tempfile.mkdtemp(prefix="pgsched-bouncer-"))  # readable by the user pgbouncer runs as
    root.chmod(0o755)
    b = PgBouncer(binary, env.cluster, root)
    try:
        wait_ready(b.dsn(env.dbname), timeout=20)
        yield b
    finally:
        for proc in env.procs:  # before their pooler goes away
            proc.stop()
        b.close()
        if b.log.exists():
            print("\n----- pgbouncer log tail -----\n" + "\n".join(b.log.read_text().splitlines()[-5:]))
        shutil.rmtree(root, ignore_errors=True)


def run_through_bouncer(env: Env, bouncer: PgBouncer, kill: Kill, sizes: Sizes) -> None:
    dsn = bouncer.dsn(env.dbname)
    # A worker left with LISTEN on behind transaction pooling: one clear warning, then polling.
    chatty = env.worker("listen-left-on", dsn=dsn, concurrency=1, extra=("--no-prepare",))
    run_kill(env, kill, dsn=dsn, extra=FLAGS, label=" (through PgBouncer, transaction pooling)")
    run_races(dsn, sizes, label=" (through PgBouncer, transaction pooling)")
    wait_until(lambda: "LISTEN/NOTIFY does not work" in chatty.text(), 20, "the LISTEN warning", env)
    time.sleep(1.0)
    warnings = chatty.text().count("LISTEN/NOTIFY does not work")
    print(f"[chaos] worker with LISTEN on behind PgBouncer: {warnings} warning(s)")
    assert warnings == 1
    assert chatty.alive()
    ran = env.scalar("SELECT count(*) FROM chaos.runs WHERE worker = 'listen-left-on'")
    assert ran > 0, "the worker with LISTEN on must still work, by polling"


def test_pgbouncer_quick(env: Env, bouncer: PgBouncer) -> None:
    """Slow (~30 s): real workers through a real PgBouncer, one of them SIGKILLed, its leases left to expire."""
    run_through_bouncer(
        env, bouncer, Kill(jobs=150, victim_concurrency=24, lease=2.0, kills=1, sleep=1.5), Sizes(60, 60, 40, 3)
    )


@pytest.mark.chaos
@pytest.mark.timeout(600)
def test_pgbouncer(env: Env, bouncer: PgBouncer) -> None:
    run_through_bouncer(
        env, bouncer, Kill(jobs=1500, victim_concurrency=32, lease=4.0, kills=2, sleep=1.0), Sizes(1000, 1000, 500, 10)
    )
