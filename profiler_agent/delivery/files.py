"""Offline results files (`gac agent run --out`, read back by `gac ingest`): one batch document per line."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

from pydantic import ValidationError

from gac.contracts.measurements import Batch, PlatformDescriptor, RunInfo
from profiler_agent.delivery.codec import DEFAULT_BATCH_SIZE, BatchBuffer, read_document


class BatchFileWriter(BatchBuffer):
    """Appends batches to a JSONL file (one Batch document per line) for later upload."""

    def __init__(
        self, path: Path | str, platform: PlatformDescriptor, run: RunInfo, batch_size: int = DEFAULT_BATCH_SIZE,
        commit_every_s: float | None = None,
    ) -> None:
        super().__init__(platform, run, batch_size, commit_every_s)
        self.path = Path(path)
        self.rows = 0
        self.batches = 0
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def _commit(self, batch: Batch) -> None:
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(batch.model_dump_json(by_alias=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        self.rows += len(batch.measurements)
        self.batches += 1

    def close(self) -> None:
        self.flush()

    def kept_where(self) -> str:
        return f"written to {self.path}"


def read_batch_file(path: Path | str) -> Iterator[tuple[int, Batch | None, str | None]]:
    """(line number, batch, error) for each non-empty line of a results file.

    Accepts a batch document of either layout per line, or a spool record ({"batch": ...}).
    """
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                if isinstance(data, dict) and "batch" in data and "measurements" not in data:
                    data = data["batch"]
                if not isinstance(data, dict):
                    yield lineno, None, f"line {lineno}: a batch is a JSON object, not {type(data).__name__}"
                    continue
                yield lineno, read_document(data), None
            except (json.JSONDecodeError, ValidationError) as err:
                yield lineno, None, f"line {lineno}: {err}".splitlines()[0][:500] + _first_error(err)


def _first_error(err: Exception) -> str:
    if isinstance(err, ValidationError):
        e = err.errors(include_url=False)[0]
        return f" ({'.'.join(str(p) for p in e['loc'])}: {e['msg']})"
    return ""
