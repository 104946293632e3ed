"""Latency of whole models in interleaved, paired rounds.

Each round times every (variant, setting) pair once, in a fresh random order, so
drift of a shared machine hits all variants alike and a round's ratio of two
variants compares them under the same machine state. One measurement is the
median of a few passes after one warm-up call; a pass during which the timing
thread was off the CPU for over 10 % of the wall time (preempted) is dropped when
running single-threaded, unless that would leave fewer than half of the passes.
Speed-ups are the median of per-round ratios with a bootstrap CI (proof.stats).

Optionally, once per round and setting, one more call of the baseline model runs with a
clock around the modules that hold the compressed weights (forward hooks, removed again):
how long those modules take in place, which the prediction sets against the profile.
"""

from __future__ import annotations

import copy
import random
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from proof.stats import Speedup, paired_speedup

DECODE_PASS_FACTOR = 4  # a decode step is ~1/10 of a prefill: take more of them per round
MIN_ON_CPU = 0.9


@dataclass(frozen=True)
class Setting:
    """One timed workload at batch 1: a prefill of `tokens` tokens, or one decode step after `tokens` cached ones."""

    kind: str  # "prefill" | "decode"
    tokens: int

    @property
    def label(self) -> str:
        return f"S={self.tokens}" if self.kind == "prefill" else f"decode@{self.tokens}"

    @property
    def gemm_m(self) -> int:
        """The row count M of every projection GEMM in this setting (batch 1)."""
        return self.tokens if self.kind == "prefill" else 1

    @property
    def unit(self) -> str:
        return "ms" if self.kind == "prefill" else "ms/tok"


def settings_for(seqs: Sequence[int], decode_context: int | None) -> list[Setting]:
    out = [Setting("prefill", s) for s in seqs]
    if decode_context:
        out.append(Setting("decode", decode_context))
    return out


@dataclass
class Stat:
    median: float
    lo: float  # min over rounds
    hi: float  # max over rounds
    n: int

    @property
    def spread(self) -> float:
        """(max - min) / median over rounds."""
        return (self.hi - self.lo) / self.median if self.median > 0 else float("inf")

    @classmethod
    def of(cls, values: Sequence[float]) -> Stat:
        return cls(statistics.median(values), min(values), max(values), len(values))


@dataclass
class LatencyRun:
    settings: list[Setting]
    rounds: int
    passes: int
    threads: int
    seed: int = 0
    # (variant, setting label) -> one median per round, in µs (index r = round r)
    medians: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    # (variant, setting label) -> passes dropped as preempted, per round
    preempted: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    # setting label -> the in-place variant's compressed modules, µs summed over one call, per round
    in_place: dict[str, list[float]] = field(default_factory=dict)
    in_place_variant: str | None = None

    def in_place_us(self, label: str) -> float | None:
        """Median over rounds of the compressed modules' time in place (None: not clocked)."""
        got = self.in_place.get(label)
        return statistics.median(got) if got else None

    @property
    def labels(self) -> list[str]:
        return [s.label for s in self.settings]

    def stat(self, variant: str, label: str) -> Stat:
        return Stat.of(self.medians[(variant, label)])

    def speedup(self, variant: str, baseline: str, label: str) -> Speedup:
        """baseline / variant, paired by round: median ratio and its bootstrap 95 % CI."""
        return paired_speedup(self.medians[(baseline, label)], self.medians[(variant, label)], seed=self.seed)


def median_of_passes(fn: Callable[[], object], passes: int, filter_preempted: bool) -> tuple[float, int]:
    """(median µs over the passes after one warm-up call, passes dropped as preempted)."""
    fn()  # warm-up: this variant's weights back into cache, oneDNN primitives looked up
    walls: list[float] = []
    kept: list[float] = []
    for _ in range(passes):
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        fn()
        wall = time.perf_counter_ns() - t0
        on_cpu = time.thread_time_ns() - c0
        walls.append(wall / 1e3)
        if not filter_preempted or on_cpu >= MIN_ON_CPU * wall:
            kept.append(wall / 1e3)
    use = kept if 2 * len(kept) >= passes else walls
    return statistics.median(use), passes - len(kept)


def clocked_call(fn: Callable[[], object], modules: Sequence[nn.Module]) -> float:
    """µs spent inside `modules` during one call of fn (forward hooks, removed afterwards).

    Each module is clocked once however often it is listed. The clock includes what a module call
    costs besides its kernels (Python dispatch, the hooks, a bias add): a few µs per module."""
    modules = list({id(m): m for m in modules}.values())
    spent = [0]
    started: dict[int, int] = {}

    def pre(mod: nn.Module, args: object) -> None:
        started[id(mod)] = time.perf_counter_ns()

    def post(mod: nn.Module, args: object, out: object) -> None:
        spent[0] += time.perf_counter_ns() - started.pop(id(mod))

    handles = [h for mod in modules for h in (mod.register_forward_pre_hook(pre), mod.register_forward_hook(post))]
    try:
        fn()
    finally:
        for h in handles:
            h.remove()
    return spent[0] / 1e3


def time_rounds(
    models: Mapping[str, nn.Module],
    settings: Sequence[Setting],
    make_fn: Callable[[nn.Module, Setting], Callable[[], object]],
    rounds: int = 25,
    passes: int = 5,
    threads: int = 1,
    dtype: torch.dtype | None = None,
    seed: int = 0,
    on_round: Callable[[int], None] | None = None,
    in_place: tuple[str, Callable[[nn.Module], Sequence[nn.Module]]] | None = None,
) -> LatencyRun:
    """Time every model at every setting, interleaved in `rounds` shuffled rounds.

    make_fn(model, setting) returns the zero-argument call to time (inputs and
    caches prepared once). Models are copied and cast to `dtype` (None: kept as they are);
    callers keep theirs. in_place = (variant, modules_of): each round, one more call of that
    variant per setting clocks the modules modules_of(its model) returns (LatencyRun.in_place).
    """
    torch.set_num_threads(threads)
    cast = {name: (copy.deepcopy(m).to(dtype) if dtype is not None else copy.deepcopy(m)).eval() for name, m in models.items()}
    by_label = {s.label: s for s in settings}
    fns = {(name, s.label): make_fn(m, s) for name, m in cast.items() for s in settings}
    out = LatencyRun(settings=list(settings), rounds=rounds, passes=passes, threads=torch.get_num_threads(), seed=seed)
    rng = random.Random(seed)
    filter_preempted = out.threads == 1  # with more threads the caller may legitimately wait at a barrier
    for r in range(rounds):
        order = list(fns)
        rng.shuffle(order)
        for key in order:
            n = passes * (DECODE_PASS_FACTOR if by_label[key[1]].kind == "decode" else 1)
            med, dropped = median_of_passes(fns[key], n, filter_preempted)
            out.medians.setdefault(key, []).append(med)
            out.preempted.setdefault(key, []).append(dropped)
        if in_place is not None:
            variant, modules_of = in_place
            out.in_place_variant = variant
            for s in settings:
                out.in_place.setdefault(s.label, []).append(clocked_call(fns[variant, s.label], modules_of(cast[variant])))
        if on_round is not None:
            on_round(r + 1)
    return out
