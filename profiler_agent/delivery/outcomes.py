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

    @property
    def about_the_token(self) -> bool:
        """401/403: the token was refused, not the batch; every later batch would be too, and a good token takes them all."""
        return self.status in (401, 403)


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
    # This run's spooled batches the service has not had yet (id -> rows): spooled_* count every
    # batch that was ever spooled, and one drained later (the service back) is no longer missing.
    waiting: dict[str, int] = field(default_factory=dict)

    @property
    def waiting_rows(self) -> int:
        return sum(self.waiting.values())

    def count_spooled(self, batch_id: object, rows: int) -> None:
        self.spooled_batches += 1
        self.spooled_rows += rows
        self.waiting[str(batch_id)] = rows

    def count_drained(self, batch_id: object, receipt: BatchReceipt) -> None:
        self.merge_receipt(receipt)
        self.drained_batches += 1
        self.waiting.pop(str(batch_id), None)

    def merge_receipt(self, r: BatchReceipt) -> None:
        self.sent_batches += 1
        self.inserted += r.inserted
        self.duplicates += r.duplicates

    def count_rejected(self, batch_id: object, rows: int, err: RejectedError) -> None:
        self.waiting.pop(str(batch_id), None)
        self.rejected_batches += 1
        self.rejected_rows += rows
        self.errors.append(f"batch {batch_id} rejected: {err}")
