"""Cliff analytics of one latency curve for the dashboard: steps, the cliff-free frontier and the
alignment modulus the data implies. A thin view over gac.solver.curve_model, which does the work
(noise-aware segmentation, denoised estimates, robust frontier, learned period); the dashboard
and the solver share it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from gac.solver.curve_cache import shared_model_curve
from gac.solver.curve_model import CliffOptions, CurveModel, Modulus, Point, Step, find_period, model_curve

__all__ = [
    "CliffOptions", "CurveAnalysis", "Modulus", "Point", "Step",
    "analyze", "explaining_modulus", "find_steps", "model_curve",
]  # fmt: skip


@dataclass(frozen=True)
class CurveAnalysis:
    steps: list[Step]  # up (size_pct > 0) and down
    frontier: list[int]
    modulus: Modulus | None
    noise_pct: float  # the curve's typical relative noise of a point's median
    tolerance: float  # typical relative margin a larger dim must be slower by to keep a smaller one
    points: int
    notes: list[str] = field(default_factory=list)
    smooth: bool = False  # no significant step: any dim is as fast as its size
    # The comb's levels, shallowest first: (m, % less time than the dims around them; < 0: slower).
    ladder: list[tuple[int, float]] = field(default_factory=list)


def find_steps(points: Sequence[Point], opts: CliffOptions = CliffOptions()) -> list[Step]:
    """Jumps, up and down, that stand out from the curve's noise (and min_rel)."""
    return model_curve(points, opts).steps


def explaining_modulus(frontier: Sequence[int], xs: Sequence[int], opts: CliffOptions = CliffOptions()) -> Modulus | None:
    """The modulus (any m >= 2) whose measured multiples best match the frontier (ties: the smaller one)."""
    return find_period(frontier, xs, opts)


def frontier_margin(model: CurveModel, opts: CliffOptions) -> float:
    """The relative margin the frontier demanded of a typical pair of independent estimates."""
    if not model.estimates:
        return 0.0
    rel = statistics.median(model.sigma[x] / model.estimates[x] for x in model.estimates)
    return max(opts.frontier_tol_min, opts.frontier_z * math.sqrt(2) * rel)


# A jump between two measured dims further apart than this many typical spacings, and more than the smaller dim
# itself, says nothing of where it happens (a sweep of 1216..1421 and the dense original at 4096): it is no step.
# A doubling sweep's steps, or a dense sweep's next coarse point, stay steps.
GAP_SPACINGS = 8


def located_steps(steps: Sequence[Step], xs: Sequence[int]) -> tuple[list[Step], list[Step]]:
    """(the steps, the jumps across gaps wider than GAP_SPACINGS typical spacings and than the dim before them)."""
    gaps = [b - a for a, b in zip(xs, xs[1:])]
    spacing = statistics.median(gaps) if gaps else math.inf

    def across(s: Step) -> bool:
        return s.x - s.x_before > max(GAP_SPACINGS * spacing, s.x_before)

    return [s for s in steps if not across(s)], [s for s in steps if across(s)]


def analyze(points: Sequence[Point], opts: CliffOptions = CliffOptions()) -> CurveAnalysis:
    """Steps, frontier and modulus of one curve."""
    model = shared_model_curve(points, opts)  # the same computation an alignment of this curve reads
    steps, across = located_steps(model.steps, sorted(model.estimates))
    notes = model.notes + [
        f"{s.x_before} -> {s.x} ({s.size_pct:+.0f} %) is a jump across {s.x - s.x_before - 1:,} unmeasured dims, not a step" for s in across
    ]
    return CurveAnalysis(
        steps=steps,
        frontier=model.frontier,
        modulus=model.period,
        noise_pct=model.noise_pct,
        tolerance=frontier_margin(model, opts),
        points=len(model.estimates),
        notes=notes,
        smooth=model.smooth,
        ladder=[(lv.m, -100 * math.expm1(lv.log_offset)) for lv in model.comb.levels()] if model.comb is not None else [],
    )
