"""Batches on the wire: cut rows into batches with client-made ids, lay them out by column, read either layout back."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from typing import Any

from gac.agent.interrupt import shielded
from gac.contracts.columns import COLUMNS_SCHEMA, ColumnBatch
from gac.contracts.ids import new_id
from gac.contracts.measurements import Batch, Measurement, PlatformDescriptor, RunInfo, shape_key

DEFAULT_BATCH_SIZE = 1000


def check_batch_size(batch_size: int) -> int:
    if not 1 <= batch_size <= 10_000:
        raise ValueError(f"batch_size must be in 1..10000, got {batch_size}")
    return batch_size


def make_batches(
    platform: PlatformDescriptor, run: RunInfo, rows: Iterable[Measurement], batch_size: int = DEFAULT_BATCH_SIZE
) -> Iterator[Batch]:
    """Cut rows into batches with fresh client-made ids."""
    check_batch_size(batch_size)
    chunk: list[Measurement] = []
    for m in rows:
        chunk.append(m)
        if len(chunk) >= batch_size:
            yield Batch(id=new_id(), platform=platform, run=run, measurements=chunk)
            chunk = []
    if chunk:
        yield Batch(id=new_id(), platform=platform, run=run, measurements=chunk)


class BatchBuffer:
    """Rows added one at a time, committed as a batch with a fresh id every `batch_size` rows, or
    (with `commit_every_s`) at the first row added once that long has passed since the last commit.

    A commit has two steps: `_commit` makes the batch durable (the local database, a file, the
    spool) with stop signals held off (gac.agent.interrupt.shielded), so Ctrl-C or SIGTERM
    never cuts it in half; `_after_commit` then sends it: a stop waits for the service's answer,
    so what the run says it sent is true, and a second stop does not (the batch is already
    safe). Time is checked as rows are added: a row
    waits for its commit at most `commit_every_s` plus the time the next point takes to time."""

    def __init__(
        self, platform: PlatformDescriptor, run: RunInfo, batch_size: int = DEFAULT_BATCH_SIZE, commit_every_s: float | None = None
    ) -> None:
        self.platform = platform
        self.run = run
        self.batch_size = check_batch_size(batch_size)
        self.commit_every_s = commit_every_s
        self.committed = 0  # rows made durable so far
        self._points: set[tuple[str, str, str, str]] = set()  # ... and the points they measure (a point timed again has a row per run)
        self._pending: list[Measurement] = []
        self._last_commit = time.monotonic()

    def _commit(self, batch: Batch) -> None:
        raise NotImplementedError

    def _after_commit(self, batch: Batch) -> None:
        """What follows once the batch is durable (nothing, unless a subclass says)."""

    def add(self, m: Measurement) -> None:
        self._pending.append(m)
        if len(self._pending) >= self.batch_size or self._due():
            self.flush()

    def _due(self) -> bool:
        return self.commit_every_s is not None and time.monotonic() - self._last_commit >= self.commit_every_s

    def add_many(self, rows: Iterable[Measurement]) -> None:
        for m in rows:
            self.add(m)

    def flush(self) -> None:
        """Commit the rows added since the last batch, if any."""
        self._last_commit = time.monotonic()
        if not self._pending:
            return
        with shielded() as shield:  # the rows leave the buffer only once they are durable
            batch = Batch(id=new_id(), platform=self.platform, run=self.run, measurements=self._pending)
            self._commit(batch)
            self._pending = []
            self.committed += len(batch.measurements)
            self._points.update(point_key(m) for m in batch.measurements)
            # What follows (a send) only waits: a stop waits for its outcome, a second stop does not.
            shield.breakable = True
            self._after_commit(batch)

    @property
    def committed_points(self) -> int:
        """Distinct points among the rows made durable so far."""
        return len(self._points)


def point_key(m: Measurement) -> tuple[str, str, str, str]:
    """What makes a row's point: its kernel, dtype, axis and shape (the quality gate's re-timings share it)."""
    return (m.op.value, m.dtype.value, m.sweep_axis, shape_key(m.shape))


def batch_document(batch: Batch) -> dict[str, Any]:
    """The batch as the agent sends and spools it: laid out by column, unset optional fields
    left out (the service fills their defaults), so the service parses it about four times
    faster than the same rows one object each, and it is about half the bytes."""
    return ColumnBatch.of(batch).model_dump(mode="json", by_alias=True, exclude_none=True)


def by_row(doc: dict[str, Any]) -> dict[str, Any]:
    """A column-layout document as the same batch by row, for services older than the column layout."""
    return read_document(doc).model_dump(mode="json", by_alias=True, exclude_none=True)


def is_by_column(doc: dict[str, Any]) -> bool:
    return doc.get("schema") == COLUMNS_SCHEMA


def document_rows(doc: dict[str, Any]) -> int:
    """Rows in a batch document of either layout (spools may hold both)."""
    measurements = doc.get("measurements", [])
    return len(measurements.get("id", [])) if isinstance(measurements, dict) else len(measurements)


def read_document(doc: dict[str, Any]) -> Batch:
    """A batch document of either layout, validated, as a Batch."""
    if is_by_column(doc):
        return ColumnBatch.model_validate(doc).to_batch()
    return Batch.model_validate(doc)


def compact_json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, separators=(",", ":"))
