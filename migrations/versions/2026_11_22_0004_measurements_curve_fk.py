"""measurements.curve_id without a foreign key

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 07:35:00

The per-row foreign-key trigger on measurements.curve_id cost Postgres about 4 ms of CPU
per 1,000 rows, some 40 % of a batch's COPY. The ingest transaction takes every curve id
from the curves rows it has just created or read, and curves are never deleted, so the
trigger guarded nothing (run_id and batch_id went without one from the start, for the
same reason).
"""
from alembic import op


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('measurements', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('fk_measurements_curve_id_curves'), type_='foreignkey')


def downgrade() -> None:
    with op.batch_alter_table('measurements', schema=None) as batch_op:
        batch_op.create_foreign_key(batch_op.f('fk_measurements_curve_id_curves'), 'curves', ['curve_id'], ['id'])
