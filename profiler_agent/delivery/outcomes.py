"""What sending a batch can come to: delivered (counted in DeliveryStats), not now (DeliveryError), never (RejectedError)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gac.contracts.measurements import BatchReceipt


class DeliveryError(Exception):
    """A batch could not be delivered now (retryable): it belongs in the spool."""


class RejectedError(Exception):
    """The service refused a batch for good (4xx other than 408/429)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


@dataclass
class DeliveryStats:
    sent_batches: int = 0
    inserted: int = 0
    duplicates: int = 0
    spooled_batches: int = 0
    spooled_rows: int = 0
    drained_batches: int = 0
    rejected_batches: int = 0
    rejected_rows: int = 0
    errors: list[str] = field(default_factory=list)

    def merge_receipt(self, r: BatchReceipt) -> None:
        self.sent_batches += 1
        self.inserted += r.inserted
        self.duplicates += r.duplicates

    def count_rejected(self, batch_id: object, rows: int, err: RejectedError) -> None:
        self.rejected_batches += 1
        self.rejected_rows += rows
        self.errors.append(f"batch {batch_id} rejected: {err}")
