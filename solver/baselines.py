"""What users would do without GAC's exact solver, for comparison in the result and the benchmark.

- paper_dp: the paper's Algorithm 1, costs quantized by u = 8 * (smallest row
  count) with floor, so its raw answer can exceed the budget; we report that
  and then repair it greedily as a user would have to.
- round_nearest / round_down: per-weight rounding to a multiple of align
  (round-down is Torch-Pruning's round_to); they ignore the budget.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

PAPER_DP_MAX_CELLS = 400_000_000  # items x quantized budget; beyond it the table does not fit in memory


@dataclass
class PaperDpResult:
    picks: list[int]  # after repair
    raw_picks: list[int]  # the DP's own answer
    raw_cost: int
    cost: int
    seconds: float


class TooLarge(ValueError):
    """The paper's DP cannot run on this instance (its table too large, or its rounding over the budget)."""


def paper_dp(
    costs: Sequence[Sequence[int]],
    values: Sequence[Sequence[float]],
    budget: int,
    u: int,
) -> PaperDpResult:
    """Algorithm 1 of the paper: D[i][b] = max_j D[i-1][b - floor(w_ij / u)] + v_ij, b <= floor(B / u).

    Subtracting each item's smallest quantized cost is exact for the quantized
    problem (it only shortens the table), so the answer is the paper's own.
    """
    t0 = time.perf_counter()
    q = [np.asarray(c, dtype=np.int64) // u for c in costs]
    base = np.array([int(x.min()) for x in q])
    cap = budget // u - int(base.sum())
    if cap < 0:
        raise TooLarge(
            f"in its units of {u} parameters the budget is {budget // u:,}, below the {int(base.sum()):,} its smallest dims take"
        )
    qo = [x - b for x, b in zip(q, base)]
    cap = min(cap, int(sum(int(x.max()) for x in qo)))
    if len(costs) * (cap + 1) > PAPER_DP_MAX_CELLS:
        raise TooLarge(f"paper DP table would have {len(costs) * (cap + 1):,} cells")
    if any(len(c) > np.iinfo(np.uint16).max + 1 for c in costs):
        raise TooLarge("an item has more candidates than the pick table can index")
    best = np.full(cap + 1, -np.inf)
    best[0] = 0.0
    pick = np.zeros((len(costs), cap + 1), dtype=np.uint16)
    reach = 0  # cells above it cannot be reached yet: -inf, and nothing is computed there
    for i, (qi, vi) in enumerate(zip(qo, values)):
        va = np.asarray(vi, dtype=float)
        reach = min(cap, reach + int(qi.max()))
        new = np.full(reach + 1, -np.inf)
        row = np.zeros(reach + 1, dtype=np.int64)
        runs = _progressions(qi, va)
        # the candidates outside long runs first (strict improvements in j order), then the runs
        alone = sorted(j for js, step in runs if not (step and len(js) >= PROGRESSION_MIN) for j in js.tolist())
        _merge_alone(best, new, row, qi, va, alone)
        for js, step in runs:
            if step and len(js) >= PROGRESSION_MIN:
                _merge_progression(best, new, row, qi, va, js, step)
        pick[i, : reach + 1] = row
        best = np.full(cap + 1, -np.inf)
        best[: reach + 1] = new
    b = int(np.argmax(best))
    raw = [0] * len(costs)
    for i in range(len(costs) - 1, -1, -1):
        raw[i] = int(pick[i, b])
        b -= int(qo[i][raw[i]])
    raw_cost = sum(int(costs[i][j]) for i, j in enumerate(raw))
    fixed = repair(costs, values, budget, raw)
    cost = sum(int(costs[i][j]) for i, j in enumerate(fixed))
    return PaperDpResult(fixed, raw, raw_cost, cost, time.perf_counter() - t0)


PROGRESSION_MIN = 32  # a run of candidates this long is merged by a sliding-window max; shorter ones one by one
_LINEAR_ULPS = 8  # values count as linear along a run when off a line by at most this many ulps of the largest


def _progressions(q: np.ndarray, v: np.ndarray) -> list[tuple[np.ndarray, int]]:
    """An item's candidates as runs j = r, r + p, r + 2p, ... whose quantized costs rise by one step and
    whose values lie on one line (a window of consecutive dims: the cost is linear in the dim, floored), with
    each run's cost step; candidates outside such runs come alone (step 0), in their order."""
    n = len(q)
    tol = _LINEAR_ULPS * np.finfo(float).eps * max(1.0, float(np.abs(v).max()))
    for p in range(1, min(64, n // 2) + 1):
        dq = q[p:] - q[:-p]
        step = int(dq[0])
        if step <= 0 or not (dq == step).all():
            continue
        dv = v[p:] - v[:-p]
        if float(np.abs(dv - dv[0]).max()) > tol * p:
            continue
        return [(np.arange(r, n, p), step) for r in range(p)]
    return [(np.arange(n), 0)]


def _merge_alone(best: np.ndarray, new: np.ndarray, row: np.ndarray, q: np.ndarray, v: np.ndarray, js: list[int]) -> None:
    """Candidates js, in order, into cells no other candidate has reached yet: each takes the cells where it
    is strictly better, so a tie keeps the earlier j (the paper's loop, as it always ran)."""
    n = len(new)
    cand = np.empty(n)
    better = np.empty(n, dtype=bool)
    for j in js:
        c = int(q[j])
        if c >= n:
            continue
        # In place, masked copies (no index arrays): a large instance runs this cells x candidates times.
        width = n - c
        np.add(best[:width], v[j], out=cand[:width])
        np.greater(cand[:width], new[c:], out=better[:width])
        np.copyto(new[c:], cand[:width], where=better[:width])
        np.copyto(row[c:], j, where=better[:width])


def _merge_progression(best: np.ndarray, new: np.ndarray, row: np.ndarray, q: np.ndarray, v: np.ndarray, js: np.ndarray, step: int) -> None:
    """A run of candidates k = 0..K (cost q0 + step * k, value about v0 + slope * k) into the item's cells.

    Cell q0 + x takes max_k best[x - step * k] + v_k. Along each residue of x mod step, that is
    v0 + slope * t + the max of best[step * t' + rho] - slope * t' over t' in [t - K, t]: a sliding-window max
    (van Herk / Gil-Werman, O(cells) for any K). Only the argmax comes from that form; the cell's value is
    then computed as the one-by-one DP computes it, best[x - step * k] + v_k, so the table holds the same
    numbers (two candidates within a few ulps of each other may swap)."""
    q0 = int(q[js[0]])
    m = len(new) - q0
    if m <= 0:
        return
    k_top = len(js) - 1
    vr = v[js]
    slope = (float(vr[-1]) - float(vr[0])) / k_top
    rows = -(-m // step)
    # best with K rows of -inf in front (a source before cell 0), then -inf past its end
    w = k_top + 1
    blocks = -(-(rows + k_top) // w) + 1
    padded = np.full(blocks * w * step, -np.inf)
    n_src = min(len(best), rows * step)
    padded[k_top * step : k_top * step + n_src] = best[:n_src]
    key = padded.reshape(-1, step).copy()
    key[k_top : k_top + rows] -= slope * np.arange(rows, dtype=float)[:, None]
    k = _window_argmax(key, k_top, blocks)[:m]  # the candidate each cell takes
    at = np.arange(k_top * step, k_top * step + m) - step * k
    cand = padded[at] + vr[k]
    j = js[k]
    cur, cur_j = new[q0:], row[q0:]
    better = (cand > cur) | ((cand == cur) & (j < cur_j))
    np.copyto(cur, cand, where=better)
    np.copyto(cur_j, j, where=better)


def _window_argmax(y: np.ndarray, k: int, blocks: int) -> np.ndarray:
    """y: (blocks x (k + 1)) rows x columns, the sequence shifted down k rows. For each row t = 0, 1, ... of the
    sequence, flattened row by row: the k in 0..K of the largest y[t + k - k'] over k' (the latest row on a tie,
    so the smallest k'), i.e. which of the window's K + 1 rows wins, counted back from t."""
    w = k + 1
    cols = y.shape[1]
    # Offsets within a block first: each running max is then one operation over blocks x cols numbers.
    a = np.ascontiguousarray(y.reshape(blocks, w, cols).transpose(1, 0, 2))
    g = np.empty_like(a)  # prefix maxima within each block, the latest offset attaining them
    gi = np.zeros(a.shape, dtype=np.int32)
    h = np.empty_like(a)  # suffix maxima within each block, the latest offset attaining them
    hi = np.full(a.shape, k, dtype=np.int32)
    tie = np.empty(a.shape[1:], dtype=bool)
    g[0] = a[0]
    for o in range(1, w):
        np.greater_equal(a[o], g[o - 1], out=tie)
        np.maximum(g[o - 1], a[o], out=g[o])
        gi[o] = gi[o - 1]
        np.copyto(gi[o], o, where=tie)
    h[k] = a[k]
    for o in range(k - 1, -1, -1):
        np.greater(a[o], h[o + 1], out=tie)
        np.maximum(h[o + 1], a[o], out=h[o])
        hi[o] = hi[o + 1]
        np.copyto(hi[o], o, where=tie)
    # The window of y rows s .. s + k, s = block b, offset o: block b from o on, and block b + 1 up to o - 1
    # (o = 0: block b alone). A tie goes to the later rows. The answer counts back from the window's end.
    back = np.empty((w, blocks - 1, cols), dtype=np.int32)
    back[0] = k - gi[k, :-1]
    if k:
        later = g[:k, 1:] >= h[1:, :-1]
        offs = np.arange(1, w, dtype=np.int32)[:, None, None]
        back[1:] = np.where(later, offs - 1 - gi[:k, 1:], offs + k - hi[1:, :-1])
    return back.transpose(1, 0, 2).reshape(-1)


def repair(costs: Sequence[Sequence[int]], values: Sequence[Sequence[float]], budget: int, picks: list[int]) -> list[int]:
    """Step down the cheapest-to-lose items until the budget holds (least value lost per parameter freed)."""
    picks = list(picks)
    total = sum(int(costs[i][j]) for i, j in enumerate(picks))
    while total > budget:
        best: tuple[float, int, int] | None = None
        for i, j in enumerate(picks):
            for k, c in enumerate(costs[i]):
                saved = int(costs[i][j]) - int(c)
                if saved > 0:
                    ratio = (values[i][j] - values[i][k]) / saved
                    if best is None or ratio < best[0]:
                        best = (ratio, i, k)
        if best is None:
            break  # nothing left to step down: infeasible even at the bottom
        _, i, k = best
        total -= int(costs[i][picks[i]]) - int(costs[i][k])
        picks[i] = k
    return picks


def round_nearest(d_star: float, align: int, max_dim: int) -> int:
    """Nearest multiple of align (halves up), kept within [align, max_dim] when possible."""
    d = int(math.floor(d_star / align + 0.5)) * align
    return _clip(d, align, max_dim)


def round_down(d_star: float, align: int, max_dim: int) -> int:
    """Torch-Pruning's round_to: down to a multiple of align, at least align."""
    d = int(math.floor(d_star / align)) * align
    return _clip(d, align, max_dim)


def _clip(d: int, align: int, max_dim: int) -> int:
    top = (max_dim // align) * align or max_dim
    return min(max(d, min(align, max_dim)), top)
