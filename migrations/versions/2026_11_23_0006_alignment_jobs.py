"""alignment jobs, and the whole result of a large alignment beside its compact form

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 12:00:00

A large POST /v1/align answers 202 and runs off the request: alignment_jobs holds its state
until the alignment (same id) is stored. A large alignment stores its compact form (each weight's
chosen candidate) in `result`, served by default, and the whole result compressed in `result_full`.
"""
import sqlalchemy as sa
from alembic import op


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('alignment_jobs',
    sa.Column('id', sa.Uuid(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('weights', sa.Integer(), nullable=True),
    sa.Column('error', sa.JSON(), nullable=True),
    sa.Column('timings', sa.JSON(), nullable=True),
    sa.Column('profiling_jobs', sa.JSON(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_alignment_jobs'))
    )
    with op.batch_alter_table('alignments', schema=None) as batch_op:
        batch_op.add_column(sa.Column('result_full', sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('alignments', schema=None) as batch_op:
        batch_op.drop_column('result_full')
    op.drop_table('alignment_jobs')
