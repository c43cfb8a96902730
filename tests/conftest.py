"""Fixtures: a real PostgreSQL for every test that touches data, and a fresh pgsched database per test.

Tiers, by what a test needs (each folder's tests carry its marker, so `-m` picks tiers):

- unit (tests/unit): no database.
- sql (tests/sql, scheduling, security, migrations, property): a transaction rolled back after the
  test on a database shared by the test process, or a database cloned from the template.
- worker (tests/integration): a database cloned ahead of time; workers run in the test's process.
- process (tests/e2e): a cloned database; the real CLI, signals, browsers and servers.
- chaos (tests/chaos, tests/ha): its own clusters and proxies (`make chaos`).

Under pytest-xdist every worker process starts its own PostgreSQL (tests/pgserver.py), so nothing is
shared between parallel tests but the machine.
"""

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

TEMPLATE = f"pgsched_template_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"

# A suite started in the background by a shell without job control inherits Ctrl-C ignored, and so
# would every child process it starts: the tests that press Ctrl-C on a child would then test
# nothing. Ignored signals survive exec, handled ones do not, so a handler here gives the children
# the default again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
_counter = itertools.count()

_TIERS = {
    "unit": "unit",
    "sql": "sql",
    "scheduling": "sql",
    "security": "sql",
    "migrations": "sql",
    "property": "sql",
    "integration": "worker",
    "e2e": "process",
    "chaos": "process",
    "ha": "process",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its folder's tier."""
    for item in items:
        parts = item.nodeid.split("/")
        folder = parts[1] if len(parts) > 2 and parts[0] == "tests" else ""
        if folder in _TIERS:
            item.add_marker(getattr(pytest.mark, _TIERS[folder]))


# Tests that share an expensive module or session fixture run in one test process, so it is built once:
# the chaos scenarios' cluster, the story played once per module, Django set up once.
_SHARED_FIXTURES = (
    "tests/chaos/",
    "tests/e2e/test_demo_story.py",
    "tests/integration/test_django.py",
    "tests/property/test_schedule_expansion.py",
)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup`: each test is its own unit of work, but those of _SHARED_FIXTURES go as one."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedFixtures(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return next((group for group in _SHARED_FIXTURES if nodeid.startswith(group)), nodeid)

    return SharedFixtures(config, log)


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
            # FILE_COPY: half the time of WAL_LOG for a small template (the test server runs with fsync off).
            conn.execute(f"CREATE DATABASE {name} TEMPLATE {template} STRATEGY FILE_COPY")
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
