"""Curve models kept by what they are a function of: the curve's points and the options.

Whoever models the same curve data gets one computation: an alignment's latency model, its pending
checks and the dashboard's cliffs view all read `model_curve` of a stored curve's points. In memory
per process (the most recent MEMORY models), and, once a directory is attached (the service
attaches data_dir/models/curves), across processes: the service aligns in processes of its own and
serves the dashboard from its web workers. A file's name is a stable hash of the points, the
options and this code's version (gac.solver.stored); only the service writes the directory (a
pickle runs code when read).
"""

from __future__ import annotations

import logging
import os
import pickle
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

from gac.solver.curve_model import CliffOptions, CurveModel, Point, model_curve
from gac.solver.stored import keep_newest, stable_hash, write_atomically

log = logging.getLogger("gac.solver")

MEMORY = 256  # models kept per process
FILES = 4096  # ... and in the attached directory, the most recently used
PRUNE_EVERY = 64  # models written between two prunings of the directory


class CurveModels:
    """model_curve, computed once per distinct (points, options)."""

    SUFFIX = ".curve.pickle"

    def __init__(self) -> None:
        self._memory: OrderedDict[str, CurveModel] = OrderedDict()
        self._lock = threading.Lock()
        self.directory: Path | None = None
        self.computed = 0  # this process's counts
        self.read = 0

    def attach(self, directory: Path | None) -> None:
        """Keep models in this directory too, shared with other processes (None: memory only)."""
        self.directory = None if directory is None else Path(directory)

    def model(self, points: Sequence[Point], opts: CliffOptions = CliffOptions()) -> CurveModel:
        """model_curve(points, opts), from memory, the directory, or computed (and kept in both)."""
        key = stable_hash(("curve", tuple((p.x, p.median_us, p.p10_us, p.p90_us, p.n) for p in points), repr(opts)))
        with self._lock:
            found = self._memory.get(key)
            if found is not None:
                self._memory.move_to_end(key)
                return found
        found = self._load(key)
        if found is None:
            found = model_curve(points, opts)
            self.computed += 1
            self._save(key, found)
        with self._lock:
            self._memory[key] = found
            while len(self._memory) > MEMORY:
                self._memory.popitem(last=False)
        return found

    def _path(self, key: str) -> Path | None:
        return None if self.directory is None else self.directory / f"{key}{self.SUFFIX}"

    def _load(self, key: str) -> CurveModel | None:
        if (path := self._path(key)) is None:
            return None
        try:
            stored_key, model = pickle.loads(path.read_bytes())
            os.utime(path)  # recently used: the last to go
        except FileNotFoundError:
            return None
        except Exception as exc:  # noqa: BLE001 - cut short, or written by other code: computed again
            log.warning("curve model %s: not readable (%s); computing it again", path.name, type(exc).__name__)
            return None
        if stored_key != key or not isinstance(model, CurveModel):
            return None
        self.read += 1
        return model

    def _save(self, key: str, model: CurveModel) -> None:
        if (path := self._path(key)) is None:
            return
        try:
            write_atomically(path, pickle.dumps((key, model), protocol=pickle.HIGHEST_PROTOCOL))
        except Exception as exc:  # noqa: BLE001 - an optimisation: the model stays in memory
            log.warning("curve model not stored in %s (%s: %s)", path.parent, type(exc).__name__, exc)
            return
        if self.computed % PRUNE_EVERY == 0:
            keep_newest(path.parent, f"*{self.SUFFIX}", FILES)


CURVES = CurveModels()  # this process's


def shared_model_curve(points: Sequence[Point], opts: CliffOptions = CliffOptions()) -> CurveModel:
    """model_curve, computed once for everyone who models the same points (CURVES)."""
    return CURVES.model(points, opts)
