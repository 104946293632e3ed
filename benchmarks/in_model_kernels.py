"""Which kernels a model's linears launch in place, and how long each runs, against the same shapes alone.

benchmarks/in_model_linears.py times a model's linears in place and one by one. Where the two disagree
(on an H100, PaLU's decode linears lost ~10 µs in place at dims that every isolated timing calls a
wash), the question is whether the library launches other kernels in place, or the same kernels run
longer there, or the time goes between them. This answers it from torch.profiler's device trace:

- in place: the linears' calls in model order on the inputs they got inside the model (as
  in_model_linears records them), replayed from one CUDA graph and run eagerly;
- alone: each (m, n, k) the linears ran at, as the agent's GEMM kernel, warm;
- with --whole, the model's whole timed call (every kernel, the linears' among the rest), and on a GPU
  that call clocked three ways: between CUDA events on an idle GPU (as the proof clocks a pass: the
  graph's launch lands inside), between events queued behind a spin (the GPU's own time), and the
  host's launch call alone.

For each variant it prints the device activities by name (kernels, and the memsets or copies a
library adds) with their launches per step and median device µs per launch, the busy time per step
(launches x median, summed) and the idle time between them; per shape whose kernels differ between
the variants, the kernels it launched alone; and the linears' µs per step each way, beside their
sums over the calls back to back (rotating weight copies, one graph) and from the run's own profile,
with what each way says the variant saves.

    python benchmarks/in_model_kernels.py RUN.json --device cuda:0 --method palu --decode \\
        --variant round-to-8 --variant "GAC latency-aware"
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/in_model_kernels.py RUN.json --method asvd   (CPU: aten ops stand in for kernels)

(RUN.json: a saved proof run, `gac proof ... --save RUN.json`.)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from in_model_linears import MNK, build_models, cuda_problem, gemm_counts, linear_modules, linear_rows, saved_gemm_medians  # noqa: E402

from gac.agent.kernels import build_kernel  # noqa: E402
from gac.proof.latency import capture_or_eager, cuda_graph, cuda_pass, is_cuda, median_of_passes, module_calls, on_device, synchronize  # noqa: E402

CPU_GEMMS = ("aten::addmm", "aten::mm", "aten::bmm")  # what stands in for a kernel on a CPU
NAME_WIDTH = 90
B2B_POOL_BYTES = 256 << 20  # back to back: the weight copies fill this much, several times an H100's 50 MiB L2
MAX_COPIES = 4096  # ... in at most this many calls per pass
SPIN_US = 2000.0  # queued: the spin outlasts the host's launch of the step
GAP_WITHIN_US = 50.0  # a longer gap between two kernels is the host between two calls


Launch = tuple[str, float, float]  # a kernel's name, start and end (µs on the trace's clock)


def trace(fn: Callable[[], object], reps: int, device: str) -> list[Launch]:
    """Every kernel of `reps` calls of fn (after one untraced call), in start order. On a CPU the GEMM
    ops stand in for kernels."""
    fn()
    synchronize(device)
    cuda = is_cuda(device)
    with profile(activities=[ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]) as prof:
        for _ in range(reps):
            fn()
            synchronize(device)  # the calls apart: a gap between them is the host's, not the GPU's
    picked = [e for e in prof.events() if ((e.device_type == DeviceType.CUDA) if cuda else (e.name in CPU_GEMMS))]
    return sorted(((e.name, e.time_range.start, e.time_range.end) for e in picked), key=lambda x: x[1])


def kernel_durations(launches: Sequence[Launch]) -> dict[str, list[float]]:
    """Per kernel name, the device µs of each launch."""
    out: dict[str, list[float]] = defaultdict(list)
    for name, start, end in launches:
        out[name].append(end - start)
    return dict(out)


def gaps_us(launches: Sequence[Launch], within_us: float = GAP_WITHIN_US) -> dict[tuple[str, str], list[float]]:
    """The idle time between one kernel's end and the next one's start, by (kernel before, kernel after);
    gaps longer than within_us are between calls (the host's synchronize) and left out."""
    out: dict[tuple[str, str], list[float]] = defaultdict(list)
    for (a, _, end), (b, start, _) in zip(launches, launches[1:]):
        if start - end <= within_us:
            out[a, b].append(max(0.0, start - end))
    return dict(out)


@dataclass
class Anatomy:
    """Where one step's time goes on the device: the median step (by span) of a trace of several. Unlike
    print_kernels' busy (launches x the median launch) and idle (gaps under GAP_WITHIN_US), nothing is cut:
    a kernel that runs long once a step, or a long wait inside the step, shows here."""

    kernels: int  # per step
    span_us: float  # the first kernel's start to the last one's end
    busy_us: float  # every kernel's duration, summed
    gaps_us: float  # every wait between one kernel's end and the next one's start, summed
    largest_gap: tuple[float, str, str]  # (µs, the kernel before, the kernel after), the step's longest wait
    by_name: dict[str, float]  # µs in the step per kernel name, summed over its launches


def _anatomy_of(step: Sequence[Launch]) -> Anatomy:
    waits = [(max(0.0, b[1] - a[2]), a[0], b[0]) for a, b in zip(step, step[1:])]
    by_name: dict[str, float] = defaultdict(float)
    for name, start, end in step:
        by_name[name] += end - start
    return Anatomy(
        kernels=len(step),
        span_us=max(end for _, _, end in step) - step[0][1],
        busy_us=sum(end - start for _, start, end in step),
        gaps_us=sum(w for w, _, _ in waits),
        largest_gap=max(waits, default=(0.0, "", "")),
        by_name=dict(by_name),
    )


def step_anatomy(launches: Sequence[Launch], reps: int) -> Anatomy | None:
    """The trace of `reps` steps cut into steps by count (a graph's replay runs the same kernels every
    time), and the median one by span (the lower of two middles); None where the steps run different
    numbers of kernels."""
    if reps <= 0 or not launches or len(launches) % reps:
        return None
    n = len(launches) // reps
    steps = sorted((_anatomy_of(launches[i * n : (i + 1) * n]) for i in range(reps)), key=lambda a: a.span_us)
    return steps[(reps - 1) // 2]


def per_step(durations: Mapping[str, list[float]], reps: int) -> dict[str, tuple[float, float]]:
    """Per kernel: (launches per step, median µs per launch)."""
    return {name: (len(d) / reps, statistics.median(d)) for name, d in durations.items()}


def short(name: str, width: int = NAME_WIDTH) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


def print_kernels(where: str, traces: Mapping[str, Sequence[Launch]], reps: int) -> dict[str, float]:
    """One table per `where`: per variant its kernels per step, busy and idle µs per step; every kernel
    name with each variant's launches per step x median µs; the gaps that differ most between variants.
    Returns each variant's busy + idle µs per step."""
    variants = list(traces)
    steps = {v: per_step(kernel_durations(traces[v]), reps) for v in variants}
    gaps = {v: gaps_us(traces[v]) for v in variants}
    wall = {}
    print(f"\n{where}: µs per step, over {reps} steps (busy: launches x median µs, summed; idle: the gaps between kernels)")
    for v in variants:
        busy = sum(c * us for c, us in steps[v].values())
        idle = sum(sum(g) for g in gaps[v].values()) / reps
        wall[v] = busy + idle
        n = len(traces[v]) / reps
        print(f"  {v:24s} {n:6.0f} kernels/step  busy {busy:8.1f}  idle {idle:7.1f}  busy + idle {busy + idle:8.1f}")

    def weight(k: str) -> float:  # the most time any variant spends in kernel k per step
        return max(c * us for c, us in (st.get(k, (0.0, 0.0)) for st in steps.values()))

    names = sorted({k for st in steps.values() for k in st}, key=weight, reverse=True)
    print("  " + " | ".join(f"{v[:22]:>22s}" for v in variants) + " | kernel")
    for k in names:
        cells = " | ".join(f"{st[k][0]:9.0f} x {st[k][1]:7.2f} µs" if k in st else f"{'-':>22s}" for st in steps.values())
        print(f"  {cells} | {short(k)}")
    pairs = sorted({p for g in gaps.values() for p in g}, key=lambda p: -max(sum(g.get(p, [])) for g in gaps.values()))
    print("  the gaps, by the kernels either side: launches per step x median µs")
    for a, b in pairs[:12]:
        cells = " | ".join(
            f"{len(g[a, b]) / reps:9.0f} x {statistics.median(g[a, b]):7.2f} µs" if (a, b) in g else f"{'-':>22s}" for g in gaps.values()
        )
        print(f"  {cells} | {short(a, 40)} -> {short(b, 40)}")
    return wall


def back_to_back_us(m: int, n: int, k: int, dtype: str, device: str, passes: int = 5) -> float:
    """One GEMM's µs as a model runs it: many calls queued back to back (from one CUDA graph on a GPU),
    each on its own copy of the weight (copies beyond the L2), the activation shared; the median pass
    over the number of calls."""
    dt = getattr(torch, dtype)
    copies = max(2, min(MAX_COPIES, B2B_POOL_BYTES // (n * k * dt.itemsize)))
    weights = torch.randn(copies, n, k, device=device, dtype=dt)
    x = torch.randn(m, k, device=device, dtype=dt)

    def run() -> None:
        with torch.inference_mode():
            for i in range(copies):
                F.linear(x, weights[i])

    replay, _ = capture_or_eager(run, cuda_graph) if is_cuda(device) else (run, None)
    replay()
    return median_of_passes(replay, passes, False, device)[0] / copies


def queued_pass(step: Callable[[], object], device: str, queue: Any) -> tuple[float, float]:
    """One call between CUDA events queued behind a spin (queue: a gac.agent.gpu_queue.TorchCudaQueue on the
    device), so the host's launch is done before the GPU reaches the first event: the GPU's own µs, and the
    host's µs for the launch call alone (perf_counter, no synchronize)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    queue.spin(SPIN_US)
    start.record()
    t0 = time.perf_counter()
    step()
    host = (time.perf_counter() - t0) * 1e6
    end.record()
    torch.cuda.synchronize(device)
    return start.elapsed_time(end) * 1e3, host


def step_clocks(step: Callable[[], object], device: str, queue: Any, passes: int = 30) -> dict[str, float]:
    """One call's µs three ways, medians over `passes`: between CUDA events on an idle GPU (as the proof
    clocks a pass: the host's launch lands between them), between events queued behind a spin (the GPU's
    own time: the launch is done before the GPU reaches the first event), and on the host, the launch
    call alone (perf_counter, no synchronize). queue: a gac.agent.gpu_queue.TorchCudaQueue on the
    device (its spin)."""
    idle, queued, host = [], [], []
    step()
    torch.cuda.synchronize(device)
    for _ in range(passes):
        idle.append(cuda_pass(step)[0])
        gpu_us, host_us = queued_pass(step, device, queue)
        queued.append(gpu_us)
        host.append(host_us)
    return {"idle GPU": statistics.median(idle), "queued": statistics.median(queued), "host launch": statistics.median(host)}


def shape_kernels(shapes: Sequence[MNK], dtype: str, device: str, reps: int) -> dict[MNK, dict[str, tuple[float, float]]]:
    """Per (m, n, k): the kernels the agent's GEMM launches alone (warm), launches per call x median µs."""
    out = {}
    for m, n, k in shapes:
        kernel = build_kernel("gemm", dtype, {"m": m, "n": n, "k": k}, device=device)
        out[(m, n, k)] = per_step(kernel_durations(trace(kernel.fn, reps, device)), reps)
    return out


def print_sums(
    calls: Mapping[str, Counter[MNK]], columns: Mapping[str, Mapping[str, float]], per_shape: Mapping[str, Mapping[MNK, float]]
) -> None:
    """Per variant, the linears' µs per step each way: measured in place (columns) and summed over the
    calls from per-shape timings (per_shape; a way missing a shape is left blank), and what each way says
    the variant saves over unaligned."""
    ways = {**columns}
    for way, table in per_shape.items():
        ways[way] = {v: sum(table[s] * c for s, c in cnt.items()) for v, cnt in calls.items() if all(s in table for s in cnt)}
    print("\nthe linears, µs per step, each way; in brackets what the variant saves over unaligned")
    for v in calls:
        cells = []
        for way, vals in ways.items():
            if v in vals:
                save = f" [{vals['unaligned'] - vals[v]:+6.1f}]" if v != "unaligned" and "unaligned" in vals else ""
                cells.append(f"{way} {vals[v]:7.1f}{save}")
        print(f"  {v:24s} " + "  ".join(cells))


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="a saved proof run (gac proof --save FILE)")
    ap.add_argument("--method", default=None, help="asvd | prune | palu (default: the run's first)")
    ap.add_argument("--variant", action="append", default=None, help="compared with unaligned (repeatable; default round-to-8)")
    ap.add_argument("--decode", action="store_true", help="one decode step (M = 1) instead of the prefill")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    ap.add_argument("--reps", type=int, default=20, help="traced steps per variant and place")
    ap.add_argument("--whole", action="store_true", help="also trace the whole timed call (the model's step, one CUDA graph)")
    a = ap.parse_args(argv)
    problem = cuda_problem(a.device)
    if problem:
        sys.exit(problem)
    variants = a.variant or ["round-to-8"]
    a.variant = variants[0]
    with on_device(a.device):
        b = build_models(a)
        dtype = str(b.cfg.torch_dtype).removeprefix("torch.")
        names = ["unaligned", *variants]
        graph: dict[str, list[Launch]] = {}
        eager: dict[str, list[Launch]] = {}
        whole: dict[str, list[Launch]] = {}
        steps: dict[str, Callable[[], object]] = {}
        calls: dict[str, Counter[MNK]] = {}
        notes = []
        for v in names:
            model = b.models[v] if v in b.models else b.make(v)
            call = b.call(model, a.decode)
            mods = linear_modules(model)
            rows = linear_rows(call, mods)
            used = [mod for name, mod in mods.items() if name in rows]
            calls[v] = gemm_counts(rows, mods)
            replay = module_calls(call, used)
            eager[v] = trace(replay, a.reps, a.device)
            if is_cuda(a.device):
                captured, why = capture_or_eager(replay, cuda_graph)
                if why is None:
                    graph[v] = trace(captured, a.reps, a.device)
                else:
                    notes.append(f"{v}: not captured ({why})")
            if a.whole:
                step, why = capture_or_eager(call, cuda_graph) if is_cuda(a.device) else (call, None)
                if why is not None:
                    notes.append(f"{v}: its step not captured ({why}), traced eagerly")
                whole[v] = trace(step, a.reps, a.device)
                steps[v] = step
        print(f"{b.method}, {b.setting}, {b.why}, on {a.device}: the compressed model's linears, unaligned against {', '.join(variants)}")
        columns = {}
        if graph:
            if not any(graph.values()):
                notes.append("the graph replays' kernels were not traced by this torch and CUPTI")
            columns["in place (graph)"] = print_kernels("in place, one CUDA graph", graph, a.reps)
        columns["in place (eager)"] = print_kernels("in place, eager", eager, a.reps)
        if whole:
            print_kernels("the whole step (every kernel of the model, one CUDA graph on a GPU)", whole, a.reps)
            if is_cuda(a.device):
                from gac.agent.gpu_queue import TorchCudaQueue

                queue = TorchCudaQueue(torch.device(a.device), None)
                print("  the whole step clocked, µs (median of 30): events on an idle GPU | events queued behind a spin | host launch")
                for v, step in steps.items():
                    c = step_clocks(step, a.device, queue)
                    print(f"  {v:24s} {c['idle GPU']:8.1f} | {c['queued']:8.1f} | {c['host launch']:8.1f}")
        every = sorted(set().union(*calls.values()))
        differ = sorted(set(every) - set.intersection(*(set(c) for c in calls.values())))
        print(f"\nalone (the agent's GEMM, warm), the {len(differ)} shapes not common to every variant: launches x median µs, kernel")
        for mnk, ks in shape_kernels(differ, dtype, a.device, a.reps).items():
            owners = ",".join(str(i) for i, v in enumerate(names) if mnk in calls[v])
            for k, (c, us) in ks.items():
                print(f"  m={mnk[0]:<5d} n={mnk[1]:<6d} k={mnk[2]:<6d} [{owners}] {c:3.0f} x {us:7.2f} µs  {short(k, 70)}")
        print(f"  ([i]: the variants that run the shape, {', '.join(f'{i} {v}' for i, v in enumerate(names))})")
        per_shape = {
            "back to back": {mnk: back_to_back_us(*mnk, dtype, a.device) for mnk in every},
            "the run's profile": saved_gemm_medians(b.result),
        }
        print_sums(calls, columns, per_shape)
        for note in notes:
            print(f"note: {note}")


if __name__ == "__main__":
    main()
