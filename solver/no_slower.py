"""Align so that no timed token count gets slower than at the compressor's own dims.

The latency objective minimises the token-weighted sum of the compressed weights' kernel time, so
it may buy a faster prefill (large M) with a slower decode (M = 1): on an H100, PaLU's per-head
ranks aligned up to 16 were predicted 9.5 % faster at 1,024 tokens and 2.6 % slower at decode.
A user who runs both wants neither slower. This asks for that of the model as a whole, not of each
weight (per weight, a dim that reads a few more bytes at decode would be barred even where the
model's decode is faster overall; on the same H100 profile that cut ASVD's predicted prefill
speed-up from 4.66x to 3.47x): after a solve, each token count's predicted total at the chosen dims is compared with the
total at the compressor's dims (rounded down, as the budget's escape is), and while one is slower,
the worst one's token weight is raised and the manifest solved again. Each solve is the exact
solver's (milliseconds to a second), and a few rounds settle it. When rounds run out, the last
answer stands and its warnings say which token count stayed slower and by how much.

It is the latency objective's `no_slower` option (the manifest's field, `gac align --no-slower`):
gac.solver.align calls hold_no_slower with its own solve.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from gac.contracts.alignment import AlignmentResult
from gac.contracts.manifest import Manifest
from gac.solver.candidates import Item, LatencyModel, build_items

RAISE = 4.0  # a slower token count's weight is multiplied by this each round
MAX_ROUNDS = 8  # 4^8: from equal weights to one token count outweighing another 65,536 times
REFINE = 4  # halvings of the last raise (in log space): the smallest raise that holds keeps the most of the rest
STILL_SLOWER = "no-slower: still predicted slower"  # how a warning says the option did not hold
MOST_SOLVES = 2 + MAX_ROUNDS + REFINE  # the first and the final solve, each round and each halving: the most it costs


def totals_by_tokens(model: LatencyModel, items: list[Item], dims: dict[str, int]) -> dict[int, float] | None:
    """Predicted kernel time per token count of the items at these dims (by item name); None when a point is missing."""
    out: dict[int, float] = {}
    for item in items:
        at = model.latency_by_tokens(item, dims[item.name])
        if at is None:
            return None
        for m, us in at.items():
            out[m] = out.get(m, 0.0) + us
    return out


def slowdowns(after: dict[int, float], before: dict[int, float]) -> dict[int, float]:
    """Token counts predicted slower after than before, with how much (after / before - 1)."""
    return {m: after[m] / before[m] - 1 for m in before if before[m] > 0 and after[m] > before[m] * (1 + 1e-9)}


def hold_no_slower(
    manifest: Manifest,
    model: LatencyModel,
    solve: Callable[[Manifest], AlignmentResult],
    search: Callable[[Manifest], AlignmentResult] | None = None,
    max_rounds: int = MAX_ROUNDS,
) -> AlignmentResult:
    """solve(manifest), its token weights raised where needed so that no token count is predicted slower
    than at the compressor's dims. model: the manifest's latency model; solve: one latency-objective
    solve, checks and baselines included; search: the same without them, for the rounds (default:
    solve). When the weights were raised, the answer is solve's at the weights that held."""
    search = search or solve
    result = solve(manifest)
    items = build_items(manifest)
    own = {item.name: item.compressor_dim for item in items}
    before = totals_by_tokens(model, items, own)
    if before is None:
        result.warnings.append("no-slower: the compressor's own dims are not all measured, so nothing was held to them")
        return result
    tokens = manifest.workload.tokens
    weights = dict(zip(tokens, manifest.workload.token_weights or [1.0] * len(tokens)))

    def at(w: dict[int, float]) -> Manifest:
        return manifest.model_copy(update={"workload": manifest.workload.model_copy(update={"token_weights": [w[m] for m in tokens]})})

    def search_at(w: dict[int, float]) -> dict[int, float]:
        """The token counts the alignment at token weights w leaves slower."""
        got = search(at(w))
        after = totals_by_tokens(model, items, {x.name: x.dim for x in got.weights})
        return slowdowns(after, before) if after is not None else {}

    # A chosen dim the profile lacks cannot be judged: it counts as no slower (the warnings list it as missing).
    slower = slowdowns(totals_by_tokens(model, items, {w.name: w.dim for w in result.weights}) or before, before)
    if not slower:
        return result
    if len(tokens) < 2:  # no other token count to weigh against: the objective's epsilon is what trades speed
        result.warnings.append(
            f"{STILL_SLOWER} at M={tokens[0]} by {slower[tokens[0]]:+.1%}: with one token count there is nothing to re-weigh; "
            "GAC keeps the importance its epsilon asks for, and a larger --epsilon gives up more of it for speed (a 2 % gain or more)"
        )
        return result
    for _ in range(max_rounds):
        worst = max(slower, key=lambda m: slower[m])
        weights[worst] *= RAISE
        slower = search_at(weights)
        if not slower:
            weights = _least_raise(search_at, weights, worst)
            result = solve(at(weights))
            said = ", ".join(f"M={m}: {w:.3g}" for m, w in weights.items())
            result.warnings.append(
                f"no-slower: token weights raised to {said} so that no token count is predicted slower"
                " (the predicted latencies are weighted by these; latency.by_tokens has each count's own)"
            )
            return result
    result = solve(at(weights))
    said = ", ".join(f"M={m} {s:+.1%}" for m, s in slower.items())
    result.warnings.append(f"{STILL_SLOWER} after {max_rounds} rounds of raised token weights: {said}")
    return result


def _least_raise(search_at: Callable[[dict[int, float]], dict[int, float]], weights: dict[int, float], m: int) -> dict[int, float]:
    """Between the last raise of token count m that did not hold and the one that did, the smallest that holds."""
    lo, hi = weights[m] / RAISE, weights[m]
    for _ in range(REFINE):
        mid = math.sqrt(lo * hi)
        if search_at({**weights, m: mid}):
            lo = mid
        else:
            hi = mid
    return {**weights, m: hi}
