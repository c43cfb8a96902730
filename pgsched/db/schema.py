"""The schema on disk (sql/, migrations/) and putting it into a database: fresh install or alembic upgrade."""

from __future__ import annotations

import logging
import re
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import tuple_row

from pgsched.errors import ConfigurationError, SchemaError

if TYPE_CHECKING:
    from alembic.config import Config

log = logging.getLogger(__name__)

DEFAULT_SHARDS = 8
VERSION_TABLE = "alembic_version"
_PACKAGE = Path(__file__).resolve().parent.parent  # the pgsched package


def _locate(packaged: str, source: str) -> Path:
    # An installed wheel carries copies inside the package; a checkout has them at the top.
    for candidate in (_PACKAGE / packaged, _PACKAGE.parent / source):
        if candidate.is_dir():
            return candidate
    raise ConfigurationError(f"pgsched's {source}/ directory was not found next to {_PACKAGE}")


def sql_dir() -> Path:
    """The canonical schema: one file per object group, install order in install.sql."""
    return _locate("_sql", "sql")


def migrations_dir() -> Path:
    """The alembic environment that upgrades existing installs."""
    return _locate("_migrations", "migrations")


@cache
def install_files() -> tuple[Path, ...]:
    """The files of sql/, in the order sql/install.sql includes them."""
    root = sql_dir()
    names = re.findall(r"^\\ir\s+(\S+)\s*$", (root / "install.sql").read_text(), flags=re.MULTILINE)
    return tuple(root / name for name in names)


def install_script(shards: int = DEFAULT_SHARDS) -> str:
    """The whole canonical schema as one SQL script."""
    parts = [f"SELECT pg_catalog.set_config('pgsched.install_shards', '{int(shards)}', true);"]
    parts += [f"-- {path.relative_to(sql_dir())}\n{path.read_text()}" for path in install_files()]
    return "\n".join(parts)


def install_fresh(conn: psycopg.Connection[Any], shards: int = DEFAULT_SHARDS) -> None:
    """Create the pgsched schema from sql/ in one transaction (no alembic bookkeeping)."""
    _check_shards(shards)
    with conn.transaction():
        conn.execute(install_script(shards).encode())


def _check_shards(shards: int) -> None:
    if not 1 <= shards <= 256:
        raise ConfigurationError(f"shards must be between 1 and 256, not {shards}")


def current_revision(conn: psycopg.Connection[Any]) -> str | None:
    """The alembic revision of this database's pgsched schema, or None when it is not installed."""
    with conn.cursor(row_factory=tuple_row) as cur:
        # Through the function when it exists: roles without access to the table can call it.
        probe = cur.execute(
            "SELECT pg_catalog.to_regprocedure('pgsched.schema_revision()') IS NOT NULL,"
            " pg_catalog.to_regclass('pgsched.alembic_version') IS NOT NULL"
        ).fetchone()
        if not probe or not probe[1]:
            return None
        query = "SELECT pgsched.schema_revision()" if probe[0] else "SELECT version_num FROM pgsched.alembic_version"
        found = cur.execute(query).fetchone()
    return str(found[0]) if found and found[0] is not None else None


@cache
def head_revision() -> str:
    """The newest revision shipped with this version of pgsched.

    Read from the revision files themselves (alembic's loader costs a worker
    a fifth of a second at start); a test holds it equal to alembic's head.
    """
    revisions: dict[str, str | None] = {}
    for path in (migrations_dir() / "versions").glob("*.py"):
        text = path.read_text()
        rev = re.search(r'^revision\s*=\s*["\']([^"\']+)["\']', text, flags=re.MULTILINE)
        down = re.search(r'^down_revision\s*=\s*(?:["\']([^"\']+)["\']|None)', text, flags=re.MULTILINE)
        if rev:
            revisions[rev.group(1)] = down.group(1) if down else None
    heads = set(revisions) - {down for down in revisions.values() if down}
    if len(heads) != 1:
        raise SchemaError(f"expected one migration head, found {sorted(heads) or 'none'}")
    return heads.pop()


def _alembic_config(dsn: str | None = None, shards: int | None = None) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    if dsn is not None:
        config.attributes["dsn"] = dsn
    if shards is not None:
        config.attributes["shards"] = shards
    return config


def migrate(dsn: str, *, shards: int | None = None, revision: str = "head") -> tuple[str | None, str]:
    """Upgrade (or install) pgsched in the database at dsn; returns (before, after) revisions."""
    from alembic import command

    if shards is not None:
        _check_shards(shards)
    with psycopg.connect(dsn, autocommit=True) as conn:
        before = current_revision(conn)
    command.upgrade(_alembic_config(dsn, shards), revision)
    with psycopg.connect(dsn, autocommit=True) as conn:
        after = current_revision(conn)
    return before, after or "?"


def downgrade(dsn: str, revision: str) -> None:
    """Downgrade pgsched to revision ('base' removes it)."""
    from alembic import command

    command.downgrade(_alembic_config(dsn), revision)


def ensure_installed(dsn: str) -> None:
    """Migrate to head when the database is behind (used for the embedded server)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        current = current_revision(conn)
    if current != head_revision():
        log.info("migrating pgsched schema from %s to head", current)
        migrate(dsn)


def check_compatible(conn: psycopg.Connection[Any]) -> str:
    """Raise SchemaError unless the database holds the schema this code expects; returns the revision."""
    current = current_revision(conn)
    if current is None:
        raise SchemaError("pgsched is not installed in this database: run `pgsched migrate`")
    head = head_revision()
    if current != head:
        raise SchemaError(
            f"the database's pgsched schema is at revision {current}, this code expects {head}: run `pgsched migrate`"
        )
    return current
