"""Offline results files (`gac agent run --out`, read back by `gac ingest`): one batch document per line."""

from __future__ import annotations

import codecs
import json
import os
from collections.abc import Iterator
from pathlib import Path

from pydantic import ValidationError

from gac.agent.delivery.codec import DEFAULT_BATCH_SIZE, BatchBuffer, read_document
from gac.contracts.measurements import Batch, PlatformDescriptor, RunInfo


class BatchFileWriter(BatchBuffer):
    """Appends batches to a JSONL file (one Batch document per line) for later upload."""

    def __init__(
        self,
        path: Path | str,
        platform: PlatformDescriptor,
        run: RunInfo,
        batch_size: int = DEFAULT_BATCH_SIZE,
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


BATCH_LINE = "each line must be a batch (a gac.batch/v1 document with platform, run and measurements, as `gac agent run --out` writes)"
_MEASUREMENT_KEYS = {"op", "shape", "median_us"}  # a bare row of a batch's measurements


class NotAResultsFile(ValueError):
    """The file is not text (a binary, an archive): no line of it can be a batch."""


def check_results_file(path: Path | str, probe_bytes: int = 1 << 16) -> None:
    """Raise NotAResultsFile when the file's start is not UTF-8 text (NUL bytes, invalid sequences):
    one line for the whole file, not an error per binary 'line'."""
    with open(path, "rb") as fh:
        head = fh.read(probe_bytes)
    try:
        # final=False: a multi-byte character cut at the probe's end is not an error
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        raise NotAResultsFile(f"{path} is not a results file: it is not UTF-8 text; {BATCH_LINE}") from None
    if b"\0" in head:
        raise NotAResultsFile(f"{path} is not a results file: it holds binary data; {BATCH_LINE}")


def read_batch_file(path: Path | str) -> Iterator[tuple[int, Batch | None, str | None]]:
    """(line number, batch, error) for each non-empty line of a results file.

    Accepts a batch document of either layout per line, or a spool record ({"batch": ...}).
    A line that is not UTF-8 is an error of its own; the other lines are still read.
    """
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                yield lineno, None, f"line {lineno}: not UTF-8 text; {BATCH_LINE}"
                continue
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                if isinstance(data, dict) and "batch" in data and "measurements" not in data:
                    data = data["batch"]
                if not isinstance(data, dict):
                    yield lineno, None, f"line {lineno}: a batch is a JSON object, not {type(data).__name__}"
                    continue
                if _MEASUREMENT_KEYS <= data.keys() and "measurements" not in data and "columns" not in data:
                    yield lineno, None, f"line {lineno}: a single measurement, not a batch; {BATCH_LINE}"
                    continue
                yield lineno, read_document(data), None
            except (json.JSONDecodeError, ValidationError) as err:
                yield lineno, None, f"line {lineno}: {err}".splitlines()[0][:500] + _first_error(err)


def _first_error(err: Exception) -> str:
    if isinstance(err, ValidationError):
        e = err.errors(include_url=False)[0]
        return f" ({'.'.join(str(p) for p in e['loc'])}: {e['msg']})"
    return ""
