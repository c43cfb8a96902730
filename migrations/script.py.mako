"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}
"""

from __future__ import annotations

from pathlib import Path

from alembic import op

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = None
depends_on = None

HERE = Path(__file__).with_suffix("")


def upgrade() -> None:
    op.get_bind().connection.driver_connection.execute(HERE.with_suffix(".up.sql").read_text())


def downgrade() -> None:
    op.get_bind().connection.driver_connection.execute(HERE.with_suffix(".down.sql").read_text())
