"""measurements.busy_cores: the load while a point was timed

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27 14:00:00

The agent reads the cores other work kept busy around every CPU point (its quality gate's reading);
stored per point, the dashboard shows a platform's load while profiling beside its flagged points.
Rows stored before keep NULL (not read).
"""
import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('measurements', schema=None) as batch_op:
        batch_op.add_column(sa.Column('busy_cores', sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('measurements', schema=None) as batch_op:
        batch_op.drop_column('busy_cores')
