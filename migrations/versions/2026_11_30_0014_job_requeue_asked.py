"""jobs.requeue_asked_at: an operator asked a live agent for its job back

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-30 03:30:00

A requeue put a leased job back in the queue at once, while its agent, if alive, went on timing it
until its next heartbeat (up to 30 s): both agents then stored the same points in the job's run.
An agent that reported lately is now asked for the job instead: its heartbeats are refused from
this time on, it stops and gives the job back, and the lease ends 90 s after the ask if it does not.
"""
import sqlalchemy as sa
from alembic import op

revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('requeue_asked_at', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_column('requeue_asked_at')
