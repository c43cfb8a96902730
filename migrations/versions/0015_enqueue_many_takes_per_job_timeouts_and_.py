"""enqueue_many takes per-job timeouts and concurrency keys; their errors name the value

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-29
"""

from __future__ import annotations

from pathlib import Path

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

HERE = Path(__file__).with_suffix("")


def upgrade() -> None:
    op.get_bind().connection.driver_connection.execute(HERE.with_suffix(".up.sql").read_text().encode())


def downgrade() -> None:
    op.get_bind().connection.driver_connection.execute(HERE.with_suffix(".down.sql").read_text().encode())
