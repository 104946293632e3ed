"""The proof's measurement: paired bootstrap CIs, token weights per timed M, save and re-time."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gac.proof.llama import LlamaConfig
from gac.proof.pipeline import GAC, ORIGINAL, ROUND8, UNALIGNED, UNALIGNED_AGAIN, VARIANTS, ProofConfig, run_proof
from gac.proof.profile import align_options, balance_token_weights, token_totals
from gac.proof.stats import bootstrap_median_ci, paired_speedup
from gac.solver.align import align
from gac.solver.kinds import kernels
from gac.solver.lookup import FileLookup

TINY = LlamaConfig(vocab_size=512, hidden=64, intermediate=176, heads=4, kv_heads=2, layers=3, max_positions=128)


def synthetic_rounds(effect: float, noise: float, n: int, seed: int, drift: float = 0.5) -> tuple[list[float], list[float]]:
    """Paired rounds: a shared per-round machine state (drift) times independent noise; variant = baseline / effect."""
    rng = np.random.default_rng(seed)
    state = 100.0 * (1 + drift * rng.random(n))  # rounds differ far more than the effect: pairing must cancel it
    base = state * (1 + noise * rng.standard_normal(n))
    var = state / effect * (1 + noise * rng.standard_normal(n))
    return list(base), list(var)


@pytest.mark.parametrize("seed", range(5))
def test_bootstrap_ci_finds_a_large_effect(seed: int) -> None:
    base, var = synthetic_rounds(1.05, 0.01, 25, seed)  # 5 % faster, rounds drifting by up to 50 %
    sp = paired_speedup(base, var, seed=seed)
    assert sp.ci_lo <= 1.05 <= sp.ci_hi
    assert sp.ci_lo > 1.0 and sp.measurably_faster and "measurably faster" in sp.verdict()
    assert sp.ci_lo <= sp.median <= sp.ci_hi and sp.n == 25
    # Without the pairing the drift swamps the effect: the same rounds, variant order shuffled.
    shuffled = list(np.random.default_rng(seed).permutation(var))
    assert not paired_speedup(base, shuffled, seed=seed).measurably_faster


@pytest.mark.parametrize("seed", range(5))
def test_bootstrap_ci_includes_one_without_effect(seed: int) -> None:
    base, var = synthetic_rounds(1.0, 0.05, 25, seed)
    sp = paired_speedup(base, var, seed=seed)
    assert sp.ci_lo <= 1.0 <= sp.ci_hi and not sp.measurably_faster and "NOT measurably" in sp.verdict()


def test_bootstrap_ci_coverage_and_slower() -> None:
    # Over many synthetic runs the 95 % interval holds the true median most of the time.
    hits = 0
    for s in range(60):
        lo, hi = bootstrap_median_ci(np.random.default_rng(s).normal(1.05, 0.03, 30), n_boot=2000)
        hits += lo <= 1.05 <= hi
    assert hits >= 50
    base, var = synthetic_rounds(0.8, 0.02, 20, 1)
    assert paired_speedup(base, var).measurably_slower
    with pytest.raises(ValueError):
        paired_speedup([1.0, 2.0], [1.0])


def test_too_few_rounds_give_no_verdict() -> None:
    base, var = synthetic_rounds(1.05, 0.01, 4, 0)
    sp = paired_speedup(base, var)
    assert sp.faster == 4 and sp.ci_lo > 1.0  # the bootstrap alone would call this measurable
    assert not sp.measurably_faster and sp.verdict().startswith("no verdict")


def _compressed_manifest():
    from gac.proof.compress import compress_prune
    from gac.proof.llama import random_llama
    from gac.proof.subjects import TokenCalibration, random_ids

    model = random_llama(TINY, 0)
    cal = TokenCalibration(model, random_ids(512, (2, 16), 1), random_ids(512, (1, 16), 2))
    return compress_prune(model, cal, 0.25, [128, 512, 1], "bfloat16").manifest


def test_token_weights_balance_each_timed_m() -> None:
    """A profile where GEMM time grows with M: each M gets weight 1 / its total, so each counts alike."""
    manifest = _compressed_manifest()
    res = align(manifest, None, align_options(8))
    rows = []
    for mc in res.missing:
        for d in mc.dims:
            shape = {**mc.fixed_shape, mc.axis: d}
            rows.append(("gemm", "bfloat16", shape, mc.axis, 10.0 + shape["m"] * shape["n"] * shape["k"] / 1e4))
    lookup = FileLookup(rows, "synthetic")
    totals = token_totals(manifest, lookup)
    assert totals is not None and totals[512] > totals[128] > totals[1]
    expect = {
        m: sum(
            k.count * lookup.curve(k.op, manifest.workload.dtype, k.fixed_shape, k.axis)[k.scale * int(w.dim)].latency_us
            for w in manifest.weights
            for k in kernels(w, m)
        )
        for m in (128, 512, 1)
    }
    assert totals == pytest.approx(expect)
    balanced, note = balance_token_weights(manifest, lookup)
    w = dict(zip(balanced.workload.tokens, balanced.workload.token_weights))
    assert w[1] == 1.0 and w[128] == pytest.approx(totals[1] / totals[128]) and w[512] < w[128]
    assert [w * totals[m] for m, w in w.items()] == pytest.approx([totals[1]] * 3)
    assert "M=512" in note
    assert balanced.weights == manifest.weights  # only the workload changed
    # one token count, or a profile lacking the compressor's own dims: left as given
    assert balance_token_weights(manifest, FileLookup([], "empty"))[0] is manifest


def rules_only(manifest):
    """A stand-in for the profiled aligner: rule candidates, no timing."""
    return manifest, align(manifest, None, align_options(16)), None, ["rules only (test)"], []


@pytest.fixture(scope="module")
def tiny_run():
    cfg = ProofConfig(model="llama", llama=TINY, llama_data=((2, 32), (2, 16)), seqs=(16,), decode_context=8, rounds=2, passes=1)
    return run_proof(cfg, log=lambda _m: None, aligner=rules_only)


def test_tiny_llama_run_reports_ci_and_targets(tiny_run) -> None:
    from gac.proof.report import render

    assert [r.method for r in tiny_run.results] == ["asvd", "prune"]
    for r in tiny_run.results:
        assert r.manifest.workload.tokens == [16, 1]
        assert set(r.variants) == set(VARIANTS) and all(r.variants[v].within_budget for v in (UNALIGNED, GAC))
        assert len(r.latency.medians[(GAC, "decode@8")]) == 2
        # The control is the unaligned model built again: same dims and quality, timed as a variant of its own.
        again, un = r.variants[UNALIGNED_AGAIN], r.variants[UNALIGNED]
        assert again.dims == un.dims and again.quality.figures == pytest.approx(un.quality.figures)
        assert len(r.latency.medians[(UNALIGNED_AGAIN, "S=16")]) == 2
    text = render(tiny_run)
    assert text.count("control: unaligned, again (the same dims, another instance) vs unaligned") == 2
    assert "95% CI" in text and "decode@8 ms/tok" in text and "RECONSTRUCTION ERROR" in text
    assert "measurably faster = 95% CI lower bound of the speed-up > 1.0" in text
    assert "quality: latency-aware rel err" in text and "quality: importance-only rel err" in text and "lower is better" in text
    for r in tiny_run.results:  # the original's weights are dense: the budget is a share of them
        assert r.variants[ORIGINAL].weight_params == r.original_weight_params > r.budget


def test_retime_round_trips_saved_dims(tiny_run, tmp_path, monkeypatch) -> None:
    import gac.proof.pipeline
    from gac.proof.report import render
    from gac.proof.retime import load_run, retime, save_run

    path = save_run(tiny_run, tmp_path / "run.json")
    saved = load_run(path)
    assert saved["spec"]["model"] == "llama" and saved["config"]["llama"]["hidden"] == TINY.hidden

    def no_profiling(*_a, **_k):
        raise AssertionError("retime must not profile")

    monkeypatch.setattr(gac.proof.pipeline, "measured_alignment", no_profiling)
    again = retime(path, log=lambda _m: None, rounds=3)
    assert again.retimed_from == str(path) and again.config.rounds == 3
    for a, b in zip(tiny_run.results, again.results):
        assert a.method == b.method and a.manifest == b.manifest and a.alignment == b.alignment
        for v in VARIANTS:
            assert b.variants[v].dims == a.variants[v].dims
            assert b.variants[v].weight_params == a.variants[v].weight_params
            assert b.variants[v].quality.figures == pytest.approx(a.variants[v].quality.figures)
        assert len(b.latency.medians[(ROUND8, "S=16")]) == 3
        assert not any("differs from the saved dims" in n for n in b.notes)
    assert "re-timed from" in render(again)

    # Saved dims win over a recomputed compressor: edit the file's GAC dims and re-time.
    data = json.loads(path.read_text())
    prune = data["results"][1]
    name = next(iter(prune["variants"][GAC]["dims"]))
    prune["variants"][GAC]["dims"][name] = 64
    path.write_text(json.dumps(data))
    edited = retime(path, log=lambda _m: None, rounds=1)
    assert edited.results[1].variants[GAC].dims[name] == 64
    assert edited.results[1].variants[ORIGINAL].dims == tiny_run.results[1].variants[ORIGINAL].dims


def test_retime_rejects_other_files(tmp_path) -> None:
    from gac.proof.retime import load_run

    p = tmp_path / "x.json"
    p.write_text(json.dumps({"results": []}))
    with pytest.raises(ValueError, match="not a saved proof run"):
        load_run(p)


# ---------------------------------------------------------------- dtype


def test_tiny_run_is_in_the_platforms_fast_dtype(tiny_run) -> None:
    from gac.agent.platform import detect_platform

    fast = detect_platform("cpu").fast_dtype.value
    assert tiny_run.config.dtype == fast  # settled before compressing: the saved config says it
    assert all(r.manifest.workload.dtype.value == fast for r in tiny_run.results)  # what gets profiled
    assert tiny_run.dtype_note.startswith(f"dtype {fast}: ")


def test_retime_keeps_the_saved_dtype(tiny_run, tmp_path) -> None:
    from gac.proof.retime import DtypeMismatch, retime, save_run

    path = save_run(tiny_run, tmp_path / "run.json")
    saved = json.loads(path.read_text())["config"]["dtype"]
    assert saved == tiny_run.config.dtype
    other = "bfloat16" if saved != "bfloat16" else "float32"
    with pytest.raises(DtypeMismatch, match=f"aligned for {saved}"):
        retime(path, log=lambda _m: None, rounds=1, dtype=other)
    # A run saved before configs had a dtype was made in bfloat16: re-timed in bfloat16.
    data = json.loads(path.read_text())
    del data["config"]["dtype"]
    assert ProofConfig.from_json(data["config"]).dtype == "bfloat16"


def test_dtype_override_reaches_compression_and_timing(monkeypatch) -> None:
    import torch

    import gac.proof.pipeline

    seen: list = []
    real = gac.proof.pipeline.time_rounds

    def spy(*a, **kw):
        seen.append(kw["dtype"])
        return real(*a, **kw)

    monkeypatch.setattr(gac.proof.pipeline, "time_rounds", spy)
    logs: list[str] = []
    cfg = ProofConfig(
        model="llama",
        llama=TINY,
        llama_data=((2, 32), (2, 16)),
        seqs=(16,),
        decode_context=0,
        rounds=1,
        passes=1,
        compressors=("prune",),
        dtype="bfloat16",
    )
    res = run_proof(cfg, log=logs.append, aligner=rules_only)
    assert seen == [torch.bfloat16]
    assert res.config.dtype == "bfloat16" and res.results[0].manifest.workload.dtype.value == "bfloat16"
    assert logs[0].startswith("dtype bfloat16: chosen with --dtype") and res.dtype_note == logs[0]


def test_proof_config_round_trips_its_dtype() -> None:
    for dtype in ("float32", "bfloat16", "float16"):  # a saved config always holds a settled dtype
        cfg = ProofConfig(model="llama", llama=TINY, dtype=dtype)
        assert ProofConfig.from_json(json.loads(json.dumps(cfg.to_json()))) == cfg
    assert ProofConfig.quick_config(dtype="float32").dtype == "float32"
    with pytest.raises(ValueError, match="dtype 'float64'"):
        ProofConfig(dtype="float64")
    with pytest.raises(ValueError, match="not settled"):
        _ = ProofConfig().torch_dtype
