"""Schedules say which name, task or zone is wrong

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-29
"""

from __future__ import annotations

from pathlib import Path

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

HERE = Path(__file__).with_suffix("")


def upgrade() -> None:
    op.get_bind().connection.driver_connection.execute(HERE.with_suffix(".up.sql").read_text().encode())


def downgrade() -> None:
    op.get_bind().connection.driver_connection.execute(HERE.with_suffix(".down.sql").read_text().encode())
