"""jobs.lease_token_id: the API token that holds a job's lease

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23 12:00:00

Heartbeat, complete and fail are answered only for the token that claimed the job, not
for anyone who knows the agent's name.
"""
import sqlalchemy as sa
from alembic import op


revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('lease_token_id', sa.Integer(), nullable=True))
        batch_op.create_foreign_key(batch_op.f('fk_jobs_lease_token_id_api_tokens'), 'api_tokens', ['lease_token_id'], ['id'])


def downgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('fk_jobs_lease_token_id_api_tokens'), type_='foreignkey')
        batch_op.drop_column('lease_token_id')
