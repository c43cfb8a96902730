"""Alembic environment for pgsched: no ORM metadata; revisions run frozen SQL files.

The DSN comes from the caller (pgsched.db.schema.migrate passes it in the config's
attributes) or, for the plain `alembic` command, from `-x dsn=...` or
PGSCHED_DSN. A session advisory lock serializes concurrent migrations.
"""

from __future__ import annotations

import os

import psycopg
from alembic import context
from sqlalchemy import create_engine, pool

config = context.config
dsn = (
    config.attributes.get("dsn")
    or context.get_x_argument(as_dictionary=True).get("dsn")
    or os.environ.get("PGSCHED_DSN")
    or os.environ.get("DATABASE_URL")
)
if not dsn:
    raise SystemExit("pgsched migrations need a DSN: -x dsn=... or PGSCHED_DSN")
shards = config.attributes.get("shards") or context.get_x_argument(as_dictionary=True).get("shards")

MIGRATION_LOCK = 7_233_501_100  # arbitrary, fixed: serializes concurrent `pgsched migrate`


def run_migrations_online() -> None:
    engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(dsn), poolclass=pool.NullPool)
    with engine.connect() as connection:
        driver = connection.connection.driver_connection
        assert driver is not None
        driver.execute(f"SELECT pg_advisory_lock({MIGRATION_LOCK})")
        try:
            # The version table lives in the pgsched schema, so create the schema first.
            driver.execute("CREATE SCHEMA IF NOT EXISTS pgsched")
            connection.commit()
            context.configure(
                connection=connection,
                version_table="alembic_version",
                version_table_schema="pgsched",
                transaction_per_migration=True,
            )
            context.config.attributes["shards"] = shards
            with context.begin_transaction():
                context.run_migrations()
        finally:
            driver.execute(f"SELECT pg_advisory_unlock({MIGRATION_LOCK})")
            connection.commit()


if context.is_offline_mode():
    raise SystemExit("pgsched migrations run online only (pgsched migrate)")
run_migrations_online()
