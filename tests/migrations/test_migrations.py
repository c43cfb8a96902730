"""A fresh install from sql/ and an alembic upgrade give the same schema; downgrade and --shards work."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pgsched.db import schema
from tests.conftest import drop_database, new_database

ROOT = Path(__file__).resolve().parents[2]
CATALOG = (Path(__file__).parent / "catalog.sql").read_text()

Dump = dict[tuple[str, str], str]


def dump(dsn: str) -> Dump:
    """(kind, name) -> definition for every object of schema pgsched, plus the install settings."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(CATALOG).fetchall()
        config = conn.execute("SELECT row_to_json(c)::text FROM pgsched.config c").fetchall()
    found: Dump = {}
    for kind, name, definition in rows:
        assert (kind, name) not in found, f"{kind} {name} appears twice"
        found[(kind, name)] = definition
    found[("config", "row")] = json.dumps([row[0] for row in config])
    return found


def diff(left: Dump, right: Dump) -> list[str]:
    """Readable differences, one line per object."""
    lines = []
    for key in sorted(left.keys() | right.keys()):
        if key not in right:
            lines.append(f"only in the first: {key[0]} {key[1]}")
        elif key not in left:
            lines.append(f"only in the second: {key[0]} {key[1]}")
        elif left[key] != right[key]:
            lines.append(f"differs: {key[0]} {key[1]}\n  first:  {left[key]}\n  second: {right[key]}")
    return lines


def assert_same(left: Dump, right: Dump) -> None:
    differences = diff(left, right)
    assert not differences, "\n".join(differences)


def install_fresh(dsn: str, shards: int = schema.DEFAULT_SHARDS) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        schema.install_fresh(conn, shards=shards)  # type: ignore[arg-type]


@pytest.fixture
def other_empty_dsn(admin_dsn: str) -> Iterator[str]:
    """A second fresh, empty database."""
    name, url = new_database(admin_dsn)
    try:
        yield url
    finally:
        drop_database(admin_dsn, name)


@pytest.fixture
def fresh_dump(other_empty_dsn: str) -> Dump:
    """The catalog of a fresh install from sql/ (8 shards)."""
    install_fresh(other_empty_dsn)
    return dump(other_empty_dsn)


def test_upgrade_to_head_equals_a_fresh_install(empty_dsn: str, fresh_dump: Dump) -> None:
    before, after = schema.migrate(empty_dsn)
    assert (before, after) == (None, schema.head_revision())
    assert_same(fresh_dump, dump(empty_dsn))


def test_the_dump_covers_every_kind_of_object(fresh_dump: Dump) -> None:
    kinds = {kind for kind, _ in fresh_dump}
    assert kinds >= {
        "schema",
        "relation",
        "column",
        "constraint",
        "index",
        "sequence",
        "view",
        "function",
        "trigger",
        "policy",
        "type",
        "config",
    }
    assert (
        "function",
        "pgsched.claim(text,text[],integer,interval,text[],integer,timestamp with time zone,integer,text[])",
    ) in (fresh_dump)
    assert ("relation", "alembic_version") not in fresh_dump


@pytest.mark.parametrize(
    "change",
    [
        "ALTER TABLE pgsched.jobs ALTER COLUMN priority SET DEFAULT 1",
        "ALTER TABLE pgsched.tasks ADD COLUMN note text",
        "ALTER TABLE pgsched.queues DROP CONSTRAINT queues_name_valid",
        "CREATE INDEX extra_idx ON pgsched.workers (host)",
        "CREATE OR REPLACE FUNCTION pgsched._home_shard(p_shards integer) RETURNS smallint "
        "LANGUAGE sql AS 'SELECT 0::smallint'",
        "ALTER FUNCTION pgsched.claim SECURITY INVOKER",
        "GRANT EXECUTE ON FUNCTION pgsched.cancel TO pgsched_worker",
        "REVOKE SELECT ON pgsched.job_events FROM pgsched_worker",
        "GRANT SELECT ON pgsched.scanners TO pgsched_enqueue",
        "ALTER VIEW pgsched.dead_letters SET (security_invoker = false)",
        "DROP POLICY job_events_unscoped ON pgsched.job_events",
        "ALTER TABLE pgsched.jobs DISABLE TRIGGER tg_jobs__before_insert",
        "ALTER TYPE pgsched.job_state ADD VALUE 'paused'",
        "ALTER SEQUENCE pgsched.lease_token_seq INCREMENT BY 2",
        "ALTER TABLE pgsched.jobs_s3 SET (fillfactor = 100)",
        "COMMENT ON COLUMN pgsched.jobs.queue IS 'changed'",
        "UPDATE pgsched.config SET max_payload_bytes = 1000",
        "ALTER TABLE pgsched.idempotency_keys ALTER COLUMN expires_at SET NOT NULL",
    ],
)
def test_the_comparison_notices_a_change(empty_dsn: str, fresh_dump: Dump, change: str) -> None:
    install_fresh(empty_dsn)
    assert_same(fresh_dump, dump(empty_dsn))
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(change)
    assert diff(fresh_dump, dump(empty_dsn)) != []


def test_downgrade_to_base_then_upgrade_again(empty_dsn: str, fresh_dump: Dump) -> None:
    schema.migrate(empty_dsn)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute("SELECT pgsched.enqueue('t')")
    schema.downgrade(empty_dsn, "base")
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        left = conn.execute(
            """SELECT c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = 'pgsched' AND c.relkind IN ('r', 'p', 'v', 'S')"""
        ).fetchall()
        functions = conn.execute(
            "SELECT count(*) FROM pg_catalog.pg_proc WHERE pronamespace = 'pgsched'::regnamespace"
        ).fetchone()
        assert schema.current_revision(conn) is None
    assert left == [("alembic_version",)]
    assert functions == (0,)
    assert schema.migrate(empty_dsn) == (None, schema.head_revision())
    assert_same(fresh_dump, dump(empty_dsn))


def test_a_second_upgrade_is_a_no_op(empty_dsn: str) -> None:
    schema.migrate(empty_dsn)
    first = dump(empty_dsn)
    head = schema.head_revision()
    assert schema.migrate(empty_dsn) == (head, head)
    assert_same(first, dump(empty_dsn))


def _shard_partitions(dsn: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            """SELECT c.relname FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
               WHERE i.inhparent = 'pgsched.jobs'::regclass ORDER BY c.relname"""
        ).fetchall()
    return [r[0] for r in rows]


def test_migrate_with_four_shards(empty_dsn: str, other_empty_dsn: str) -> None:
    env = {**os.environ, "PGSCHED_DSN": empty_dsn}
    env.pop("DATABASE_URL", None)
    done = subprocess.run(
        [sys.executable, "-m", "pgsched", "migrate", "--shards", "4", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"before": None, "after": schema.head_revision()}, done.stdout
    assert _shard_partitions(empty_dsn) == ["jobs_s0", "jobs_s1", "jobs_s2", "jobs_s3"]
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT shards FROM pgsched.config").fetchone() == (4,)
        conn.execute("SELECT pgsched.enqueue('t') FROM generate_series(1, 40)")
        conn.execute("INSERT INTO pgsched.jobs (task, args) SELECT 't', '{}' FROM generate_series(1, 40)")
        keyless = {row[0] for row in conn.execute("SELECT DISTINCT shard FROM pgsched.jobs").fetchall()}
        assert len(keyless) <= 2  # the session's shard of the second (two if a second ended in between)
        assert keyless <= {0, 1, 2, 3}
        conn.execute("SELECT pgsched.enqueue('t', idempotency_key => 'k' || i) FROM generate_series(1, 40) i")
        shards = {row[0] for row in conn.execute("SELECT DISTINCT shard FROM pgsched.jobs").fetchall()}
        assert shards == {0, 1, 2, 3}
        keyed = conn.execute("SELECT max(pgsched._shard_for_key('k' || i)) FROM generate_series(1, 200) i").fetchone()
        assert keyed == (3,)
    install_fresh(other_empty_dsn, shards=4)
    assert_same(dump(other_empty_dsn), dump(empty_dsn))


def test_install_sql_lists_every_file_of_sql() -> None:
    sql_dir = ROOT / "sql"
    text = (sql_dir / "install.sql").read_text()
    listed = re.findall(r"^\\ir\s+(\S+)\s*$", text, flags=re.MULTILINE)
    on_disk = sorted(
        str(p.relative_to(sql_dir))
        for p in [*sql_dir.glob("*.sql"), *sql_dir.glob("functions/*.sql")]
        if p.name != "install.sql"
    )
    assert len(listed) == len(set(listed)), "a file is included twice"
    assert sorted(listed) == on_disk
    assert [str(p.relative_to(sql_dir)) for p in schema.install_files()] == listed
    # every non-comment line is an include
    other = [line for line in text.splitlines() if line.strip() and not line.startswith(("--", "\\ir "))]
    assert other == []
    assert listed[0] == "00_schema.sql"
    assert listed[-1] == "99_bootstrap.sql"


def test_each_function_file_defines_its_namesake() -> None:
    for path in sorted((ROOT / "sql" / "functions").glob("*.sql")):
        text = path.read_text()
        assert re.search(rf"CREATE OR REPLACE FUNCTION pgsched\.{re.escape(path.stem)}\(", text), path.name
        assert text.startswith(f"-- {path.stem}\n"), f"{path.name} opens with its name"


def test_the_frozen_revisions_match_sql() -> None:
    manifest = json.loads((ROOT / "migrations" / "manifest.json").read_text())
    current = {
        str(p.relative_to(ROOT / "sql")): hashlib.sha256(p.read_bytes()).hexdigest() for p in schema.install_files()
    }
    changed = sorted(name for name in current.keys() | manifest.keys() if current.get(name) != manifest.get(name))
    assert changed == [], "sql/ changed since the newest revision: run migrations/new_revision.py"


def test_the_head_revision_is_the_one_alembic_sees() -> None:
    from alembic.script import ScriptDirectory

    expected = ScriptDirectory.from_config(schema._alembic_config()).get_current_head()
    assert schema.head_revision() == expected
