"""Files the solver keeps between processes: a stable name for a key, and whole-file writes.

A name is a hash of the key and of this code's version (the solver's and the contracts' sources),
the same in every process (hash() is salted per process), so a file written by other code is never
read as this code's. A file is written whole and renamed into place: a reader sees all of it or none.
"""

from __future__ import annotations

import enum
import hashlib
import os
import sys
import tempfile
from collections.abc import Hashable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from gac.contracts.alignment import Candidate


def _canonical(value: Any) -> Any:
    """A form of a model key whose repr is the same in every process: sets sorted (their order
    follows string hashes, which differ per process), enums as their values."""
    if isinstance(value, enum.Enum):
        return _canonical(value.value)
    if isinstance(value, (set, frozenset)):
        return ("set", sorted((_canonical(v) for v in value), key=repr))
    if isinstance(value, Mapping):
        return ("map", sorted(((_canonical(k), _canonical(v)) for k, v in value.items()), key=repr))
    if isinstance(value, (tuple, list)):
        return tuple(_canonical(v) for v in value)
    if value is None or isinstance(value, (str, int, float, bool, bytes)):
        return value
    if isinstance(value, type):  # a weight's kind (gac.solver.kinds.shape_key)
        return f"{value.__module__}.{value.__qualname__}"
    raise TypeError(f"a model key holds a {type(value).__name__}: no stable form")


@cache
def code_version() -> str:
    """A hash of the sources a stored model was computed by (the solver's and the contracts'): a
    model written by other code is never read."""
    digest = hashlib.sha256()
    contracts = sys.modules[Candidate.__module__].__file__
    assert contracts is not None
    for package in (Path(__file__).parent, Path(contracts).parent):
        for path in sorted(package.rglob("*.py")):
            digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def stable_hash(key: Hashable) -> str:
    """The same for the same key in every process (hash() is not: it is salted per process)."""
    return hashlib.sha256(repr((code_version(), _canonical(key))).encode()).hexdigest()[:32]


def write_atomically(path: Path, data: bytes) -> None:
    """Write the file whole, then rename it into place: a reader sees all of it or none (the
    directory is made, private, if missing)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".writing-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def keep_newest(directory: Path, pattern: str, keep: int) -> None:
    """Delete all but the `keep` most recently used files of the pattern (a file gone meanwhile is fine)."""
    files = []
    for path in directory.glob(pattern):
        try:
            files.append((path.stat().st_mtime, path))
        except FileNotFoundError:
            continue
    for _mtime, path in sorted(files, reverse=True)[keep:]:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
