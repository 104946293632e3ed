"""The proof's device plumbing, run on the CPU: the device reaches the models, their inputs, the
agent's timer and platform, and the timing; the CUDA pass clock is chosen for CUDA devices only;
Llama-3-8B's dimensions; the report's claims. The tests marked `cuda` run only where torch sees a GPU."""

from __future__ import annotations

import contextlib
import copy
import dataclasses

import pytest
import torch

from gac.agent.dtypes import cuda_dtype_fields
from gac.contracts.measurements import PlatformDescriptor
from gac.contracts.plans import Timing
from gac.proof.latency import (
    CpuSpans,
    CudaSpans,
    Setting,
    _replayable,
    cpu_pass,
    cuda_graph,
    cuda_pass,
    median_of_passes,
    module_calls,
    module_spans,
    on_device,
    pass_clock,
    time_rounds,
)
from gac.proof.llama import LLAMA3_8B, LlamaConfig, LlamaDecoder
from gac.proof.pipeline import GAC_LATENCY, ORIGINAL, ROUND8, UNALIGNED, ProofConfig, compress, describe_gpu, prepare, run_proof, with_dtype
from gac.proof.predict import SettingPrediction
from gac.proof.profile import align_options
from gac.proof.report import render
from gac.proof.stats import paired_speedup
from gac.proof.subjects import bert_prefill, llama_decode, llama_prefill
from gac.solver.align import align

TINY = LlamaConfig(vocab_size=512, hidden=128, intermediate=176, heads=4, kv_heads=2, layers=2, max_positions=128)
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def rules_only(manifest):
    return manifest, align(manifest, None, align_options(16)), None, ["rules only (test)"], []


def tiny_cfg(**kw) -> ProofConfig:
    base = dict(model="llama", llama=TINY, llama_data=((2, 32), (2, 16)), seqs=(16,), decode_context=8, rounds=2, passes=1, dtype="float32")
    return ProofConfig(**{**base, **kw})


# ---------------------------------------------------------------- Llama-3-8B's dimensions


def test_llama8b_config_has_llama3_8b_dimensions() -> None:
    c = LLAMA3_8B
    assert (c.hidden, c.heads, c.kv_heads, c.head_dim, c.intermediate) == (4096, 32, 8, 128, 14336)
    assert 2 <= c.layers <= 4 and c.max_positions >= 4096
    with torch.device("meta"):  # shapes without allocating 1.7 GB
        model = LlamaDecoder(c)
    shapes = {n: tuple(lin.weight.shape) for n, lin in model.named_linears() if n.startswith("layer0.")}
    assert shapes == {
        "layer0.attn.q": (4096, 4096),
        "layer0.attn.k": (1024, 4096),
        "layer0.attn.v": (1024, 4096),
        "layer0.attn.o": (4096, 4096),
        "layer0.mlp.gate": (14336, 4096),
        "layer0.mlp.up": (14336, 4096),
        "layer0.mlp.down": (4096, 14336),
    }
    assert sum(p.numel() for p in model.layers[0].parameters()) == 218_112_000  # Llama-3-8B's per-layer count


def test_llama8b_times_the_gpu_lengths_and_decode() -> None:
    cfg = ProofConfig(model="llama8b")
    assert cfg.llama_config is LLAMA3_8B and cfg.subject_spec()["config"]["hidden"] == 4096
    assert [s.label for s in cfg.settings] == ["S=1024", "S=2048", "decode@1024"]
    assert ProofConfig(model="llama", device="cuda:0").prefill_seqs == (1024, 2048)
    assert ProofConfig(model="llama").prefill_seqs == (128, 256, 512)  # the CPU's lengths are unchanged
    assert ProofConfig.quick_config(model="llama", device="cuda:0").prefill_seqs == (1024,)
    assert ProofConfig.quick_config(model="llama").gemm_tokens() == [128, 1]


def test_lengths_are_checked_against_each_models_positions() -> None:
    from gac.proof.cli import config_kwargs

    kw = config_kwargs("llama8b", "all", None, [1024, 4096], None, None, None, 16, None, 1, layers=3)
    assert kw["seqs"] == (1024, 4096) and kw["llama"].layers == 3 and kw["compressors"] == ("asvd", "prune", "palu")
    assert config_kwargs("llama", "both", None, [4096], 0, None, None, 16, None, 1)["compressors"] == ("asvd", "prune")
    with pytest.raises(ValueError, match="minilm takes at most 512 positions"):
        config_kwargs("minilm", "asvd", None, [1024], None, None, None, 16, None, 1)
    with pytest.raises(ValueError, match="llama takes at most 4096 positions"):
        config_kwargs("llama", "asvd", None, [128], 4096, None, None, 16, None, 1)
    with pytest.raises(ValueError, match="palu"):
        config_kwargs("minilm", "palu", None, None, None, None, None, 16, None, 1)


# ---------------------------------------------------------------- the device reaches everything


def test_inputs_and_caches_follow_the_models_device() -> None:
    """A model on the meta device: every timed call's ids and KV cache must be made there too."""
    from gac.proof.bert import BertConfig, BertEncoder

    with torch.device("meta"):
        llama = LlamaDecoder(TINY).eval()
        bert = BertEncoder(BertConfig(hidden=64, intermediate=128, heads=2, layers=1)).eval()
    inputs: list[torch.device] = []
    for m in (llama, bert):
        m.register_forward_pre_hook(lambda _m, args: inputs.extend(a.device for a in args if isinstance(a, torch.Tensor)))
    for out in (llama_prefill(llama, 16)(), llama_decode(llama, 8)()):
        assert out.device.type == "meta" and out.shape == (1, 1, TINY.vocab_size)
    assert bert_prefill(bert, 16)().device.type == "meta"
    assert len(inputs) == 4 and {d.type for d in inputs} == {"meta"}  # prefill, decode's prefix and step, BERT
    assert llama.new_cache(1, 8).k[0].device.type == "meta"


@pytest.mark.slow
def test_device_flows_to_subject_profile_and_timing(monkeypatch) -> None:
    """cpu:0 is a device no default names: every place that receives "cpu:0" was given the proof's device."""
    import gac.agent.platform
    import gac.agent.runner
    import gac.agent.timing
    import gac.proof.pipeline

    seen: dict[str, list[str]] = {}

    def spy(module, name, device_of, change=lambda kw: kw):
        real = getattr(module, name)

        def wrapper(*a, **kw):
            seen.setdefault(name, []).append(str(device_of(a, kw)))
            return real(*a, **change(kw))

        monkeypatch.setattr(module, name, wrapper)

    fast = Timing(min_samples=10, max_samples=10, time_cap_ms=5, warmup_ms=0)
    spy(gac.proof.pipeline, "make_subject", lambda a, kw: a[1])
    spy(gac.proof.pipeline, "measured_alignment", lambda a, kw: kw["device"], lambda kw: {**kw, "timing": fast})
    spy(gac.proof.pipeline, "time_rounds", lambda a, kw: kw["device"])
    spy(gac.agent.timing, "make_timer", lambda a, kw: a[0])
    spy(gac.agent.runner, "run_plan", lambda a, kw: a[2])
    spy(gac.agent.platform, "detect_platform", lambda a, kw: a[0] if a else kw.get("device"))
    cfg = tiny_cfg(compressors=("prune",), decode_context=0, rounds=2, window=4, device="cpu:0", instances=2)
    res = run_proof(cfg, log=lambda _m: None)
    for name in ("make_subject", "measured_alignment", "time_rounds", "make_timer", "run_plan"):
        assert seen[name] and set(seen[name]) == {"cpu:0"}, (name, seen[name])
    assert "cpu:0" in seen["detect_platform"]
    r = res.results[0]
    assert r.latency.device == "cpu:0" and r.profile is not None and r.profile.measured > 0
    assert r.latency.instances == 2  # the config's builds reach the timing


def test_subject_lives_on_the_asked_device() -> None:
    """Built for the meta device (no default names it): model, calibration, probe and evaluation ids all go there."""
    from gac.proof.subjects import llama_subject

    s = llama_subject(TINY, calib=(2, 16), evaluation=(1, 16), device="meta")
    assert {p.device.type for p in s.model.parameters()} == {"meta"}
    for t in (s.calibration.ids, s.calibration.probe, s.calibration.reference, s.judge.ids, s.judge.reference):
        assert t.device.type == "meta"


def test_cuda_run_needs_cuda() -> None:
    from gac.proof.pipeline import prepare

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    from gac.proof.cli import config_kwargs

    with pytest.raises(ValueError, match="no CUDA"):
        prepare(tiny_cfg(device="cuda:0"))
    with pytest.raises(ValueError, match="cuda:0: this torch .* has no CUDA"):
        config_kwargs("llama8b", "palu", None, None, None, None, None, 16, None, 1, device="cuda")
    with pytest.raises(ValueError, match="use cpu or cuda"):
        tiny_cfg(device="mps")


def test_cuda_dtype_comes_from_the_agents_choice(monkeypatch) -> None:
    """with_dtype asks the agent's platform of the proof's device: bfloat16 from sm_80, float16 before."""
    import gac.agent.platform

    asked: list[str] = []

    def platform_of(device, dtypes=True):
        asked.append(str(device))
        return PlatformDescriptor(
            device_kind="cuda", device_name="GPU under test", compute_capability=capability[0], **cuda_dtype_fields(capability[0], False)
        )

    monkeypatch.setattr(gac.agent.platform, "detect_platform", platform_of)
    capability = ["9.0"]
    assert with_dtype(ProofConfig(device="cuda:0"))[0].dtype == "bfloat16"
    capability[0] = "7.5"
    assert with_dtype(ProofConfig(device="cuda:0"))[0].dtype == "float16"
    assert with_dtype(ProofConfig(device="cuda:0", dtype="bfloat16"))[0].dtype == "bfloat16"  # --dtype wins
    assert asked == ["cuda:0"] * 3


# ---------------------------------------------------------------- the timing branch


def test_pass_clock_is_cuda_events_only_on_cuda_devices() -> None:
    assert pass_clock("cuda:0") is cuda_pass and pass_clock(torch.device("cuda", 1)) is cuda_pass and pass_clock("cuda") is cuda_pass
    assert pass_clock("cpu") is cpu_pass and pass_clock("cpu:0") is cpu_pass
    assert isinstance(module_spans("cuda:0"), CudaSpans) and isinstance(module_spans("cpu"), CpuSpans)
    assert isinstance(on_device("cpu"), contextlib.nullcontext)


def test_cpu_timing_never_touches_cuda(monkeypatch) -> None:
    def no_cuda(*_a, **_k):
        raise AssertionError("the CPU path called torch.cuda")

    for name in ("Event", "synchronize", "device"):
        monkeypatch.setattr(torch.cuda, name, no_cuda)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
    x = torch.randn(4, 8)
    run = time_rounds(
        {"a": model}, [Setting("prefill", 4)], lambda m, s: lambda: m(x), rounds=2, passes=2, in_place=("a", lambda m: [m[0]]), device="cpu"
    )
    assert run.device == "cpu" and run.threads == 1 and len(run.in_place["S=4"]) == 2
    us, dropped = median_of_passes(lambda: model(x), 3, True, device="cpu")
    assert us > 0 and 0 <= dropped <= 3


def test_module_calls_replays_each_module_on_the_inputs_it_got_and_leaves_no_hooks() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
    x = torch.randn(3, 8)
    x0 = x.clone()
    seen: list[tuple[str, torch.Tensor]] = []
    for name in ("0", "2"):
        getattr(model, name).register_forward_hook(lambda m, a, out, name=name: seen.append((name, out.detach().clone())))
    replay = module_calls(lambda: model(x), [model[0], model[2], model[0]])  # listed twice: called once per model call
    assert [n for n, _ in seen] == ["0", "2"] and all(not m._forward_pre_hooks for m in model)
    x.add_(100.0)  # the replay keeps its own copies of the inputs
    seen.clear()
    replay()
    assert [n for n, _ in seen] == ["0", "2"]
    with torch.no_grad():
        h = model[0](x0)
        assert torch.allclose(seen[0][1], h) and torch.allclose(seen[1][1], model[2](torch.relu(h)))


def test_a_call_that_cannot_be_captured_is_timed_eagerly_and_says_why() -> None:
    def broken(fn):
        raise RuntimeError("operation not permitted when stream is capturing\nmore")

    eager: dict = {}
    fn = lambda: 1  # noqa: E731
    assert _replayable(fn, broken, ("v", "S=4", 1), eager) is fn
    assert eager == {("v", "S=4"): "RuntimeError: operation not permitted when stream is capturing"}
    assert _replayable(fn, lambda f: "replay", ("w", "S=4", 0), eager) == "replay" and ("w", "S=4") not in eager


def test_builds_of_every_model_are_timed_in_rotation_over_the_rounds() -> None:
    a = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
    b = copy.deepcopy(a)
    x = torch.randn(4, 8)
    by_round: list[set[int]] = [set()]  # the builds (by identity) each round called

    def make_fn(m, s):
        return lambda: (by_round[-1].add(id(m)), m(x))

    run = time_rounds(
        {"a": a, "b": b},
        [Setting("prefill", 4)],
        make_fn,
        rounds=4,
        passes=1,
        in_place=("a", lambda m: [m[0]]),
        instances=2,
        on_round=lambda r: by_round.append(set()),
    )
    rounds = by_round[:4]
    assert run.instances == 2 and all(len(ids) == 2 for ids in rounds)  # one build of each model per round
    assert rounds[0] == rounds[2] and rounds[1] == rounds[3] and not rounds[0] & rounds[1]  # build r mod 2
    assert not {id(a), id(b)} & (rounds[0] | rounds[1])  # builds are copies: the caller's models stay as they are
    assert len(run.medians["a", "S=4"]) == 4 and len(run.in_place["S=4"]) == 4  # one figure per round, as with one build
    assert all(us > 0 for us in run.in_place["S=4"])
    for bad in (0, 5):  # none, or more builds than rounds to time them
        with pytest.raises(ValueError, match="at least 1, and at most the rounds"):
            time_rounds({"a": a}, [Setting("prefill", 4)], make_fn, rounds=4, passes=1, instances=bad)


def test_graphs_apply_to_cuda_only_and_every_compressed_variant_is_clocked_in_place() -> None:
    def no_capture(fn):
        raise AssertionError("a CPU run captured a graph")

    a = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
    b, c = copy.deepcopy(a), copy.deepcopy(a)
    x = torch.randn(4, 8)
    run = time_rounds(
        {"a": a, "b": b, "c": c},
        [Setting("prefill", 4)],
        lambda m, s: lambda: m(x),
        rounds=2,
        passes=2,
        in_place=("a", lambda m: [m[0]]),
        clock_also=["b"],
        graphs=True,
        capture=no_capture,
        clock_original=("c", lambda m: [m[0]]),
    )
    assert not run.graphs and not run.eager
    assert set(run.modules) == {("a", "S=4"), ("b", "S=4"), ("c", "S=4")} and all(len(v) == 2 for v in run.modules.values())
    assert run.in_place == {"S=4": run.modules["a", "S=4"]} and run.in_place_us("S=4", "c") > 0
    assert run.in_place_us("S=4", "b") > 0
    # An original whose modules the weights do not map onto (None) is not clocked.
    again = time_rounds({"a": a, "c": c}, [Setting("prefill", 4)], lambda m, s: lambda: m(x), rounds=1, passes=1,
                        in_place=("a", lambda m: [m[0]]), clock_original=("c", lambda m: None))  # fmt: skip
    assert set(again.modules) == {("a", "S=4")}


def test_the_originals_modules_are_the_dense_linears_at_the_weights_and_none_for_head_groups() -> None:
    from gac.proof.compress import compress_asvd, compress_palu, compress_prune, original_modules
    from gac.proof.llama import random_llama
    from gac.proof.subjects import TokenCalibration, random_ids

    model = random_llama(TINY, 0)
    cal = TokenCalibration(model, random_ids(512, (2, 8), 1), random_ids(512, (1, 8), 2))
    asvd = compress_asvd(model, cal, 0.15, [8], "float32").manifest
    assert [type(m) for m in original_modules(model, asvd) or []] == [torch.nn.Linear] * len(asvd.weights)
    prune = compress_prune(model, cal, 0.25, [8], "float32").manifest
    assert len(original_modules(model, prune) or []) == 3 * len(prune.weights)  # gate, up and down per MLP
    palu = compress_palu(model, cal, 0.5, [8], "float32").manifest
    assert original_modules(model, palu) is None


# ---------------------------------------------------------------- the report


def speedup(effect: float, noise: float = 0.002, n: int = 12):
    base = [100.0 * (1 + 0.1 * (i % 3)) for i in range(n)]
    return paired_speedup(base, [b / effect * (1 + noise * ((-1) ** i)) for i, b in enumerate(base)])


def test_claims_read_the_confidence_intervals() -> None:
    from gac.proof.report import as_fast_as_round8, direction, faster_than_unaligned, smaller_is_slower

    assert direction(speedup(0.9)) == "slower" and direction(speedup(1.1)) == "faster" and direction(speedup(1.0, 0.05)) == "same"
    assert direction(speedup(1.1, n=4)) == "few"
    assert smaller_is_slower(speedup(0.9)).startswith("YES, smaller is slower")
    assert smaller_is_slower(speedup(1.1)).startswith("no")
    assert faster_than_unaligned(speedup(1.05)).startswith("yes") and faster_than_unaligned(speedup(0.95)).startswith("NO")
    assert as_fast_as_round8(speedup(1.0, 0.05), same_dims=True).startswith("yes, within noise")
    assert as_fast_as_round8(speedup(0.95), same_dims=False).startswith("NO")


def test_prediction_within_three_percent() -> None:
    def pred(saving_us: float, effect: float) -> SettingPrediction:
        return SettingPrediction("S=16", "prefill", 100.0, 100.0 - saving_us, saving_us, 0.0, 1000.0, speedup(effect))

    measured = speedup(1.05).median
    assert pred(1000.0 * (1 - 1 / measured), 1.05).within()  # predicted exactly the measured speed-up
    assert not pred(0.0, 1.05).within()  # predicted 1.0x against 1.05x measured: 4.8 % off
    assert pred(1000.0 * (1 - 1 / (measured * 1.02)), 1.05).within() and not pred(1000.0 * (1 - 1 / (measured * 1.04)), 1.05).within()


def test_the_modules_saving_in_place_is_read_beside_the_profiles() -> None:
    sp = SettingPrediction("S=16", "prefill", 100.0, 60.0, 40.0, 0.0, 1000.0, speedup(1.05), in_place_us=90.0, modules_us=45.0)
    assert sp.modules_saving_us == 45.0 and "in place the modules themselves saved +45 us" in sp.misses()
    unclocked = dataclasses.replace(sp, modules_us=None)
    assert unclocked.modules_saving_us is None and "themselves saved" not in unclocked.misses()


def test_the_proof_times_two_builds_on_a_gpu_and_one_on_a_cpu() -> None:
    from gac.proof.cli import config_kwargs

    assert ProofConfig().timed_instances == 1 and ProofConfig(device="cuda:0").timed_instances == 2
    assert ProofConfig(device="cuda:0", instances=3).timed_instances == 3
    for bad in (0, 26):
        with pytest.raises(ValueError, match=f"instances {bad}"):
            ProofConfig(instances=bad)  # 25 rounds by default
    assert ProofConfig(device="cuda:0", rounds=1).timed_instances == 1
    assert config_kwargs("llama", "asvd", None, None, None, None, None, 16, None, 1, instances=4)["instances"] == 4
    assert "instances" not in config_kwargs("llama", "asvd", None, None, None, None, None, 16, None, 1)  # the device decides


def test_a_warm_or_chained_profile_is_for_cuda_only() -> None:
    from gac.proof.cli import config_kwargs
    from gac.proof.profile import measured_alignment

    with pytest.raises(ValueError, match="profile_l2 'hot'"):
        ProofConfig(profile_l2="hot")
    with pytest.raises(ValueError, match="only on a CUDA device"):
        config_kwargs("llama", "asvd", None, None, None, None, None, 16, None, 1, profile_l2="warm")
    with pytest.raises(ValueError, match="use one of cold, warm, chain"):
        config_kwargs("llama", "asvd", None, None, None, None, None, 16, None, 1, profile_l2="lukewarm")
    with pytest.raises(ValueError, match="--profile-l2 chain: only on a CUDA device"):
        config_kwargs("llama", "asvd", None, None, None, None, None, 16, None, 1, profile_l2="chain")
    assert config_kwargs("llama", "asvd", None, None, None, None, None, 16, None, 1, profile_l2="cold")["profile_l2"] == "cold"
    manifest = compress("asvd", tiny_cfg(), prepare(tiny_cfg())).manifest
    for how in ("warm", "chain"):
        with pytest.raises(ValueError, match=f"a {how} profile needs a CUDA device"):
            measured_alignment(manifest, window=4, device="cpu", profile_l2=how)


def test_no_slower_refuses_a_faster_prefill_bought_with_a_slower_decode_in_the_proofs_alignment() -> None:
    """The proof's second pass with --no-slower, on a profile where widths that are multiples of 8 are
    faster at prefill (M = 16) and slower at decode (M = 1): the plain alignment makes that trade, this one does not."""
    import uuid

    from gac.contracts.measurements import Measurement
    from gac.proof.profile import align_measured
    from gac.solver.candidates import LatencyModel, build_items
    from gac.solver.lookup import FileLookup
    from gac.solver.no_slower import slowdowns, totals_by_tokens

    cfg = tiny_cfg()
    manifest = compress("prune", cfg, prepare(cfg)).manifest
    assert manifest.workload.tokens == [16, 1]  # prefill and decode
    opts = align_options(8)

    def us(shape: dict[str, int], axis: str) -> float:
        x, rest = shape[axis], shape["n"] * shape["k"] // shape[axis]
        if shape["m"] == 1:
            return 5 + rest * x / 4e5 + (0.0 if x % 8 else 2.0)
        return 10 + rest * x / 2e4 + (3.0 if x % 8 else 0.0)

    rows = [
        Measurement(id=uuid.uuid4(), op=mc.op, dtype=mc.dtype, shape={**mc.fixed_shape, mc.axis: d}, sweep_axis=mc.axis,
                    median_us=(t := us({**mc.fixed_shape, mc.axis: d}, mc.axis)), p10_us=t, p90_us=t, mean_us=t, n=50, timer="synthetic")
        for mc in align(manifest, None, opts).missing
        for d in mc.dims
    ]  # fmt: skip
    lookup = FileLookup.from_measurements(rows, "synthetic-cpu")
    items, model = build_items(manifest), LatencyModel(lookup, manifest)
    own = totals_by_tokens(model, items, {it.name: int(it.d_star) for it in items})

    def slower(result) -> dict[int, float]:
        return slowdowns(totals_by_tokens(model, items, {w.name: w.dim for w in result.weights}), own)

    _, plain, _ = align_measured(manifest, lookup, opts, balance=False)
    _, held, _ = align_measured(manifest, lookup, opts, balance=False, no_slower=True)
    assert 1 in slower(plain)  # the trade is there to be made
    assert not slower(held) and any("no-slower: token weights raised" in w for w in held.warnings)


@cuda
@pytest.mark.parametrize(
    ("how", "said", "timer"),
    [("warm", "L2 warm (no flush)", "cuda-events+queued"), ("chain", "calls chained", "cuda-events+chain8+cold-weights+queued")],
)
def test_a_warm_or_chained_profile_times_without_flushing_on_cuda(how: str, said: str, timer: str) -> None:
    # window 2: a profile of a few hundred points is the point, not its size (each small GEMM is about 0.1 s to profile on a GPU)
    res = run_proof(tiny_cfg(compressors=("asvd",), device="cuda:0", dtype=None, profile_l2=how, window=2), log=lambda _m: None)
    r = res.results[0]
    assert r.profile is not None and r.profile.l2 == how and said in render(res)
    assert r.measurements and {m.timer for m in r.measurements} == {timer}


def test_eager_is_asked_for_by_a_flag_and_graphs_are_the_default() -> None:
    from gac.proof.cli import config_kwargs

    assert config_kwargs("llama", "asvd", None, None, None, None, None, 16, None, 1, eager=True)["graphs"] is False
    assert "graphs" not in config_kwargs("llama", "asvd", None, None, None, None, None, 16, None, 1)
    assert ProofConfig().graphs and ProofConfig.from_json({**ProofConfig().to_json(), "graphs": False}).graphs is False
    assert config_kwargs("llama", "palu", None, None, None, None, None, 16, None, 1, no_slower=True)["no_slower"] is True
    assert not ProofConfig().no_slower


@pytest.fixture(scope="module")
def palu_run():
    return run_proof(tiny_cfg(compressors=("palu",)), log=lambda _m: None, aligner=rules_only)


def test_report_states_the_claims_per_compressor(palu_run) -> None:

    r = palu_run.results[0]
    assert r.method == "palu" and r.variants[UNALIGNED].within_budget and r.variants[GAC_LATENCY].within_budget
    assert {ORIGINAL, UNALIGNED, ROUND8, GAC_LATENCY} <= set(r.variants)
    text = render(palu_run)
    assert f"claims (palu, measured on {palu_run.timed_on}" in text
    for claim in (
        "smaller is slower? S=16: original / unaligned",
        "GAC latency-aware faster than unaligned? decode@8",
        "GAC latency-aware at least as fast as round-to-8? S=16",
        "predictions within 3% of measured?",
    ):
        assert claim in text
    assert "CPU (the agent's platform):" in text and "GPU (the agent's platform)" not in text and "1 CPU thread(s)" in text


def test_report_names_the_gpu_from_the_agents_platform(palu_run) -> None:

    p = PlatformDescriptor(device_kind="cuda", device_name="GPU under test")
    gpu = describe_gpu(p)
    assert gpu == "GPU under test, compute capability unknown, driver unknown, CUDA unknown, cuBLAS unknown"
    res = dataclasses.replace(palu_run, gpu=gpu, config=dataclasses.replace(palu_run.config, device="cuda:0"))
    text = render(res)
    assert f"GPU (the agent's platform): {gpu}" in text and "on cuda:0" in text and "thread(s)" not in text


def test_retime_keeps_the_kind_of_device(palu_run, tmp_path) -> None:
    from gac.proof.retime import BadOverride, DeviceMismatch, default_save_path, retime, save_run

    path = save_run(palu_run, tmp_path / "run.json")
    with pytest.raises(DeviceMismatch, match="profiled on cpu"):
        retime(path, log=lambda _m: None, device="cuda:0")
    with pytest.raises(BadOverride, match="instances 3: at least 1, and at most the rounds \\(2\\)"):
        retime(path, log=lambda _m: None, instances=3)  # the saved run's 2 rounds
    assert default_save_path(ProofConfig(model="llama8b", device="cuda:0")).name == "proof-llama8b-cuda.json"
    assert default_save_path(ProofConfig(model="llama")).name == "proof-llama.json"


def test_cli_takes_device_model_and_compressor() -> None:
    import typer
    from typer.testing import CliRunner

    from gac.proof.cli import register

    app = typer.Typer()
    register(app)

    @app.command("noop")
    def _noop() -> None:
        pass

    res = CliRunner().invoke(app, ["proof", "--help"])
    assert res.exit_code == 0 and "--device" in res.output and "--layers" in res.output and "llama8b" in res.output
    bad = CliRunner().invoke(app, ["proof", "--model", "minilm", "--seq", "2048"])
    assert bad.exit_code == 2 and "512" in bad.output
    bad = CliRunner().invoke(app, ["proof", "--device", "tpu"])
    assert bad.exit_code == 2


# ---------------------------------------------------------------- on a GPU only


@cuda
def test_cuda_pass_times_on_the_gpu() -> None:
    a = torch.randn(1024, 1024, device="cuda")
    us, on_cpu = cuda_pass(lambda: a @ a)
    assert us > 0 and on_cpu is None
    med, dropped = median_of_passes(lambda: a @ a, 3, True, device="cuda:0")
    assert med > 0 and dropped == 0


@cuda
def test_tiny_proof_runs_on_cuda() -> None:
    res = run_proof(tiny_cfg(compressors=("asvd", "palu"), device="cuda:0", dtype=None), log=lambda _m: None, aligner=rules_only)
    assert res.gpu and res.config.dtype in ("bfloat16", "float16")
    for r in res.results:
        assert r.latency.device == "cuda:0" and r.latency.threads is None
        assert all(v > 0 for key, meds in r.latency.medians.items() for v in meds)
        # Every call was replayed from a CUDA graph (none fell back to eager), and each compressed
        # variant's modules were clocked in place from a graph of their own.
        assert r.latency.graphs and r.latency.eager == {}, r.latency.eager
        assert {v for v, _ in r.latency.modules} == set(r.variants) - {ORIGINAL}


@cuda
def test_a_graph_replay_keeps_the_inputs_its_kernels_read() -> None:
    """The inputs live only in the captured call: once the caller drops it, the replay must still read them."""
    import gc

    def make_call():
        x = torch.full((1024, 1024), 2.0, device="cuda")
        return lambda: x @ x

    replay = cuda_graph(make_call())
    gc.collect()
    torch.cuda.empty_cache()
    junk = [torch.full((1024, 1024), 7.0, device="cuda") for _ in range(8)]  # would take the freed inputs' memory
    assert torch.equal(replay(), torch.full((1024, 1024), 4096.0, device="cuda")) and len(junk) == 8


@cuda
def test_a_graph_replay_times_the_gpu_work_without_the_launches() -> None:
    """A decode step of the tiny decoder: its replay is faster than its eager launches, and computes the same logits."""
    model = LlamaDecoder(TINY).cuda().eval()
    step = llama_decode(model, 8)
    eager = step().clone()
    replay = cuda_graph(step)
    assert torch.allclose(replay(), eager)
    graph_us, _ = median_of_passes(replay, 20, False, device="cuda:0")
    eager_us, _ = median_of_passes(step, 20, False, device="cuda:0")
    assert graph_us < eager_us
