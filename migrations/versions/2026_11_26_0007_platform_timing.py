"""platforms.timing: how the agent's timer treated caches, part of a platform's identity

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26 12:00:00

CPU agents now time kernels with their weights read from beyond the caches, as inside a
model; they report timing "cold-weights", which gives such a CPU a new fingerprint, so
its curves never mix with ones timed hot. Older platforms keep their rows (timing NULL).
"""
import sqlalchemy as sa
from alembic import op


revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('platforms', schema=None) as batch_op:
        batch_op.add_column(sa.Column('timing', sa.String(length=200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('platforms', schema=None) as batch_op:
        batch_op.drop_column('timing')
