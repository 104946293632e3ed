"""Candidates robust to noise, end to end: align() on a Llama-like low-rank manifest over a synthetic
platform whose GEMMs are padded to tiles of 24 (48, 96) dims, measured the way the agent measures
(median, p10, p90, n per point, served by a FileLookup), for both objectives.

The figure: the share of chosen dims that are step tops. A step is the dims one tile holds,
(k - 1) * P + 1 .. k * P; a chosen d is on a step top when no larger dim of its window on the same
step is as good a choice, i.e. every larger dim of the window in d's step is a planted spike. A
window whose top falls inside a step reaches that step's top (gac.solver.candidates: as fast, more
parameters), so a dim short of it is no step top (102.8 -> 119 where 120 is as fast). When the latency
objective's window also holds the paper's (CandidateOptions.paper_radius), its choices are judged on both. Shares are summed
over the seeds; each scenario's target is the issue's.
"""

from __future__ import annotations

from functools import cache

import pytest

from gac.contracts.manifest import Manifest
from gac.solver.align import AlignOptions, align
from gac.solver.candidates import CandidateOptions, LatencyModel, build_candidates, build_items, candidate_notes, paper_window
from gac.solver.curve_model import SMOOTH_NOTE
from gac.solver.lookup import FileLookup
from tests.solver.synthetic import Measure, llama_like_manifest, lowrank_curves, platform_rows

LAYERS, HIDDEN = 2, 2048  # 14 weights, ranks spread over 1..2048 (K and V: 1..256)
SEEDS = {"clean": (0,), "samples": (0, 1, 2), "jitter": (0, 1, 2), "spikes": (0, 1)}  # P = 24; other periods: seed 0
SCENARIOS = {  # measurement, spikes per measured dim
    "clean": (Measure(), 0.0),
    "samples": (Measure(sample_noise=0.05, n=20), 0.0),  # 5 % per timing sample
    "jitter": (Measure(jitter=0.05), 0.0),  # 5 % on the medians, which claim to be exact
    "spikes": (Measure(sample_noise=0.05, n=20), 0.02),  # single dims 30 % slower
}
TARGET = {"clean": 1.0, "samples": 0.95, "jitter": 0.90, "spikes": 0.95}
OBJECTIVES = ("importance", "latency")


@cache
def platform(scenario: str, period: int | None, seed: int) -> tuple[Manifest, FileLookup, dict]:
    how, spikes = SCENARIOS[scenario]
    doc = llama_like_manifest(LAYERS, hidden=HIDDEN, seed=seed)
    rows, planted = platform_rows(lowrank_curves(doc), period, Measure(**{**vars(how), "seed": seed}), spikes)
    return Manifest.model_validate(doc), FileLookup(rows, f"synthetic-{period}"), planted


def spikes_of(item, planted: dict) -> set[int]:  # type: ignore[no-untyped-def]
    """The spiked dims of any curve the (low-rank) item runs."""
    (w,) = item.members
    out: set[int] = set()
    for (fixed, axis), dims in planted.items():
        f = dict(fixed)
        if (axis, f.get("k"), f.get("n")) in (("n", w.in_features, None), ("k", None, w.out_features)):
            out |= set(dims)
    return out


def on_top(d: int, choices: set[int], period: int, spikes: set[int]) -> bool:
    step = -(-d // period)
    return d in choices and d not in spikes and all(e in spikes for e in choices if e > d and -(-e // period) == step)


def choices_of(item, objective: str, period: int | None = None) -> set[int]:  # type: ignore[no-untyped-def]
    """The window's dims, up to the top of the step its top falls in (given the period) when that
    is within the window's half width."""
    lo, hi = item.window(CandidateOptions())
    step_top = -(-hi // period) * period if period else hi
    hi = min(item.max_dim, step_top) if step_top - hi <= CandidateOptions().half_width(item.d_star) else hi
    radius = CandidateOptions().paper_radius
    return set(range(lo, hi + 1)) | (set(paper_window(item, radius=radius)) if objective == "latency" and radius else set())


@cache
def chosen(scenario: str, period: int, objective: str, seeds: tuple[int, ...] | None = None) -> tuple[int, int, int]:
    """(chosen dims on step tops, chosen dims, chosen spikes), over the seeds."""
    hits = total = spiked = 0
    for seed in SEEDS[scenario] if seeds is None else seeds:
        manifest, lookup, planted = platform(scenario, period, seed)
        res = align(manifest, lookup, AlignOptions(objective=objective, cross_check="none", baselines=False, min_gain=0))
        assert res.objective_kind == objective and res.total_params <= res.budget
        for item, w in zip(build_items(manifest), res.weights):
            assert {c.source for c in w.candidates} == {"measured"}
            spikes = spikes_of(item, planted)
            hits += on_top(w.dim, choices_of(item, objective, period), period, spikes)
            spiked += w.dim in spikes
            total += 1
    return hits, total, spiked


@pytest.mark.parametrize("objective", OBJECTIVES)
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_chosen_dims_sit_on_step_tops(scenario, objective):
    hits, total, spiked = chosen(scenario, 24, objective)
    assert total == len(SEEDS[scenario]) * 7 * LAYERS
    assert hits / total >= TARGET[scenario], f"{scenario}/{objective}: {hits}/{total} on step tops"
    assert spiked == 0


@pytest.mark.parametrize("objective", OBJECTIVES)
@pytest.mark.parametrize("period", [48, 96])
def test_other_periods(period, objective):
    for scenario in ("samples", "jitter"):
        hits, total, spiked = chosen(scenario, period, objective, (0,))
        assert spiked == 0
        assert hits / total >= TARGET[scenario], f"P={period} {scenario}/{objective}: {hits}/{total} on step tops"


@pytest.mark.parametrize("scenario", ["samples", "jitter"])
@pytest.mark.parametrize("period", [24, 48, 96])
def test_the_period_is_learned_from_the_curves(period, scenario):
    """Every measured curve long enough to hold eight tiles reports the platform's tile (the K and
    V curves, 256 dims, may hold too few: their steps can hide in 5 % jitter)."""
    manifest, lookup, _ = platform(scenario, period, 0)
    model = LatencyModel(lookup, manifest)
    curves = {(k.op, k.fixed, k.axis): k for it in build_items(manifest) for k, _ in model.kernel_terms(it)}
    long = [k for k in curves.values() if max(model.curve(k)) >= 8 * period]
    assert long
    for k in long:
        m = model.model(k)
        assert m.period is not None and m.period.m == period, (k, m.period, m.notes)
        assert any(f"multiples of {period}" in note for note in m.notes)


@pytest.mark.parametrize("seed", [0])
def test_a_smooth_platform_says_so_and_invents_no_steps(seed):
    """GEMMs without tiles (latency linear in the dim, 5 % sample noise): no curve steps, every
    dim of every window is a candidate, and the candidates say why."""
    doc = llama_like_manifest(LAYERS, hidden=HIDDEN, seed=seed)
    rows, _ = platform_rows(lowrank_curves(doc), None, Measure(sample_noise=0.05, n=20, seed=seed))
    manifest, lookup = Manifest.model_validate(doc), FileLookup(rows, "smooth")
    model = LatencyModel(lookup, manifest)
    opts = CandidateOptions()
    for every_dim in (False, True):
        results = [build_candidates(it, model, opts, every_dim=every_dim) for it in build_items(manifest)]
        for r in results:
            expected = sorted(choices_of(r.item, "latency" if every_dim else "importance"))
            assert r.measured and [c.dim for c in r.candidates] == expected
            assert SMOOTH_NOTE in r.notes
            for k, _ in model.kernel_terms(r.item):
                m = model.model(k)
                assert m.smooth and m.steps == [] and m.period is None
        (note,) = candidate_notes(results)
        assert SMOOTH_NOTE in note and note.startswith(f"{len(results)} of {len(results)} items")
    res = align(manifest, lookup, AlignOptions(objective="importance", cross_check="none", baselines=False))
    assert res.total_params <= res.budget


def test_a_staircase_platform_has_no_smooth_note():
    manifest, lookup, _ = platform("samples", 24, 0)
    model = LatencyModel(lookup, manifest)
    results = [build_candidates(it, model, CandidateOptions()) for it in build_items(manifest)]
    assert candidate_notes(results) == [] and not any(r.notes for r in results)


def test_the_paper_window_is_the_manifests_switch():
    """`window: paper` adds the paper's multiples of 8 within +/- 64 to the latency objective's
    candidates: never slower than the narrow window (a superset, same reference), still on step tops."""
    manifest, lookup, planted = platform("clean", 24, 0)
    opts = AlignOptions(objective="latency", cross_check="none", baselines=False)
    narrow = align(manifest, lookup, opts)
    wide = align(Manifest.model_validate({**manifest.model_dump(by_alias=True, exclude_none=True), "window": "paper"}), lookup, opts)
    assert (narrow.window, wide.window) == ("gac", "paper")

    def latency(res):  # type: ignore[no-untyped-def]  # the chosen dims' (the dense originals are not measured here)
        return sum(c.latency_us for w in res.weights for c in w.candidates if c.dim == w.dim)

    assert latency(wide) <= latency(narrow) * (1 + 1e-9) and wide.total_params <= wide.budget
    beyond = 0
    for item, w in zip(build_items(manifest), wide.weights):
        lo, hi = item.window(CandidateOptions())
        paper = set(paper_window(item))
        outside = {c.dim for c in w.candidates} - choices_of(item, "importance", 24)
        assert outside <= paper
        beyond += len(outside)
        assert on_top(w.dim, set(range(lo, hi + 1)) | paper, 24, spikes_of(item, planted))
    assert beyond > 0
    # The importance objective's candidates do not change; it says where the paper's window is used.
    importance = align(
        Manifest.model_validate({**manifest.model_dump(by_alias=True, exclude_none=True), "window": "paper"}),
        lookup,
        AlignOptions(objective="importance", cross_check="none", baselines=False),
    )
    assert importance.window is None and any("paper-dp-64" in w for w in importance.warnings)


def test_windows_end_on_step_tops_at_512_weights():
    """512 weights over a step-24 platform with 5 % sample noise: a window whose top falls inside a
    step reaches the step's top, so at least 95 % of the chosen dims are step tops (91.8 % when
    windows stopped at their edge: 102.8 -> 119 where 120 is as fast)."""
    doc = llama_like_manifest(74, hidden=HIDDEN, seed=5)
    doc["weights"] = doc["weights"][:512]
    doc["budget"] = {"params": int(sum((w["out_features"] + w["in_features"]) * w["dim"] for w in doc["weights"]))}
    rows, planted = platform_rows(lowrank_curves(doc), 24, Measure(sample_noise=0.05, n=20, seed=5))
    manifest, lookup = Manifest.model_validate(doc), FileLookup(rows, "synthetic-24")
    res = align(manifest, lookup, AlignOptions(cross_check="none", baselines=False))
    assert res.objective_kind == "latency" and res.total_params <= res.budget
    items = build_items(manifest)
    hits = sum(on_top(w.dim, choices_of(it, "latency", 24), 24, spikes_of(it, planted)) for it, w in zip(items, res.weights))
    assert len(items) == 512 and hits / 512 >= 0.95, f"{hits}/512 on step tops"
