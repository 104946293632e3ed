"""alignments.dtype, .tokens: what an alignment's predictions are for

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-29 02:00:00

A list of alignments showed each one's platform but not the dtype and token counts its predicted
latencies are for, and a platform is profiled in several dtypes. They are kept beside the stored
manifest (which can be tens of MB, so a listing does not read it). Alignments stored before keep
NULL: their manifest still says.
"""
import sqlalchemy as sa
from alembic import op

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('alignments', schema=None) as batch_op:
        batch_op.add_column(sa.Column('dtype', sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column('tokens', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('alignments', schema=None) as batch_op:
        batch_op.drop_column('tokens')
        batch_op.drop_column('dtype')
