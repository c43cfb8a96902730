"""initial schema: sharded jobs, history, audit events, fenced functions, roles

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from pathlib import Path

from alembic import context, op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

HERE = Path(__file__).with_suffix("")


def upgrade() -> None:
    conn = op.get_bind().connection.driver_connection
    shards = int(context.config.attributes.get("shards") or 8)
    conn.execute("SELECT pg_catalog.set_config('pgsched.install_shards', %s, true)", [str(shards)])
    conn.execute(HERE.with_suffix(".up.sql").read_text().encode())


def downgrade() -> None:
    op.get_bind().connection.driver_connection.execute(HERE.with_suffix(".down.sql").read_text().encode())
