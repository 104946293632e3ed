"""Latency models kept between alignments in one process.

A curve's model is a function of the curve's points, so of the version a lookup gives them; an
item's candidates are a function of its shapes, window and the models. A lookup that can name its
curves' versions (`VersionedLookup`, as the service's database lookup does) lets every alignment
of the same shapes, dtype and workload against the same curve versions share one LatencyModel:
its curve models, lattices and per-item candidates are computed once. Any curve's new version is a
new key, so nothing stale is ever read. Lookups without versions (files) get a fresh model.

A second level on disk (ModelFiles, attached by whoever names a directory: the service does) shares
them between processes: the service aligns each manifest, and runs its pending checks, in a process
of its own that starts with an empty memory level. A model is written there, pickled, once an
alignment filled it (atomically: a reader sees a whole file or none), and read back on a memory
miss. A file's name is a stable hash of the model's key and of this code's version (the solver's
and the contracts' sources), and the file holds the key itself, checked on reading: a file written
by other code, for another key, or cut short is never used. Only the service writes the directory
(a pickle runs code when read): it must not be writable by anyone else.
"""

from __future__ import annotations

import logging
import os
import pickle
import threading
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from gac.contracts.alignment import Candidate
from gac.contracts.manifest import Manifest
from gac.contracts.measurements import Dtype, Op
from gac.solver.candidates import CandidateOptions, Item, ItemCandidates, LatencyModel, build_candidates
from gac.solver.kinds import kernels, original_points, shape_key
from gac.solver.lookup import LatencyLookup, PointLatency
from gac.solver.stored import stable_hash, write_atomically

log = logging.getLogger("gac.solver")


@runtime_checkable
class VersionedLookup(LatencyLookup, Protocol):
    def curve_version(self, op: Op, dtype: Dtype, fixed_shape: Mapping[str, int], axis: str) -> Hashable | None:
        """A token that changes whenever the curve's points do (None: the curve is not measured).
        Tokens of different lookups (databases, platforms) never collide."""
        ...


class _Snapshot:
    """The curves a cached model read, frozen at the versions of its key: a cached model never
    reads through the session of the alignment that built it (closed, or another thread's)."""

    def __init__(self, platform: str, curves: dict[tuple, Mapping[int, PointLatency]], dtype: Dtype) -> None:
        self._platform = platform
        self._curves = curves
        self._dtype = dtype

    @property
    def platform(self) -> str:
        return self._platform

    def curve(self, op: Op, dtype: Dtype, fixed_shape: Mapping[str, int], axis: str) -> Mapping[int, PointLatency]:
        if Dtype(dtype) != self._dtype:
            return {}
        return self._curves.get((Op(op), tuple(sorted(fixed_shape.items())), axis), {})


class SharedModel(LatencyModel):
    """A LatencyModel that also keeps each item's candidates, by what they depend on."""

    def __init__(self, lookup: LatencyLookup, manifest: Manifest) -> None:
        super().__init__(lookup, manifest)
        self._candidates: dict[tuple, ItemCandidates] = {}
        self.candidate_hits = 0

    def filled(self) -> tuple[int, ...]:
        """How much the model holds (its caches' sizes): it grows as alignments ask for more."""
        return tuple(len(v) for v in vars(self).values() if isinstance(v, dict))

    def __getstate__(self) -> dict[str, Any]:
        # Pickled whole (plain data: curves, numpy arrays, dataclasses) but for the candidates: items
        # of one shape share most of theirs (same dim, same latency), so each distinct candidate is
        # written and rebuilt once, not once per item (tens of thousands of pydantic models: most of
        # a load's time otherwise).
        state = vars(self).copy()
        table: dict[tuple, int] = {}
        packed = {
            key: (
                ic.item,
                [table.setdefault((c.dim, c.latency_us, c.source), len(table)) for c in ic.candidates],
                ic.measured,
                ic.missing,
                ic.notes,
            )
            for key, ic in self._candidates.items()
        }
        state["_candidates"] = (list(table), packed)
        state["candidate_hits"] = 0
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        rows, packed = state["_candidates"]
        made = [Candidate(dim=d, latency_us=lat, source=src) for d, lat, src in rows]  # frozen: shared safely
        state["_candidates"] = {
            key: ItemCandidates(item, [made[i] for i in idx], measured, missing, notes)
            for key, (item, idx, measured, missing, notes) in packed.items()
        }
        vars(self).update(state)

    def freeze(self) -> None:
        """Read every curve the model may ask for now, and serve them from memory from then on."""
        assert self.lookup is not None
        curves = {key: self.curve(k) for key, k in self._kernels.items()}
        self.lookup = _Snapshot(self.lookup.platform, curves, self.dtype)

    def candidates(self, item: Item, opts: CandidateOptions, every_dim: bool) -> ItemCandidates:
        # build_candidates reads the item's shapes, window (d*, max dim) and the curves: not its name or importance.
        key = (item.shapes, item.d_star, item.max_dim, opts, every_dim)
        found = self._candidates.get(key)
        if found is None:
            found = self._candidates[key] = build_candidates(item, self, opts, every_dim=every_dim)
        else:
            self.candidate_hits += 1
        return found if found.item is item else replace(found, item=item)


def candidates_of(item: Item, model: LatencyModel, opts: CandidateOptions, every_dim: bool = False) -> ItemCandidates:
    """build_candidates, remembered when the model is shared."""
    if isinstance(model, SharedModel):
        return model.candidates(item, opts, every_dim)
    return build_candidates(item, model, opts, every_dim=every_dim)


def model_key(manifest: Manifest, lookup: VersionedLookup) -> Hashable | None:
    """What a LatencyModel of this manifest depends on: dtype, workload, the weights' shapes and the
    versions of every curve their kernels (and dense originals) run. None: a version is unknown."""
    dtype = manifest.workload.dtype
    tokens = tuple(manifest.workload.weighted_tokens())
    shapes = {shape_key(w): w for w in manifest.weights}
    curves: dict[tuple, tuple[Op, dict[str, int], str]] = {}
    for w in shapes.values():
        for m, _ in tokens:
            for k in [*kernels(w, m), *(k for k, _x in original_points(w, m))]:
                curves.setdefault(k.curve_key, (k.op, k.fixed_shape, k.axis))
    versions = frozenset((key, lookup.curve_version(op, dtype, fixed, axis)) for key, (op, fixed, axis) in curves.items())
    return (lookup.platform, dtype, tokens, frozenset(shapes), versions)


class ModelFiles:
    """Shared models stored in a directory, one pickle per key, the most recently used `max_files`
    (and at most `max_bytes` together) kept. Safe between processes: files are written whole and
    renamed into place, and a file gone or damaged meanwhile is a miss."""

    SUFFIX = ".model.pickle"

    def __init__(self, directory: Path, max_files: int = 16, max_bytes: int = 2 << 30) -> None:
        self.directory = Path(directory)
        self.max_files, self.max_bytes = max_files, max_bytes
        self.hits = 0
        self.misses = 0
        self.writes = 0

    def path(self, key: Hashable) -> Path:
        return self.directory / f"{stable_hash(key)}{self.SUFFIX}"

    def load(self, key: Hashable) -> SharedModel | None:
        path = self.path(key)
        try:
            with open(path, "rb") as f:
                stored_key, model = pickle.load(f)
            os.utime(path)  # recently used: the last to go
        except FileNotFoundError:
            self.misses += 1
            return None
        except Exception as exc:  # noqa: BLE001 - cut short, or written by other code: computed again (and rewritten)
            log.warning("latency model %s: not readable (%s: %s); computing it again", path.name, type(exc).__name__, exc)
            self.misses += 1
            return None
        if stored_key != key or not isinstance(model, SharedModel):
            self.misses += 1
            return None
        self.hits += 1
        return model

    def save(self, key: Hashable, model: SharedModel) -> bool:
        """Write the model (atomically), then drop the least recently used files past the limits.
        Failures (a full disk, a read-only directory) are logged: the model stays in memory. True: written."""
        try:
            write_atomically(self.path(key), pickle.dumps((key, model), protocol=pickle.HIGHEST_PROTOCOL))
        except Exception as exc:  # noqa: BLE001 - the cache is an optimisation
            log.warning("latency model not stored in %s (%s: %s)", self.directory, type(exc).__name__, exc)
            return False
        self.writes += 1
        self.prune()
        return True

    def prune(self) -> None:
        files = []
        for path in self.directory.glob(f"*{self.SUFFIX}"):
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            files.append((st.st_mtime, st.st_size, path))
        files.sort(reverse=True)  # newest first
        kept, size = 0, 0
        for _mtime, bytes_, path in files:
            if kept < self.max_files and (kept == 0 or size + bytes_ <= self.max_bytes):
                kept, size = kept + 1, size + bytes_
                continue
            try:
                path.unlink()
            except FileNotFoundError:
                pass


class ModelCache:
    """The latest few shared models, least recently used out first, and the models on disk when a
    directory is attached. Thread-safe; a model shared by two alignments at once fills its caches
    with the same values either way."""

    def __init__(self, size: int = 4) -> None:
        self._size = size
        self._models: OrderedDict[Hashable, SharedModel] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.files: ModelFiles | None = None
        self._stored: dict[int, tuple[Hashable, tuple[int, ...]]] = {}  # id(model) -> its key, and filled() when last on disk

    def attach(self, directory: Path | None) -> None:
        """Keep models in this directory too, shared with other processes (None: memory only)."""
        with self._lock:
            if directory is None:
                self.files = None
            elif self.files is None or self.files.directory != Path(directory):
                self.files = ModelFiles(Path(directory))

    def store(self, model: LatencyModel) -> bool:
        """Write a shared model to the attached directory if it holds more than its file does (an
        alignment filled it): what the next process reads instead of computing. True: written."""
        files = self.files
        if files is None or not isinstance(model, SharedModel):
            return False
        with self._lock:
            known = self._stored.get(id(model))
        if known is None:
            return False
        key, filled = known
        now = model.filled()
        if now == filled:
            return False
        if not files.save(key, model):
            return False
        with self._lock:
            if id(model) in self._stored:
                self._stored[id(model)] = (key, now)
        return True

    def model(self, manifest: Manifest, lookup: LatencyLookup | None) -> LatencyModel:
        """The shared model for this manifest and lookup, or a new one (a plain LatencyModel when the
        lookup cannot name its curves' versions)."""
        return self.model_from(manifest, lookup)[0]

    def model_from(self, manifest: Manifest, lookup: LatencyLookup | None) -> tuple[LatencyModel, str]:
        """model(), and where it came from: "memory", "disk", "new" (shared, to be filled) or "plain"."""
        if lookup is None or not isinstance(lookup, VersionedLookup):
            return LatencyModel(lookup, manifest), "plain"
        key = model_key(manifest, lookup)
        with self._lock:
            found = self._models.get(key)
            if found is not None:
                self._models.move_to_end(key)
                self.hits += 1
                return found, "memory"
            self.misses += 1
        files = self.files
        model = files.load(key) if files is not None else None
        if model is None:
            model, origin = SharedModel(lookup, manifest), "new"
            model.freeze()
            filled: tuple[int, ...] = ()  # not on disk yet
        else:
            origin, filled = "disk", model.filled()
        with self._lock:
            model = self._models.setdefault(key, model)
            self._models.move_to_end(key)
            self._stored.setdefault(id(model), (key, filled))
            while len(self._models) > self._size:
                _, gone = self._models.popitem(last=False)
                self._stored.pop(id(gone), None)
        return model, origin

    def stats(self) -> dict[str, int]:
        """Models found in memory, on disk, computed anew; files written (this process's counts)."""
        files = self.files
        return {
            "memory_hits": self.hits,
            "disk_hits": files.hits if files else 0,
            "built": files.misses if files else self.misses,
            "stored": files.writes if files else 0,
        }

    def clear(self) -> None:
        with self._lock:
            self._models.clear()
            self._stored.clear()


MODELS = ModelCache()  # this process's
