"""Fixtures of the scheduling tests: one database per module, and a rolled-back transaction per test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.conftest import drop_database, new_database


@pytest.fixture(scope="module")
def module_dsn(admin_dsn: str, template_db: str) -> Iterator[str]:
    """A fresh pgsched database shared by the tests of one module."""
    name, url = new_database(admin_dsn, template_db)
    try:
        yield url
    finally:
        drop_database(admin_dsn, name)


@pytest.fixture(scope="module")
def module_conn(module_dsn: str) -> Iterator[psycopg.Connection[dict[str, Any]]]:
    with psycopg.connect(module_dsn, autocommit=True, row_factory=dict_row) as c:
        yield c


@pytest.fixture
def db(module_conn: psycopg.Connection[dict[str, Any]]) -> Iterator[psycopg.Connection[dict[str, Any]]]:
    """A connection inside a transaction that is rolled back after the test (time moves by p_now only)."""
    with module_conn.transaction(force_rollback=True):
        yield module_conn
