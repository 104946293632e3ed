"""What an alignment will cost, estimated from its validated manifest before any work is done.

The weight count alone says little: one head_dim weight of huge shapes made the paper's DP
baseline build a table of hundreds of millions of cells. The estimate counts what the solver's
work grows with: the dims each item's window scans, times the kernels and token counts each dim
is priced at (the latency model's evaluations, and the curve points it reads; under `no_slower`
once per solve, at most MOST_SOLVES), plus the cells of the paper-DP tables (items x the quantized
budget span). The service refuses (413, the estimate
in the detail) what is above GAC_ALIGN_MAX_WORK, and every alignment runs in a worker process
under a memory limit (service/align/limits.py) for what the estimate misses.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from gac.contracts.manifest import Manifest
from gac.solver.align import AlignOptions, with_goal
from gac.solver.candidates import PAPER_RADIUS
from gac.solver.kinds import kernels, row_count, unit_params
from gac.solver.no_slower import MOST_SOLVES


@dataclass(frozen=True)
class Cost:
    weights: int
    items: int
    candidates: int  # dims scanned over all items' windows and look-aheads
    curve_points: int  # distinct (curve, dim) points those windows price (items of equal shapes share them)
    evaluations: int  # candidates x kernels x token counts: the latency model's work
    dp_cells: int  # the paper-DP baselines' table cells (0 when it is skipped for its item count)
    dp_bytes: int  # ... and the memory those tables take

    @property
    def work(self) -> int:
        """One figure to bound: model evaluations plus DP cells (each a few array operations)."""
        return self.evaluations + self.dp_cells

    def describe(self) -> dict[str, int]:
        return {**asdict(self), "work": self.work}


def estimate(manifest: Manifest, options: AlignOptions | None = None) -> Cost:
    """An upper bound of the solver's work for this manifest, in one pass over its weights (about
    a second per million weights: it runs before any work, so it must cost little itself)."""
    opts = options or AlignOptions()
    copts = opts.candidates
    tokens = len(manifest.workload.tokens)
    u = 8 * min(map(row_count, manifest.weights))
    # One item per ungrouped weight or group (gac.solver.candidates.build_items), without its objects.
    items: dict[str, list] = {}  # key -> [sum of dim x unit, members, smallest max_dim, unit, kernels, shape]
    per_kind: dict[tuple, int] = {}
    for w in manifest.weights:
        key = w.name if w.group is None else "\0" + w.group
        kind = (w.kind, getattr(w, "gated", None))
        if kind not in per_kind:
            per_kind[kind] = len(kernels(w, 1))
        unit = unit_params(w)
        found = items.get(key)
        if found is None:
            items[key] = [w.dim * unit, 1, w.max_dim, unit, per_kind[kind], (kind, unit, row_count(w))]
        else:
            found[0] += w.dim * unit
            found[1] += 1
            found[2] = min(found[2], w.max_dim)
            found[3] += unit
            found[4] += per_kind[kind]
    candidates = evaluations = dp_cap = 0
    spans: dict[tuple, tuple[int, list[tuple[int, int]]]] = {}
    for params, members, max_dim, unit, kernel_count, shape in items.values():
        d_star = params / unit  # as gac.contracts.manifest.shared_dim
        half = copts.half_width(d_star)
        lo = max(1, math.floor(d_star) - half, math.ceil(copts.min_keep * d_star))  # as Item.window
        hi = min(max_dim, math.ceil(d_star) + half)
        top = min(max_dim, hi + (copts.lookahead if copts.lookahead is not None else half))
        scanned = max(0, top - lo + 1)
        candidates += scanned
        evaluations += scanned * kernel_count * tokens
        spans.setdefault(shape if members == 1 else (shape, members), (kernel_count, []))[1].append((lo, top))
        # The DP's quantized span over our window, or the paper's own (+/- PAPER_RADIUS multiples of 8).
        dp_cap += math.ceil(max(hi - lo, 16 * PAPER_RADIUS) * unit / u)
    curve_points = sum(_union(runs) * count * tokens for count, runs in spans.values())
    if tokens > 1 and with_goal(manifest, opts).no_slower:
        evaluations *= MOST_SOLVES  # each solve prices the windows again at its own token weights
    paper_dp = len(items) <= opts.paper_dp_max_items
    cells = len(items) * (dp_cap + 1) if paper_dp else 0
    # Per table: a uint16 pick per cell, and three float64 rows of the capacity (best, new, the candidate row).
    dp_bytes = 2 * cells + 24 * (dp_cap + 1) if paper_dp else 0
    return Cost(len(manifest.weights), len(items), candidates, curve_points, evaluations, cells, dp_bytes)


def _union(runs: list[tuple[int, int]]) -> int:
    """How many integers the closed ranges cover together."""
    total, end = 0, 0
    for lo, hi in sorted(runs):
        lo = max(lo, end + 1)
        if hi >= lo:
            total += hi - lo + 1
            end = hi
    return total
