"""platforms.native_dtypes, .fast_dtype, .dtype_speed: what the agents measured about dtypes

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-29 01:30:00

An agent measures which dtypes its platform runs natively and how fast (bfloat16 GEMMs are many
times slower than float32 where a CPU emulates them). The service kept only its curves' dtypes,
so it could not say how much slower a job in another dtype would run there. Not identity: the
fingerprint leaves them out, and the latest agent's report replaces them. Platforms stored before
keep NULL until one of their agents sends a batch.
"""
import sqlalchemy as sa
from alembic import op

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('platforms', schema=None) as batch_op:
        batch_op.add_column(sa.Column('native_dtypes', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('fast_dtype', sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column('dtype_speed', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('platforms', schema=None) as batch_op:
        batch_op.drop_column('dtype_speed')
        batch_op.drop_column('fast_dtype')
        batch_op.drop_column('native_dtypes')
