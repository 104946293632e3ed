"""No timed token count slower than at the compressor's dims: the whole model held to it, not each weight."""

from __future__ import annotations

from gac.contracts.measurements import Op
from gac.solver.align import AlignOptions, align
from gac.solver.candidates import CandidateOptions, LatencyModel, build_items
from gac.solver.no_slower import REFINE, hold_no_slower, totals_by_tokens
from tests.solver.test_candidates import _lookup, _m, _manifest

OPTS = AlignOptions(candidates=CandidateOptions(window=16), cross_check="none", baselines=False)
HELD = AlignOptions(candidates=CandidateOptions(window=16), cross_check="none", baselines=False, no_slower=True)


def prefill_fast_decode_slow(tokens: int, d: int) -> float:
    """Multiples of 8 save 3 us at M = 64 and cost 2 us at M = 1 (as per-head GEMVs can)."""
    if tokens == 64:
        return 10 + d / 16 + (3.0 if d % 8 else 0.0)
    return 5 + d / 100 + (0.0 if d % 8 else 2.0)


def smooth(tokens: int, d: int) -> float:
    return (10 if tokens == 64 else 5) + d / 16 + (3.0 if d % 8 else 0.0)


def setup(tmp_path, curve, dims=(100, 60)):
    weights = [{"name": f"w{i}", "kind": "linear_out", "out_features": 256, "in_features": 64, "dim": d, "importance": 1}
               for i, d in enumerate(dims)]  # fmt: skip
    manifest = _manifest(weights, tokens=(64, 1), budget={"params": sum(dims) * 64})
    rows = [_m(Op.gemm, {"m": t, "n": d, "k": 64}, "n", curve(t, d)) for t in (64, 1) for d in range(1, 257)]
    lookup = _lookup(tmp_path, rows)
    items = build_items(manifest)
    model = LatencyModel(lookup, manifest)
    own = totals_by_tokens(model, items, {it.name: int(it.d_star) for it in items})
    return manifest, lookup, items, model, own


def totals(model, items, result):
    return totals_by_tokens(model, items, {w.name: w.dim for w in result.weights})


def test_a_faster_prefill_is_not_bought_with_a_slower_decode(tmp_path):
    manifest, lookup, items, model, own = setup(tmp_path, prefill_fast_decode_slow)
    free = totals(model, items, align(manifest, lookup, OPTS))
    assert free[1] > own[1] and free[64] < own[64]  # the trade the plain objective makes
    held = align(manifest, lookup, HELD)
    got = totals(model, items, held)
    assert got[1] <= own[1] and got[64] <= own[64]
    assert held.no_slower and any("no-slower: token weights raised to" in w and "M=1:" in w for w in held.warnings)
    # The manifest's field asks the same as the option.
    asked = align(manifest.model_copy(update={"no_slower": True}), lookup, OPTS)
    assert [w.dim for w in asked.weights] == [w.dim for w in held.weights] and asked.no_slower


def test_nothing_changes_where_nothing_was_slower(tmp_path):
    manifest, lookup, items, model, own = setup(tmp_path, smooth)
    free = align(manifest, lookup, OPTS)
    held = align(manifest, lookup, HELD)
    assert [w.dim for w in held.weights] == [w.dim for w in free.weights]
    assert not any("no-slower" in w for w in held.warnings)
    assert all(v <= own[m] for m, v in totals(model, items, held).items())


def test_one_token_count_or_no_measurements_is_the_plain_alignment(tmp_path):
    manifest, lookup, *_ = setup(tmp_path, prefill_fast_decode_slow)
    one = manifest.model_copy(update={"workload": manifest.workload.model_copy(update={"tokens": [64], "token_weights": None})})
    assert [w.dim for w in align(one, lookup, HELD).weights] == [w.dim for w in align(one, lookup, OPTS).weights]
    rules = align(manifest, None, HELD)
    assert rules.platform == "rules only" and not rules.no_slower
    assert any("no_slower holds the latency objective's token counts" in w for w in rules.warnings)


def test_one_token_count_left_slower_says_so_instead_of_claiming_it_held(tmp_path):
    # With one token count there is nothing to re-weigh: an answer slower than the compressor's dims
    # (its epsilon kept more importance) is said as such, and what would trade it for speed.
    manifest, lookup, *_ = setup(tmp_path, prefill_fast_decode_slow)
    one = manifest.model_copy(update={"workload": manifest.workload.model_copy(update={"tokens": [1], "token_weights": None})})
    model = LatencyModel(lookup, one)

    def slower_dims(m):  # an answer a dim above each compressor's dim: slower at M = 1
        got = align(m, lookup, OPTS)
        for w, d in zip(got.weights, (101, 61), strict=True):
            w.dim = d
        return got

    held = hold_no_slower(one, model, slower_dims)
    said = [w for w in held.warnings if w.startswith("no-slower: still predicted slower at M=1 by +")]
    assert said and "a larger --epsilon gives up more of it for speed" in said[0], held.warnings
    quick = hold_no_slower(one, model, lambda m: align(m, lookup, OPTS))  # the objective's own answer: not slower here
    assert not any(w.startswith("no-slower: still") for w in quick.warnings)


def test_the_importance_objective_says_it_does_not_hold_token_counts(tmp_path):
    manifest, lookup, *_ = setup(tmp_path, prefill_fast_decode_slow)
    got = align(manifest, lookup, AlignOptions(cross_check="none", baselines=False, objective="importance", no_slower=True))
    assert not got.no_slower and any("objective 'importance' is solved without it" in w for w in got.warnings)


def test_rounds_run_out_and_say_what_stayed_slower(tmp_path):
    manifest, lookup, *_ = setup(tmp_path, prefill_fast_decode_slow)
    model = LatencyModel(lookup, manifest)
    held = hold_no_slower(manifest, model, lambda m: align(m, lookup, OPTS), max_rounds=0)
    assert any("still predicted slower after 0 rounds" in w and "M=1 +" in w for w in held.warnings)


def test_a_reweighted_model_shares_the_curves_and_sums_them_afresh(tmp_path):
    """Each round re-solves at new token weights: the curve models are reused, the weighted sums are not."""
    manifest, lookup, items, model, _ = setup(tmp_path, prefill_fast_decode_slow)
    before = {(it.name, d): model.latency(it, d) for it in items for d in (96, 100, 104)}
    heavier = manifest.model_copy(update={"workload": manifest.workload.model_copy(update={"token_weights": [1.0, 9.0]})})
    again, fresh = model.reweighted(heavier), LatencyModel(lookup, heavier)
    for it in items:
        for d in (96, 100, 104):
            assert again.latency(it, d) == fresh.latency(it, d) != before[it.name, d]
            assert model.latency(it, d) == before[it.name, d]  # the model it came from is unchanged
    assert again._models is model._models and again._curves is model._curves  # the curves' models, shared
    one = manifest.model_copy(update={"workload": manifest.workload.model_copy(update={"tokens": [64], "token_weights": None})})
    alone = model.reweighted(one)  # other token counts: a model of its own
    assert alone._models is not model._models and alone.tokens == [(64, 1.0)]


def test_the_rounds_search_without_checks_and_the_answer_is_solved_with_them(tmp_path):
    manifest, lookup, _, model, _ = setup(tmp_path, prefill_fast_decode_slow)
    full = AlignOptions(candidates=CandidateOptions(window=16), cross_check="cp-sat")  # checked, with baselines
    calls = {"solve": 0, "search": 0}

    def solve(m):
        calls["solve"] += 1
        return align(m, lookup, full)

    def search(m):
        calls["search"] += 1
        return align(m, lookup, OPTS)

    held = hold_no_slower(manifest, model, solve, search)
    assert calls["solve"] == 2 and calls["search"] >= 1 + REFINE  # the first and the final solve; the rest searched
    assert held.baselines and held.solver.cross_check.agrees and "no-slower: token weights raised" in " ".join(held.warnings)
    via_align = align(manifest, lookup, AlignOptions(candidates=CandidateOptions(window=16), cross_check="cp-sat", no_slower=True))
    assert [w.dim for w in via_align.weights] == [w.dim for w in held.weights] and via_align.baselines
