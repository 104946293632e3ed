"""GAC's three objectives on one measured profile, and the frontier point the proof times.

- importance: the paper's objective (most kept importance under the budget, cliff-free dims);
- latency: the fastest choice keeping >= (1 - EPSILON) of the importance-only optimum's kept
  importance (gac.solver.align, every measured dim of each window competes);
- frontier: the Pareto points (predicted latency, kept importance) under the budget. The proof
  times the FASTEST point whose measured model quality is within QUALITY_TOL of the unaligned
  variant's: points are scored from the fastest upward, at most FRONTIER_TRIES of them.

A frontier point carries aggregate figures only (latency_us, importance_kept, params). Its dims
come from aligning again with objective "latency" and epsilon = 1 - importance_kept (clipped to
[0, 0.5]): that asks for the fastest choice keeping at least the point's importance, which is the
point itself. The re-aligned result must show the point's importance_kept and params, else the
point is skipped and the report says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gac.contracts.alignment import AlignmentResult, FrontierPoint
from gac.contracts.goal import EPSILON_MAX
from gac.contracts.manifest import Manifest
from gac.proof.profile import dims_of
from gac.proof.quality import Quality
from gac.solver.align import AlignOptions, align
from gac.solver.lookup import LatencyLookup

EPSILON = 0.005
QUALITY_TOL = 0.01
FRONTIER_TRIES = 6
MAX_EPSILON = EPSILON_MAX  # the manifest's bound on epsilon
# epsilon is 1 - importance_kept, a float: a hair more slack keeps the integer target at or below the
# point's own value (the re-alignment checks it found exactly that point).
_SLACK = 1e-12

IMPORTANCE, LATENCY, FRONTIER = "importance", "latency", "frontier"


def objective_alignments(
    manifest: Manifest, lookup: LatencyLookup | None, opts: AlignOptions, have: AlignmentResult | None = None
) -> dict[str, AlignmentResult]:
    """objective -> alignment on the same profile and candidate options. `have`: an alignment already
    made with these options (reused when its objective and epsilon are one of these)."""
    out: dict[str, AlignmentResult] = {}
    for kind in (IMPORTANCE, LATENCY, FRONTIER):
        if have is not None and lookup is not None and have.objective_kind == kind and (kind == IMPORTANCE or have.epsilon == EPSILON):
            out[kind] = have
            continue
        out[kind] = align(manifest, lookup, dataclasses.replace(opts, objective=kind, epsilon=EPSILON))
    return out


def point_dims(manifest: Manifest, lookup: LatencyLookup, opts: AlignOptions, pt: FrontierPoint) -> tuple[dict[str, int] | None, str]:
    """The dims of one frontier point (re-aligned for latency at its importance), or None and why not."""
    # A point may keep more than the importance objective's optimum (its candidates are the cliff-free
    # dims only; the latency objective's are every measured dim): a negative epsilon reaches it.
    eps = 1.0 - pt.importance_kept + _SLACK
    if eps > MAX_EPSILON:
        return None, f"keeps {pt.importance_kept:.4f} (< {1 - MAX_EPSILON}): epsilon would exceed {MAX_EPSILON}"
    res = align(
        manifest,
        lookup,
        dataclasses.replace(
            opts,
            objective=LATENCY,
            epsilon=eps,
            baselines=False,
            cross_check="none",
            frontier_points=0,
            min_gain=0,  # this point, whatever it gains over the next
        ),
    )
    kept = res.latency.importance_kept
    if res.total_params != pt.params or kept is None or abs(kept - pt.importance_kept) > 1e-9:
        return None, (
            f"re-aligned at epsilon {eps:.6f} gave another point (kept {kept}, {res.total_params:,} params)"
            f" than the frontier's (kept {pt.importance_kept:.6f}, {pt.params:,} params)"
        )
    return dims_of(res), f"re-aligned at epsilon {eps:.6f}"


@dataclass
class FrontierTry:
    rank: int  # 1 = the fastest frontier point
    latency_us: float
    importance_kept: float
    params: int
    quality: float | None = None  # the headline figure; None: not scored
    qualifies: bool | None = None
    note: str = ""


@dataclass
class FrontierPick:
    dims: dict[str, int]
    points: int  # Pareto points on the frontier
    tries: list[FrontierTry] = field(default_factory=list)  # in the order tried
    picked: int | None = None  # index into tries; None: the fallback
    note: str = ""
    cap: int = FRONTIER_TRIES
    search: str = "bisect"
    skipped: list[str] = field(default_factory=list)  # points no re-alignment reaches, and why


SEARCHES = ("bisect", "scan")


def pick_frontier(
    manifest: Manifest,
    lookup: LatencyLookup | None,
    opts: AlignOptions,
    frontier: AlignmentResult,
    latency_dims: Mapping[str, int],
    score: Callable[[Mapping[str, int]], Quality],
    baseline: Quality,
    tries: int = FRONTIER_TRIES,
    tolerance: float = QUALITY_TOL,
    search: str = "bisect",
) -> FrontierPick:
    """The fastest frontier point whose quality is within `tolerance` of `baseline`, at most `tries` scored.

    search "scan": from the fastest point upward until one qualifies (with a frontier of 50 points
    the cap usually stops it among points that keep far too little importance). "bisect": binary
    search over the points by predicted latency, assuming quality improves with kept importance
    along the frontier (checked only where scored): `tries` = 6 settles 63 points, and the pick
    is a qualifying point whose next faster point, when scored, did not qualify.
    Falls back to the latency-aware choice (the frontier's chosen point) when there is no frontier
    or no point scored qualifies; the note says which."""
    if search not in SEARCHES:
        raise ValueError(f"frontier search {search!r}: use one of {SEARCHES}")
    ordered = sorted(frontier.frontier, key=lambda p: (p.latency_us, -p.importance_kept))
    pick = FrontierPick(dims=dict(latency_dims), points=len(ordered), cap=tries, search=search)
    if lookup is None or not ordered:
        pick.note = "no frontier (no latency data): the latency-aware choice"
        return pick
    # Points an epsilon up to MAX_EPSILON cannot reach are left out before any re-alignment.
    pts: list[tuple[int, FrontierPoint]] = []
    for rank, pt in enumerate(ordered, 1):
        if pt.chosen or 1 - MAX_EPSILON <= pt.importance_kept:
            pts.append((rank, pt))
        else:
            pick.skipped.append(f"point {rank} keeps {pt.importance_kept:.4f}: below {1 - MAX_EPSILON}, no epsilon reaches it")

    def dims_at(i: int) -> tuple[dict[str, int] | None, str]:
        pt = pts[i][1]
        return (dict(latency_dims), "the latency-aware choice") if pt.chosen else point_dims(manifest, lookup, opts, pt)

    def attempt(i: int) -> bool | None:
        """Score point i; None when its dims cannot be had (then it leaves the search)."""
        rank, pt = pts[i]
        dims, why = dims_at(i)
        if dims is None:
            pick.skipped.append(f"point {rank}: {why}")
            return None
        q = score(dims)
        ok = q.no_worse_than(baseline, tolerance)
        pick.tries.append(FrontierTry(rank, pt.latency_us, pt.importance_kept, pt.params, q.value, ok, why))
        if ok and (pick.picked is None or rank < pick.tries[pick.picked].rank):
            pick.dims, pick.picked = dims, len(pick.tries) - 1
        return ok

    stopped = False
    if search == "scan":
        i = 0
        while i < len(pts) and pick.picked is None:
            if len(pick.tries) >= tries:
                stopped = True
                break
            attempt(i)
            i += 1
    else:
        lo, hi = 0, len(pts) - 1
        while lo <= hi:
            if len(pick.tries) >= tries:
                stopped = True
                break
            mid = (lo + hi) // 2
            ok = attempt(mid)
            if ok is None:
                del pts[mid]  # the others keep their order; the bracket shrinks by one
                hi -= 1
            elif ok:
                hi = mid - 1
            else:
                lo = mid + 1
    how = "from the fastest upward" if search == "scan" else "binary search by predicted latency"
    if pick.picked is not None:
        t = pick.tries[pick.picked]
        pick.note = (
            f"frontier point {t.rank} of {len(ordered)} by predicted latency ({t.latency_us:.0f} us, keeps"
            f" {t.importance_kept:.4f}): the fastest within {tolerance:.0%} of unaligned quality found ({how},"
            f" {len(pick.tries)} scored, cap {tries}{'; stopped at the cap' if stopped else ''})"
        )
    else:
        pick.note = (
            f"no frontier point scored ({how}, {len(pick.tries)} scored, cap {tries}) is within {tolerance:.0%}"
            " of unaligned quality: the latency-aware choice instead"
        )
    return pick
