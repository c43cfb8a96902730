"""Fixtures of the SQL contract tests: a connection whose work is rolled back, the database clock, a listener.

Most SQL contract tests need one connection and nothing committed: they share one database per test
process and run inside a transaction rolled back at the end, each statement in its own savepoint so a
statement that fails (as the tests of refusals expect) leaves the test's transaction usable, as it would
in autocommit. A test that asks for `dsn` (a second connection, a LISTENer, a worker) or is marked
`commits` gets a database of its own instead, and its `conn` commits as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.conftest import drop_database, new_database
from tests.sql.helpers import Conn, db_now

# Fixtures that mean another connection will look at the test's data: it must be committed.
_NEEDS_COMMITS = frozenset({"dsn", "listener", "app", "admin_dsn", "empty_dsn"})


class _SavepointConnection(psycopg.Connection[dict[str, Any]]):
    """Each execute() in a savepoint of the test's transaction: a failed statement undoes only itself."""

    def execute(self, query: Any, params: Any = None, *, prepare: bool | None = None, binary: bool = False) -> Any:
        if self.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            return super().execute(query, params, prepare=prepare, binary=binary)
        with self.transaction():
            return super().execute(query, params, prepare=prepare, binary=binary)


@pytest.fixture(scope="session")
def rollback_conn(admin_dsn: str, template_db: str) -> Iterator[Conn]:
    """One pgsched database for this test process, whose tests never commit."""
    name, url = new_database(admin_dsn, template_db)
    try:
        with _SavepointConnection.connect(url, autocommit=True, row_factory=dict_row) as c:
            yield c
    finally:
        drop_database(admin_dsn, name)


# Every due job has exactly one row in pgsched.ready that says where it is in the claim order, and every
# row there is such a job's (claims read pgsched.ready only: a due job without its row would never run).
DUE_ROWS_DISAGREE = """
SELECT (SELECT pg_catalog.count(*) FROM pgsched.jobs j
        WHERE j.state = 'available'
          AND (SELECT pg_catalog.count(*) FROM pgsched.ready r
               WHERE r.id = j.id AND r.shard = j.shard AND r.queue = j.queue AND r.dispatch_group = j.dispatch_group
                 AND r.dispatch_rank = j.dispatch_rank AND r.dispatch_at = j.dispatch_at
                 AND r.priority = j.priority AND r.labels = j.labels AND r.tenant IS NOT DISTINCT FROM j.tenant
                 AND r.concurrency_key IS NOT DISTINCT FROM j.concurrency_key) <> 1)
     + (SELECT pg_catalog.count(*) FROM pgsched.ready r
        WHERE NOT EXISTS (SELECT FROM pgsched.jobs j
                          WHERE j.id = r.id AND j.shard = r.shard AND j.state = 'available'
                            AND j.dispatch_at = r.dispatch_at)) AS disagree
"""


def assert_due_rows_agree(c: Conn) -> None:
    """pgsched.ready holds one row per due job of pgsched.jobs, and nothing else."""
    c.execute("RESET ROLE")
    c.execute("RESET pgsched.tenant")
    disagree = c.execute(DUE_ROWS_DISAGREE).fetchone()
    assert disagree is not None
    assert disagree["disagree"] == 0, "pgsched.ready does not match the due jobs"


@pytest.fixture
def conn(request: pytest.FixtureRequest) -> Iterator[Conn]:
    """The test's connection: inside a transaction rolled back after the test, unless the test needs commits.
    A rolled-back test ends by checking that pgsched.ready agrees with the due jobs, whatever the test did."""
    if request.node.get_closest_marker("commits") or _NEEDS_COMMITS & set(request.fixturenames):
        with psycopg.connect(request.getfixturevalue("dsn"), autocommit=True, row_factory=dict_row) as c:
            yield c
        return
    shared: Conn = request.getfixturevalue("rollback_conn")
    with shared.transaction(force_rollback=True):
        yield shared
        assert_due_rows_agree(shared)


@pytest.fixture
def now(conn: Conn) -> datetime:
    """The database's now() at the start of the test; tests pass later times as p_now."""
    return db_now(conn)


class Listener:
    """A second connection that LISTENs to pgsched's wake-up channels."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def drain(self, expect: int = 0, *, settle: float = 0.3) -> list[tuple[str, str]]:
        """(channel, payload) of the notifications delivered: waits up to 5 s for `expect` of them,
        then settle seconds more for any that should not be there."""
        got = []
        if expect:
            got += [(n.channel, n.payload) for n in self.conn.notifies(timeout=5.0, stop_after=expect)]
        got += [(n.channel, n.payload) for n in self.conn.notifies(timeout=settle)]
        return got

    def payloads(self, expect: int, channel: str = "pgsched_jobs") -> list[str]:
        """Payloads of one channel, as drain() collects them."""
        return [payload for ch, payload in self.drain(expect) if ch == channel]


@pytest.fixture
def listener(dsn: str) -> Iterator[Listener]:
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as c:
        c.execute("LISTEN pgsched_jobs")
        c.execute("LISTEN pgsched_scheduled")
        yield Listener(c)
