"""Enqueue stamps its own dispatch order; history keeps the timeout; the insert trigger keys on the row

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-29
"""

from __future__ import annotations

from pathlib import Path

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

HERE = Path(__file__).with_suffix("")


def upgrade() -> None:
    op.get_bind().connection.driver_connection.execute(HERE.with_suffix(".up.sql").read_text().encode())


def downgrade() -> None:
    op.get_bind().connection.driver_connection.execute(HERE.with_suffix(".down.sql").read_text().encode())
