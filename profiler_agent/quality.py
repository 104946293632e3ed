"""The quality gate: a point whose samples show stalls is re-measured, or sent flagged, never as a clean median.

Three signs that a point measured its neighbours' work rather than its kernel: its samples split into
two modes (a fast one and a stalled one), its median is far off both measured neighbours on its curve
while its own spread is huge (a real cliff is a step with a tight spread; a stall is a spike with a wide
one), or other work took the cores it was timed on. A point that shows one is timed again; if every try
shows one, it is sent with `quality` set (gac.contracts.measurements.Quality), and the service keeps it
out of curves, alignments and a resume's "already stored", so a later run measures it again.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from gac.agent.cpu_load import _ticks
from gac.agent.timing import TimingResult, percentile

MIN_SAMPLES = 10  # fewer samples cannot show two modes
MODE_SHARE = 0.1  # each mode holds at least this share of the samples
GAP = 1.5  # the modes are split where one sorted sample is at least this times the one before it ...
MODE_RATIO = 2.0  # ... and the slow mode's median is at least this times the fast mode's
HUGE_SPREAD = 0.5  # (p90 - p10) / median above which a point's own noise can fake a step
FAR = 2.0  # a median this many times above both neighbours (or below both) is far off them
RETRIES = 2  # tries after the first before a point is sent flagged
MIN_TICKS = 10  # scheduler ticks (all cores) below which a load reading says nothing


def bimodal(samples: Sequence[float]) -> bool:
    """Whether the samples form a fast and a slow mode, each at least MODE_SHARE of them, apart by
    a gap of GAP and MODE_RATIO between their medians: stalls that hit some samples and not others."""
    s = sorted(v for v in samples if v > 0)
    n = len(s)
    if n < MIN_SAMPLES:
        return False
    edge = max(1, math.ceil(MODE_SHARE * n))
    split = max(range(edge, n - edge + 1), key=lambda i: s[i] / s[i - 1], default=None)
    if split is None or s[split] / s[split - 1] < GAP:
        return False
    return percentile(s[split:], 0.5) >= MODE_RATIO * percentile(s[:split], 0.5)


def isolated(median_us: float, spread: float, below_us: float | None, above_us: float | None) -> bool:
    """A median far off both neighbours (nearest measured dims on each side) while its spread is huge."""
    if below_us is None or above_us is None or not spread > HUGE_SPREAD:
        return False
    return median_us > FAR * max(below_us, above_us) or median_us * FAR < min(below_us, above_us)


class LoadProbe(Protocol):
    """Cores used by other work while a point was timed."""

    def start(self) -> None: ...

    def stop(self) -> float | None: ...  # None: too short to tell, or no way to read it here


class CoreLoad:
    """The machine's busy scheduler ticks (/proc/stat) less this process's own (os.times), over a point:
    reading two files costs microseconds, so every point gets its own figure."""

    def __init__(self, path: str = "/proc/stat") -> None:
        self.path = path
        self._hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._first: tuple[tuple[int, int, int] | None, float] | None = None

    def _own(self) -> float:
        t = os.times()
        return (t.user + t.system) * self._hz

    def start(self) -> None:
        self._first = (_ticks(self.path), self._own())

    def stop(self) -> float | None:
        if self._first is None or self._first[0] is None:
            return None
        first, own0 = self._first
        assert first is not None
        busy0, total0, _ = first
        second = _ticks(self.path)
        if second is None or second[1] - total0 < MIN_TICKS:
            return None
        busy1, total1, cores = second
        other = max(0.0, (busy1 - busy0) - (self._own() - own0))
        return other / (total1 - total0) * cores


@dataclass
class QualityGate:
    """What the runner asks of each point; `load` is None where no load can be read (a GPU's points
    do not share the host's cores the way a CPU kernel's threads do)."""

    load: LoadProbe | None = None
    cores: int = 1
    threads: int = 1
    retries: int = RETRIES

    def flags(self, result: TimingResult, busy_cores: float | None) -> list[str]:
        """The flags of one point from its own samples and the load while it ran."""
        out = []
        if bimodal(result.samples_us):
            out.append("bimodal")
        if result.extra.get("preempted_fallback") or (
            busy_cores is not None and self.threads > 1 and busy_cores + self.threads > self.cores + 0.5
        ):
            out.append("busy")  # threads waited on descheduled threads, or samples off the CPU were used after all
        return out


def for_timer(timer: object) -> QualityGate:
    """The gate for a timer: CPU timers read the load around each point, with their thread count."""
    threads = getattr(timer, "threads", None)
    if threads is None:
        return QualityGate()
    return QualityGate(load=CoreLoad(), cores=os.cpu_count() or 1, threads=int(threads))


__all__ = ["CoreLoad", "LoadProbe", "QualityGate", "bimodal", "for_timer", "isolated"]
