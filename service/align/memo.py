"""Complete answers kept by what they are a function of, so an identical alignment is not computed again.

An answer is a function of the manifest (every field: weights, importance, budget, objective), the
latency model's key (platform, dtype, workload, the versions of every curve it reads) and the
code (gac.solver.stored.stable_hash holds the solver's and contracts' source hash). The same
request against unchanged curves gets the stored answer; any new measurement on one of its
curves is a new key. Only complete answers are kept: one whose checks are pending is stored once
they ran (complete_pending), under the key of the model it was aligned with.

Files sit beside the latency models (the service's data_dir/models/answers), zlib-compressed JSON
(never pickle: reading one runs no code), written whole and renamed into place; the most recently
used MAX_FILES are kept.
"""

from __future__ import annotations

import logging
import os
import zlib
from collections.abc import Hashable
from pathlib import Path

from gac.contracts.alignment import AlignmentResult
from gac.contracts.manifest import Manifest
from gac.solver.stored import keep_newest, stable_hash, write_atomically

log = logging.getLogger("gac.service")

MAX_FILES = 64
SUFFIX = ".answer.json.z"


def answer_key(model_key: Hashable, manifest: Manifest, exhaustive: bool) -> str:
    """The name of an answer: the same for the same request against the same curve versions."""
    return stable_hash(("answer", model_key, manifest.model_dump(mode="json", by_alias=True), exhaustive))


class AnswerFiles:
    """Complete AlignmentResults in a directory, one file per answer_key."""

    def __init__(self, directory: Path, max_files: int = MAX_FILES) -> None:
        self.directory = Path(directory)
        self.max_files = max_files

    def _path(self, key: str) -> Path:
        return self.directory / f"{key}{SUFFIX}"

    def load(self, key: str) -> AlignmentResult | None:
        path = self._path(key)
        try:
            result = AlignmentResult.model_validate_json(zlib.decompress(path.read_bytes()))
            os.utime(path)  # recently used: the last to go
        except FileNotFoundError:
            return None
        except Exception as exc:  # noqa: BLE001 - cut short or written by other code: computed again
            log.warning("stored answer %s: not readable (%s); aligning again", path.name, type(exc).__name__)
            return None
        return None if result.pending else result

    def save(self, key: str, result: AlignmentResult) -> bool:
        """Keep a complete answer (one with checks pending is not kept). True: written."""
        if result.pending:
            return False
        try:
            write_atomically(self._path(key), zlib.compress(result.__pydantic_serializer__.to_json(result, by_alias=True), 1))
        except Exception as exc:  # noqa: BLE001 - an optimisation: the answer is stored in the database anyway
            log.warning("answer not kept in %s (%s: %s)", self.directory, type(exc).__name__, exc)
            return False
        keep_newest(self.directory, f"*{SUFFIX}", self.max_files)
        return True
