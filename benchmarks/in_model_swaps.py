"""Which weights carry a variant's step time: its dims swapped into the unaligned model one group at a time.

in_model_kernels.py found an aligned model's decode step slower on the GPU than its linears, replayed
alone in one graph, account for (on an H100, PaLU's aligned decode step 67-70 µs slower, its linears
10 µs). This asks where that time goes. For each group of weights whose dims differ between the
unaligned model and the variant (--by projection: one projection with its head groups together, the
default; --by weight: each weight), the whole timed call is rebuilt and clocked:

- one in: the unaligned model with only that group at the variant's dims;
- one out (--one-out): the variant with only that group back at the unaligned dims (its delta printed
  against unaligned and against the variant: what taking the group out saves);
- and beside them the variant itself and a second build of the unaligned model, the control: two builds
  of one model can differ (an H100 once ran MiniLM's second build 5-6 % faster), and that spread is
  the noise floor of every delta here.

Every build is clocked in the same shuffled rounds: on a GPU its call replayed from one CUDA graph between
CUDA events queued behind a spin (the GPU's own time, the graph's launch hidden), on a CPU its wall time;
each round's median over --passes. It prints per build the median delta against unaligned over the
rounds' paired differences with its 95 % bootstrap interval, beside what the run's own profile predicts
for the same swap (its GEMM medians summed over the linears' calls), and how many more kernels its step
runs. If the one-in deltas add up to the variant's, the time is per weight, and the profile's per-point
timing is what misses it, shape by shape.

Then, per build, where its step's time goes, from a few traced steps (in_model_kernels.step_anatomy): the
span from the first kernel's start to the last one's end, as the kernels' busy time plus the waits
between them, the longest wait, and the clock less the span (time outside the kernels); against
unaligned, how each moved and which kernels' time per step moved most. On an H100 the aligned PaLU
decode step clocked 70 µs slower while the trace's busy time plus its short gaps differed by 3-7 µs: this
says whether the rest is in long waits, in a few long launches, or outside the kernels.

    python benchmarks/in_model_swaps.py RUN.json --device cuda:0 --method palu --decode --variant "GAC latency-aware"
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/in_model_swaps.py RUN.json --method asvd --rounds 5

(RUN.json: a saved proof run, `gac proof ... --save RUN.json`.)
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from in_model_kernels import Anatomy, queued_pass, step_anatomy, trace  # noqa: E402
from in_model_linears import MNK, build_models, cuda_problem, gemm_counts, linear_modules, linear_rows, saved_gemm_medians  # noqa: E402

from gac.proof.latency import capture_or_eager, cpu_pass, cuda_graph, is_cuda, on_device, synchronize  # noqa: E402
from gac.proof.llama import split_group  # noqa: E402
from gac.proof.stats import bootstrap_median_ci  # noqa: E402

UNALIGNED, CONTROL = "unaligned", "unaligned, built again"
MANY_BUILDS = 24  # more builds than this may not fit a GPU's memory at once (a note says so)
TRACED_STEPS = 5  # steps traced per build for its kernel count and where its time goes


def group_of(name: str, by: str) -> str:
    """The group a weight is swapped with: itself, or (by projection) its projection, head groups together."""
    return name if by == "weight" else split_group(name)[0]


def swaps(base: Mapping[str, int], variant: Mapping[str, int], by: str, one_out: bool) -> dict[str, dict[str, int]]:
    """The builds to clock, by label: each group of weights whose dims differ, swapped in ("+group": the base
    with that group at the variant's dims) and, with one_out, swapped out ("-group": the variant with that
    group at the base's dims)."""
    groups: dict[str, list[str]] = {}
    for name in base:
        if variant[name] != base[name]:
            groups.setdefault(group_of(name, by), []).append(name)
    out = {}
    for g, names in groups.items():
        out[f"+{g}"] = {**base, **{n: variant[n] for n in names}}
    if one_out:
        for g, names in groups.items():
            out[f"-{g}"] = {**variant, **{n: base[n] for n in names}}
    return out


def predicted_delta(calls: Counter[MNK], base: Counter[MNK], profile: Mapping[MNK, float]) -> float | None:
    """What the profile says a build costs over the base: its GEMM medians over the calls that differ; None
    where it lacks a shape."""
    diff = Counter(calls)
    diff.subtract(base)
    changed = {s: c for s, c in diff.items() if c}
    if any(s not in profile for s in changed):
        return None
    return sum(profile[s] * c for s, c in changed.items())


def queued_clock(step: Callable[[], object], device: str, queue: Any) -> Callable[[], float]:
    """One call's GPU µs, queued behind a spin (in_model_kernels.queued_pass)."""
    return lambda: queued_pass(step, device, queue)[0]


def wall_clock(step: Callable[[], object]) -> Callable[[], float]:
    return lambda: cpu_pass(step)[0]


@dataclass
class Clocked:
    """Per build, each round's median µs, in the order the builds were listed."""

    rounds: dict[str, list[float]]

    def deltas(self, label: str, base: str = UNALIGNED) -> list[float]:
        """The build's paired differences against the base, round by round (µs; > 0: slower)."""
        return [x - b for x, b in zip(self.rounds[label], self.rounds[base])]


def clock_rounds(clocks: Mapping[str, Callable[[], float]], rounds: int, passes: int, seed: int = 0) -> Clocked:
    """Every build in each round, in a new shuffled order; each round's reading is the median of `passes`."""
    got: dict[str, list[float]] = {label: [] for label in clocks}
    rng = random.Random(seed)
    for _ in range(rounds):
        order = list(clocks)
        rng.shuffle(order)
        for label in order:
            got[label].append(statistics.median(clocks[label]() for _ in range(passes)))
    return Clocked(got)


def report(clocked: Clocked, predicted: Mapping[str, float | None], dims_note: Mapping[str, str]) -> list[str]:
    """One line per build: its median µs, its median paired delta against unaligned with the 95 % interval,
    the profile's delta; then the one-in deltas summed beside the variant's, and the control's spread."""
    base = statistics.median(clocked.rounds[UNALIGNED])
    lines = [f"  {UNALIGNED:40s} {base:9.1f} µs"]
    variant = next((lb for lb in clocked.rounds if lb not in (UNALIGNED, CONTROL) and lb[0] not in "+-"), None)
    one_in = []
    for label in clocked.rounds:
        if label == UNALIGNED:
            continue
        d = clocked.deltas(label)
        med = statistics.median(d)
        lo, hi = bootstrap_median_ci(d) if len(d) > 1 else (med, med)
        p = predicted.get(label)
        pred = "   (profile lacks a shape)" if p is None else f"   profile {p:+8.1f}"
        at = statistics.median(clocked.rounds[label])
        lines.append(f"  {label:40s} {at:9.1f} µs  {med:+8.1f} [{lo:+.1f} .. {hi:+.1f}]{pred}  {dims_note.get(label, '')}")
        if label.startswith("-") and variant is not None:  # what taking the group out of the variant saves
            dv = statistics.median(clocked.deltas(label, base=variant))
            lines[-1] += f"  (against the variant {dv:+.1f})"
        if label.startswith("+"):
            one_in.append((med, p))
    if one_in:
        total = sum(m for m, _ in one_in)
        pred_total = None if any(p is None for _, p in one_in) else sum(p for _, p in one_in if p is not None)
        whole = f", the variant itself {statistics.median(clocked.deltas(variant)):+.1f}" if variant else ""
        pt = "" if pred_total is None else f" (profile {pred_total:+.1f})"
        lines.append(f"  one in, summed over {len(one_in)} groups: {total:+.1f} µs{pt}{whole}")
    if CONTROL in clocked.rounds:
        c = clocked.deltas(CONTROL)
        lines.append(f"  the control (the same dims, built again): {min(c):+.1f} .. {max(c):+.1f} µs over the rounds")
    return lines


def dims_change(ref: Mapping[str, int], at: Mapping[str, int]) -> str:
    """The dims a build moves from ref, 'name a->b' (a head group by its own name), at most four named."""
    moved = [f"{n.rpartition('.')[2] if split_group(n)[1] is not None else n} {ref[n]}->{at[n]}" for n in ref if at[n] != ref[n]]
    return ", ".join(moved[:4]) + (f" (+{len(moved) - 4} more)" if len(moved) > 4 else "")


def anatomy_lines(anatomies: Mapping[str, Anatomy | None], clock_us: Mapping[str, float], top: int = 3) -> list[str]:
    """Per build, where its traced step's time goes: the kernels' span (busy + waits), the longest wait, and
    the clock less the span (time the GPU spends outside the kernels, before the first or after the last);
    then against unaligned, each of those moved and the kernel names whose time per step moved most."""
    base = anatomies.get(UNALIGNED)
    lines = []
    for label, an in anatomies.items():
        if an is None:
            lines.append(f"  {label:40s} (its steps ran different kernels: not cut into steps)")
            continue
        outside = clock_us[label] - an.span_us
        gap, before, after = an.largest_gap
        line = (
            f"  {label:40s} span {an.span_us:7.1f} = busy {an.busy_us:7.1f} + waits {an.gaps_us:6.1f}"
            f" (longest {gap:5.1f}: {before[:24]} -> {after[:24]}); clock - span {outside:+7.1f}"
        )
        if base is not None and label != UNALIGNED:
            moved = {k: an.by_name.get(k, 0.0) - base.by_name.get(k, 0.0) for k in {*an.by_name, *base.by_name}}
            biggest = sorted(moved.items(), key=lambda kv: -abs(kv[1]))[:top]
            line += (
                f"\n  {'':40s} against unaligned: span {an.span_us - base.span_us:+.1f}, busy {an.busy_us - base.busy_us:+.1f},"
                f" waits {an.gaps_us - base.gaps_us:+.1f}, outside {outside - (clock_us[UNALIGNED] - base.span_us):+.1f};"
                f" by kernel: " + ", ".join(f"{k[:48]} {d:+.1f}" for k, d in biggest if d)
            )
        lines.append(line)
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="a saved proof run (gac proof --save FILE)")
    ap.add_argument("--method", default=None, help="asvd | prune | palu (default: the run's first)")
    ap.add_argument("--variant", default="round-to-8", help="the variant whose dims are swapped in (a variant name of the run)")
    ap.add_argument("--decode", action="store_true", help="one decode step (M = 1) instead of the prefill")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    ap.add_argument("--by", choices=("projection", "weight"), default="projection", help="what is swapped at once")
    ap.add_argument("--one-out", action="store_true", help="also the variant with each group back at the unaligned dims")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--passes", type=int, default=10, help="clock readings per build and round (their median counts)")
    ap.add_argument(
        "--traced",
        action="store_true",
        help="clock every build again under torch.profiler's device trace (which can change how kernels launch): does "
        "each swap's loss stay? (On an H100 every PaLU decode delta stayed within 2 µs.)",
    )
    a = ap.parse_args(argv)
    problem = cuda_problem(a.device)
    if problem:
        sys.exit(problem)
    t0 = time.perf_counter()
    with on_device(a.device):
        b = build_models(a)
        assert b.make_dims is not None
        base, variant = b.dims[UNALIGNED], b.dims[a.variant]
        builds = {UNALIGNED: base, CONTROL: base, a.variant: variant, **swaps(base, variant, a.by, a.one_out)}
        if len(builds) > MANY_BUILDS:
            print(f"note: {len(builds)} builds, each a whole model kept in memory with its graph (try --by projection)", flush=True)
        queue = None
        if is_cuda(a.device):
            from gac.agent.gpu_queue import TorchCudaQueue

            queue = TorchCudaQueue(torch.device(a.device), None)
        medians = saved_gemm_medians(b.result)
        clocks: dict[str, Callable[[], float]] = {}
        calls: dict[str, Counter[MNK]] = {}
        kernels: dict[str, float] = {}  # kernels per step (on a CPU, its GEMM ops), from the traced steps
        anatomies: dict[str, Anatomy | None] = {}
        notes = []
        keep = []  # every model stays alive: its graph reads its buffers
        for label, at in builds.items():
            model = b.models[label] if label in b.models else b.make_dims(at)  # the control is a build of its own
            call = b.call(model, a.decode)
            mods = linear_modules(model)
            calls[label] = gemm_counts(linear_rows(call, mods), mods)
            step, why = capture_or_eager(call, cuda_graph) if is_cuda(a.device) else (call, None)
            if why is not None:
                notes.append(f"{label}: not captured ({why}), clocked eagerly")
            step()
            synchronize(a.device)
            clocks[label] = queued_clock(step, a.device, queue) if queue is not None else wall_clock(step)
            launches = trace(step, TRACED_STEPS, a.device)
            kernels[label] = len(launches) / TRACED_STEPS
            anatomies[label] = step_anatomy(launches, TRACED_STEPS)
            keep.append((model, step))
        built_s = time.perf_counter() - t0
        clocked = clock_rounds(clocks, a.rounds, a.passes)
        traced = None
        if a.traced:
            with profile(activities=[ProfilerActivity.CUDA] if is_cuda(a.device) else [ProfilerActivity.CPU]):
                traced = clock_rounds(clocks, a.rounds, a.passes, seed=1)
    predicted = {label: predicted_delta(calls[label], calls[UNALIGNED], medians) for label in builds}
    # each build's dims against what it changes: a one-out against the variant, the rest against unaligned
    note = {
        label: "; ".join(
            filter(None, [f"{kernels[label] - kernels[UNALIGNED]:+.0f} kernels", dims_change(variant if label[0] == "-" else base, at)])
        )
        for label, at in builds.items()
    }
    clock = "GPU µs, queued behind a spin, one CUDA graph" if is_cuda(a.device) else "wall µs"
    print(f"{b.method}, {b.setting}, {b.why}, on {a.device}: {a.variant}'s dims swapped into unaligned, by {a.by}")
    print(f"  {len(builds)} builds in {built_s:.0f} s, {a.rounds} rounds x {a.passes} passes; {clock}; delta against unaligned [95 % CI]")
    what = "kernels" if is_cuda(a.device) else "GEMM ops"
    print(f"  unaligned's step runs {kernels[UNALIGNED]:.0f} {what}; each build's count against it")
    for line in report(clocked, predicted, note):
        print(line)
    if traced is not None:
        print("  the same builds clocked under torch.profiler's device trace:")
        for line in report(traced, predicted, note):
            print(line)
    where = traced if traced is not None else clocked
    print(
        f"  where each build's step goes, from {TRACED_STEPS} traced steps (µs; median over them; the clock: "
        f"{'traced' if traced is not None else 'untraced'}, median over the rounds):"
    )
    for line in anatomy_lines(anatomies, {label: statistics.median(r) for label, r in where.rounds.items()}):
        print(line)
    for n in notes:
        print(f"note: {n}")


if __name__ == "__main__":
    main()
