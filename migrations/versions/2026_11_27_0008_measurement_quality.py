"""measurements.quality: the agent's quality flags on a point it does not trust

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27 12:00:00

Agents now gate each point (bimodal samples, a median far off both neighbours with a huge
spread, a busy machine) and send the reasons with a point they could not re-measure cleanly.
Such rows are kept, but curves, alignments and resumes read only the rows without flags.
Rows stored before keep NULL (trusted, as they were).
"""
import sqlalchemy as sa
from alembic import op


revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('measurements', schema=None) as batch_op:
        batch_op.add_column(sa.Column('quality', sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('measurements', schema=None) as batch_op:
        batch_op.drop_column('quality')
