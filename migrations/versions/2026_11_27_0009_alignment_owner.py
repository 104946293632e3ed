"""alignments.token_id and stored_bytes: a storage quota per token

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27 13:00:00

Each stored alignment records the token that asked for it and the bytes its texts take, so that
a token's stored results can be held to a quota (its oldest go first) and expire after a while.
Rows stored before keep NULL (anonymous, counted as 0 bytes).
"""
import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('alignments', schema=None) as batch_op:
        batch_op.add_column(sa.Column('token_id', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('stored_bytes', sa.BigInteger(), nullable=True))
        batch_op.create_index(batch_op.f('ix_alignments_token_id'), ['token_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('alignments', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_alignments_token_id'))
        batch_op.drop_column('stored_bytes')
        batch_op.drop_column('token_id')
