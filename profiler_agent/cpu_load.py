"""How much of this CPU other work uses right now, before timing threads start.

The load average is a minute-long mean: just after a plan ran on every core it still reads
near the thread count, and warns of a busy machine that is in fact idle. The kernel's
per-state tick counters (/proc/stat), read twice a moment apart while this process sleeps,
give the cores busy now; elsewhere (no /proc) the load average is the best there is.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

SAMPLE_S = 0.25  # long enough for a few scheduler ticks on every core
_IDLE = (3, 4)  # idle and iowait among the "cpu" line's fields (user nice system idle iowait irq softirq steal ...)


@dataclass(frozen=True)
class Busy:
    cores: float  # cores in use by other work
    how: str  # what the figure is, for the warning


def _ticks(path: str) -> tuple[int, int, int] | None:
    """(busy ticks, total ticks, cores) from a /proc/stat, or None where there is none."""
    try:
        with open(path, encoding="ascii") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    fields = [int(x) for x in lines[0].split()[1:9]]
    cores = sum(1 for line in lines[1:] if line.startswith("cpu"))
    idle = sum(fields[i] for i in _IDLE)
    return sum(fields) - idle, sum(fields), cores


def busy_now(sample_s: float = SAMPLE_S, path: str = "/proc/stat") -> Busy | None:
    """Cores busy with other work over the next sample_s (this process sleeps meanwhile)."""
    first = _ticks(path)
    if first is not None:
        time.sleep(sample_s)
        second = _ticks(path)
        if second is not None and second[1] > first[1]:
            share = (second[0] - first[0]) / (second[1] - first[1])
            return Busy(share * second[2], f"{share * second[2]:.1f} cores busy with other work")
    try:
        load = os.getloadavg()[0]
    except OSError:
        return None
    return Busy(load, f"load average {load:.1f}")


QUIET_OR_ONE_THREAD = "use --threads 1 (or a quiet machine) for trustworthy figures"


def contention_warning(busy: Busy | None, cores: int, threads: int, advice: str = QUIET_OR_ONE_THREAD) -> str | None:
    """Why timing threads would stall (more threads than idle cores), or None; `advice` says what to do."""
    if busy is None or threads <= 1 or busy.cores + threads <= cores + 0.5:
        return None
    return f"{busy.how} on {cores} cores: {threads} timing threads will be descheduled and stall; {advice}"
