"""Fixtures: a real PostgreSQL for every test that touches data, and a fresh pgsched database per test."""

from __future__ import annotations

import itertools
import os
import signal
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from pgsched import App
from pgsched.db import schema
from tests.pgserver import database_dsn, test_server

TEMPLATE = "pgsched_template"

# A suite started in the background by a shell without job control inherits Ctrl-C ignored, and so
# would every child process it starts: the tests that press Ctrl-C on a child would then test
# nothing. Ignored signals survive exec, handled ones do not, so a handler here gives the children
# the default again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
_counter = itertools.count()


@pytest.fixture(scope="session")
def admin_dsn() -> Iterator[str]:
    with test_server() as dsn:
        yield dsn


@pytest.fixture(scope="session")
def template_db(admin_dsn: str) -> str:
    """A database with pgsched installed from sql/, cloned for each test."""
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {TEMPLATE}")
    with psycopg.connect(database_dsn(admin_dsn, TEMPLATE), autocommit=True) as conn:
        schema.install_fresh(conn, shards=int(os.environ.get("PGSCHED_TEST_SHARDS", "8")))
        # Mark it as migrated to head so workers' schema checks pass.
        conn.execute("CREATE TABLE pgsched.alembic_version (version_num varchar(32) PRIMARY KEY)")
        conn.execute("INSERT INTO pgsched.alembic_version VALUES (%s)", [schema.head_revision()])
    return TEMPLATE


def new_database(admin_dsn: str, template: str | None = None) -> tuple[str, str]:
    name = f"t_{os.getpid()}_{next(_counter)}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        if template:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE {template}")
        else:
            conn.execute(f"CREATE DATABASE {name}")
    return name, database_dsn(admin_dsn, name)


def drop_database(admin_dsn: str, name: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def dsn(admin_dsn: str, template_db: str) -> Iterator[str]:
    """DSN of a fresh database with pgsched installed (8 shards)."""
    name, url = new_database(admin_dsn, template_db)
    try:
        yield url
    finally:
        drop_database(admin_dsn, name)


@pytest.fixture
def empty_dsn(admin_dsn: str) -> Iterator[str]:
    """DSN of a fresh, empty database."""
    name, url = new_database(admin_dsn)
    try:
        yield url
    finally:
        drop_database(admin_dsn, name)


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[dict[str, Any]]]:
    """An autocommit connection (rows as dicts) to the test database."""
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as c:
        yield c


@pytest.fixture
def app(dsn: str) -> Iterator[App]:
    application = App(dsn)
    yield application
    application.close()
