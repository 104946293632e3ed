"""The CUDA path of benchmarks/in_model_linears.py on the CPU: a fake capture, fake kernel timers.

What is checked is the bookkeeping (what is replayed, in which order, which kernel shapes are timed and
how the per-linear figures and totals add up), which needs no GPU; the measuring itself does."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from benchmarks.in_model_linears import (
    GPU_MODES,
    MIN_ROUNDS,
    Built,
    gpu_setup,
    main,
    nearest_mode,
    print_gpu_report,
    profile_saving,
    savings,
    time_gpu_rounds,
)
from gac.agent.timing import summarize
from gac.proof.bert import LowRankLinear

TOKENS = 5


class Tiny(nn.Module):
    """A dense linear, then a low-rank pair (two GEMMs), then a linear called on the last position only."""

    def __init__(self, rank: int) -> None:
        super().__init__()
        self.a = nn.Linear(8, 16)
        self.b = LowRankLinear(16, 8, rank)
        self.head = nn.Linear(8, 4)
        self.unused = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.b(self.a(x))[:, -1:])


class Kernel:
    """A stand-in for the agent's GEMM at (m, n, k): does nothing when called."""

    def __init__(self, mnk: tuple[int, int, int], pool: int = 0) -> None:
        self.mnk, self.pool = mnk, pool

    def __call__(self) -> None:
        return None


class FakeTimer:
    """Answers each kernel's (m, n, k) with a made-up median: n * k / 100 * scale (us)."""

    def __init__(self, scale: float, weight_pool_bytes: int = 0) -> None:
        self.scale, self.weight_pool_bytes = scale, weight_pool_bytes
        self.calls = 0

    def time_many(self, fns, timing=None):
        self.calls += 1
        return [summarize([fn.mnk[1] * fn.mnk[2] / 100 * self.scale], timer="fake", stop="max_samples", wall_s=0.0) for fn in fns]


def expected_us(mnk: tuple[int, int, int], scale: float) -> float:
    return mnk[1] * mnk[2] / 100 * scale


@pytest.fixture
def setup():
    torch.manual_seed(0)
    models = {"unaligned": Tiny(rank=7).eval(), "v": Tiny(rank=8).eval()}
    x = torch.randn(1, TOKENS, 8)

    def call_of(m: nn.Module):
        def run():
            with torch.inference_mode():
                return m(x)

        return run

    captured: list[str] = []

    def capture(fn):
        captured.append("x")
        return fn

    def make_kernel(m: int, n: int, k: int, pool: int) -> Kernel:
        return Kernel((m, n, k), pool)

    timers = {"cold": FakeTimer(1.0), "warm": FakeTimer(0.5), "chain": FakeTimer(0.75, weight_pool_bytes=1 << 20)}
    g = gpu_setup(("unaligned", "v"), models, {n: call_of(m) for n, m in models.items()}, make_kernel, timers, "cpu", capture=capture)
    return g, models, captured


def called(model: nn.Module, replay) -> list[str]:
    """The names of the model's linears that one replay calls, in order."""
    seen: list[str] = []
    handles = [
        mod.register_forward_pre_hook(lambda m, a, name=name: seen.append(name))
        for name, mod in model.named_modules()
        if isinstance(mod, nn.Linear)
    ]
    try:
        replay()
    finally:
        for h in handles:
            h.remove()
    return seen


def test_setup_records_the_linears_calls_rows_and_kernel_shapes(setup):
    g, models, captured = setup
    order = ["a", "b.down", "b.up", "head"]
    assert list(g.linears["unaligned"]) == order  # the one never called is left out, and said so
    assert any("unused" in note for note in g.notes)
    assert g.rows["v"] == {"a": (TOKENS,), "b.down": (TOKENS,), "b.up": (TOKENS,), "head": (1,)}
    assert g.linears["v"]["b.down"] == (8, 16) and g.linears["unaligned"]["b.down"] == (7, 16)
    # one capture in place and one per linear, per variant
    assert len(captured) == 2 * (1 + len(order))
    # in place: every linear's call in model order; alone: that linear's only
    assert called(models["v"], g.inplace["v"]) == order
    assert called(models["unaligned"], g.alone["unaligned"]["b.up"]) == ["b.up"]
    # a kernel per distinct (m, n, k) and timer: head at m = 1, the rest at the prefill's rows
    cold = g.kernels["cold"]
    assert (1, 4, 8) in cold and (TOKENS, 16, 8) in cold
    assert set(g.kernels) == set(g.timers) and all(set(k) == {*g.shapes("unaligned"), *g.shapes("v")} for k in g.kernels.values())
    assert len(cold) == 4 + 2  # the low-rank pair differs between the variants
    # the chained timer's kernels read their weights from its pool; the others share one weight tensor
    assert {k.pool for k in g.kernels["chain"].values()} == {1 << 20} and {k.pool for k in cold.values()} == {0}
    assert all(g.kernels["warm"][s] is k for s, k in cold.items())


def test_rounds_add_up_per_mode(setup):
    g, _, _ = setup
    per_linear, totals, done = time_gpu_rounds(g, rounds=4, passes=2)
    assert done == 4
    assert set(totals) == {(m, n) for m in GPU_MODES for n in g.names}
    assert all(len(v) == 4 for v in totals.values())
    assert not any(key[0] == "inplace" for key in per_linear)  # in place is timed as a whole
    for n in g.names:
        for mode, scale in (("cold", 1.0), ("warm", 0.5), ("chain", 0.75)):
            want = sum(expected_us((m, *g.linears[n][name]), scale) for name in g.linears[n] for m in g.rows[n][name])
            assert totals[mode, n] == pytest.approx([want] * 4)
            assert per_linear[mode, n, "b.down"] == pytest.approx([expected_us((TOKENS, *g.linears[n]["b.down"]), scale)] * 4)
        for r in range(4):
            assert totals["alone", n][r] == pytest.approx(sum(per_linear["alone", n, name][r] for name in g.linears[n]))
            assert totals["alone", n][r] > 0 and totals["inplace", n][r] > 0
    assert g.timers["cold"].calls == 4 * 2  # one batch of kernels per (variant, round)
    saved = savings(totals, g.names, GPU_MODES)
    # unaligned's pair is 7 wide, v's 8: v costs more here, by (8 - 7) * (16 + 8) / 100 us in cold
    assert saved["cold"] == pytest.approx(-(8 - 7) * (16 + 8) / 100)


def test_max_seconds_stops_after_the_minimum_rounds(setup):
    g, _, _ = setup
    _, totals, done = time_gpu_rounds(g, rounds=10, passes=1, max_seconds=0.0)
    assert done == MIN_ROUNDS
    assert all(len(v) == MIN_ROUNDS for v in totals.values())
    # counted from `since` (the script's start): past the limit already, only the minimum; well within it, all
    assert time_gpu_rounds(g, rounds=5, passes=1, max_seconds=60.0, since=time.perf_counter() - 100.0)[2] == MIN_ROUNDS
    assert time_gpu_rounds(g, rounds=5, passes=1, max_seconds=600.0, since=time.perf_counter())[2] == 5
    said: list[tuple[int, int]] = []  # each round's totals as it ends: a run stopped at its limit has printed them
    time_gpu_rounds(g, rounds=3, passes=1, on_round=lambda done, totals: said.append((done, len(totals["cold", g.names[0]]))))
    assert said == [(1, 1), (2, 2), (3, 3)]


def test_a_call_that_cannot_be_captured_is_timed_eagerly_and_noted():
    model = Tiny(rank=4).eval()
    x = torch.randn(1, TOKENS, 8)

    def run():
        with torch.inference_mode():
            return model(x)

    def capture(fn):
        raise RuntimeError("operation not permitted when stream is capturing")

    g = gpu_setup(
        ("unaligned", "v"), {"unaligned": model, "v": model}, {"unaligned": run, "v": run}, lambda m, n, k, pool: run, {}, "cpu", capture
    )
    assert called(model, g.inplace["v"]) == ["a", "b.down", "b.up", "head"]
    assert any("in place: timed eagerly (RuntimeError: operation not permitted" in note for note in g.notes)


def test_nearest_mode_and_report(setup, capsys):
    assert nearest_mode({"inplace": 270.0, "cold": 244.0, "warm": 262.0, "alone": 300.0}) == "warm"
    assert nearest_mode({"inplace": 10.0, "cold": 9.0, "warm": -10.0, "alone": 30.0}) == "cold"
    g, _, _ = setup
    per_linear, totals, done = time_gpu_rounds(g, rounds=3, passes=1)
    # a profile holding only the low-rank pair's shapes (the others are alike in both variants and cancel)
    profile = [
        {"op": "gemm", "shape": {"m": TOKENS, "n": n, "k": k}, "median_us": us, "timer": "fake"}
        for (n, k), us in {(7, 16): 3.0, (8, 7): 2.0, (8, 16): 4.0, (8, 8): 3.0}.items()
    ]
    b = Built(
        names=g.names,
        models={},
        timed=lambda m, t, s: lambda: None,
        cfg=None,
        tokens=TOKENS,
        setting="prefill S = 5",
        why="dtype float32",
        method="asvd",
        result={"profile": profile},
        make=lambda variant: torch.nn.Identity(),
    )
    assert profile_saving(b.result, g) == "  the saved run's profile (fake): saves -2 us over the 2 -> 2 linear calls whose shapes differ"
    print_gpu_report(g, b, per_linear, totals, done)
    out = capsys.readouterr().out
    assert "median over 3 rounds" in out
    assert "nearest the in-place saving" in out
    assert "saves -2 us over the 2 -> 2 linear calls" in out
    for mode in GPU_MODES:
        assert f"  {mode:7s}  unaligned" in out
    assert "b.down" in out and "7x16 -> 8x16" in out


def test_cuda_without_a_gpu_exits_with_a_message(monkeypatch, tmp_path):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path / "run.json"), "--device", "cuda:0"])
    assert "has no CUDA, or no GPU is visible" in str(exc.value.code)
    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path / "run.json"), "--device", "tpu"])
    assert "--device 'tpu'" in str(exc.value.code)
