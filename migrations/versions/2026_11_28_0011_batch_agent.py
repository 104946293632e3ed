"""batches.agent_id: the agent that sent each batch

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28 16:00:00

Every attempt of a profiling job on one platform writes into one run, so a run's points may come
from several agents; the run names only the first. Each batch now names the agent that sent it,
so a platform's agents and a run's are all of them. Batches stored before keep NULL: their run's
agent sent them.
"""
import sqlalchemy as sa
from alembic import op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('batches', schema=None) as batch_op:
        batch_op.add_column(sa.Column('agent_id', sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('batches', schema=None) as batch_op:
        batch_op.drop_column('agent_id')
