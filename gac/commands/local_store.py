"""Measurements committed to the local database as they are measured (`gac profile`, `gac align
--profile-missing` without --server): a small batch every second or COMMIT_ROWS rows, so a run
that is stopped (Ctrl-C, SIGTERM, even SIGKILL) keeps what it timed, and the next run leaves
those points out."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gac.agent.delivery.codec import BatchBuffer
from gac.agent.interrupt import COMMIT_ROWS, commit_every_s
from gac.agent.resume import Known, plan_curves

if TYPE_CHECKING:
    from gac.contracts.measurements import Batch, PlatformDescriptor, RunInfo
    from gac.contracts.plans import SweepPlan
    from gac.service.ingest.service import LocalDatabase


class LocalStore(BatchBuffer):
    """Rows into the local database, one transaction per small batch."""

    def __init__(self, db: LocalDatabase, platform: PlatformDescriptor, run: RunInfo) -> None:
        super().__init__(platform, run, batch_size=COMMIT_ROWS, commit_every_s=commit_every_s())
        self.db = db
        self.inserted = 0
        self.duplicates = 0

    def _commit(self, batch: Batch) -> None:
        receipt = self.db.ingest(batch)
        self.inserted += receipt.inserted
        self.duplicates += receipt.duplicates

    def close(self) -> None:
        self.flush()

    def kept_where(self) -> str:
        return "stored"


def stored_points(db: LocalDatabase, platform: PlatformDescriptor, plan: SweepPlan) -> Known:
    """The medians this platform has stored on the plan's curves."""
    return db.stored_medians(platform.fingerprint(), plan_curves(plan))
