"""The agent's CUDA timer against independent timers, from ~3 us to ~1 ms, over separate runs.

    python benchmarks/gpu_timer.py --device cuda:0 [--runs 3]   # a real GPU
    python benchmarks/gpu_timer.py                               # no GPU: the simulated stream
    python benchmarks/gpu_timer.py --why [--runs 3]              # a GPU: why ours and do_bench differ

Per kernel and method, the median of each run, the runs' spread (largest / smallest median - 1:
the repeatability) and the ratio to triton's do_bench (L2 flushed, one sync at the end). Methods:
ours (CudaTimer: rounds queued behind a spin), chained (CudaTimer.chained: 8 calls back to back a
sample, each on a new copy of the weights, no flush: as a decode step runs them), synced (the same
events with a sync after each sample: the agent's former timing), graph (the kernel replayed from a
CUDA graph, warm L2: a floor without launch costs). On the simulated stream the reference is the kernel's true duration.
The last lines give the median and the worst ratio and spread of each method. Then, on a GPU, the
profiling rate: a curve of GEMM points timed by the agent's runner, in points per second.

--why isolates the gap between ours and do_bench on the small kernels, one factor at a time: copies
of do_bench's loop (replica: 256 MB zero_() flush, N samples queued, one sync), then with fill_(1),
with a flush of 2x the L2, with a spin and a sync per round of 100 (as ours), then ours with its
fill_(1) flush and with a zero_() one; beside each, the median SM clock while it ran (NVML).
"""

from __future__ import annotations

import argparse
import random
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from gac.agent.gpu_queue import NvmlProbe, TorchCudaQueue
from gac.agent.kernels import build_kernel
from gac.agent.platform import detect_platform
from gac.agent.runner import PlanRunner
from gac.agent.simulated_gpu import SimulatedGpu
from gac.agent.timing import CudaTimer, synced_samples
from gac.contracts.plans import Sweep, SweepPlan, Timing

# (label, op, shape) on a GPU, in the platform's fast dtype, GEMM, GEMV and SDPA each from a few us to
# about 1 ms. The small ones first (--small times those alone): GEMMs of a few us, a 2 MB GEMV, the
# down-projection of a PaLU head group at decode (rank 13 and 16: one-kernel GEMV against split-K on an
# H100), a short sequence's SDPA. Then a GEMV of 32 MB, the q_proj ranks 1288 / 1291 (aligned and not),
# SDPA at head_dim 128 / 100, and the ~1 ms end: a Llama-3-70B lm_head at decode (a 2 GB GEMV), a
# 4096-token SDPA of batch 2 and an 8192 x 8192 x 4096 GEMM.
SMALL_GPU_KERNELS = (
    ("gemm 256x128x256", "gemm", {"m": 256, "n": 128, "k": 256}),
    ("gemm 256x136x256", "gemm", {"m": 256, "n": 136, "k": 256}),
    ("gemm 256x200x256", "gemm", {"m": 256, "n": 200, "k": 256}),
    ("gemv 1024x1024", "gemv", {"n": 1024, "k": 1024}),
    ("gemm 1x13x4096", "gemm", {"m": 1, "n": 13, "k": 4096}),
    ("gemm 1x16x4096", "gemm", {"m": 1, "n": 16, "k": 4096}),
    ("sdpa 1x32x128 d128", "sdpa", {"b": 1, "h": 32, "s": 128, "head_dim": 128}),
)
GPU_KERNELS = (
    *SMALL_GPU_KERNELS,
    ("gemv 4096x4096", "gemv", {"n": 4096, "k": 4096}),
    ("gemm 1024x1288x4096", "gemm", {"m": 1024, "n": 1288, "k": 4096}),
    ("gemm 1024x1291x4096", "gemm", {"m": 1024, "n": 1291, "k": 4096}),
    ("sdpa 1x32x2048 d128", "sdpa", {"b": 1, "h": 32, "s": 2048, "head_dim": 128}),
    ("sdpa 1x32x2048 d100", "sdpa", {"b": 1, "h": 32, "s": 2048, "head_dim": 100}),
    ("gemm 4096x4096x4096", "gemm", {"m": 4096, "n": 4096, "k": 4096}),
    ("gemv 128256x8192", "gemv", {"n": 128256, "k": 8192}),
    ("sdpa 2x32x4096 d128", "sdpa", {"b": 2, "h": 32, "s": 4096, "head_dim": 128}),
    ("gemm 8192x8192x4096", "gemm", {"m": 8192, "n": 8192, "k": 4096}),
)
SIM_KERNELS_US = (3.0, 6.0, 20.0, 150.0, 1000.0)


def graph_us(fn: Callable[[], object], reps: int = 50) -> float:
    """Per-call time of fn replayed from a CUDA graph (warm L2, no launch cost)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph.replay()
    times = []
    for _ in range(5):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / reps)
    return statistics.median(times)


def do_bench_us(fn: Callable[[], object]) -> float | None:
    try:
        from triton.testing import do_bench
    except Exception:  # noqa: BLE001 - triton is optional
        return None
    return float(do_bench(fn, warmup=25, rep=100, return_mode="median")) * 1e3


# What a sound timer meets on every kernel: its median within this band of the reference's, and
# the medians of separate runs within this of each other.
AGREE = (0.95, 1.05)
REPEAT = 0.03


def spread(values: list[float]) -> float:
    return max(values) / min(values) - 1


def report(rows: dict[str, dict[str, list[float]]], reference: str) -> None:
    methods = list(dict.fromkeys(m for by in rows.values() for m in by if m != reference))  # a row may lack one
    print(f"{'kernel':24} {reference + ' (us)':>22} " + " ".join(f"{m + ' (us)':>26} {'x ref':>6} {'spread':>6}" for m in methods))
    ratios: dict[str, list[float]] = {m: [] for m in methods}
    spreads: dict[str, list[float]] = {m: [] for m in methods}
    for label, by in rows.items():
        ref = statistics.median(by[reference])
        line = f"{label:24} {'/'.join(f'{v:.1f}' for v in by[reference]):>22} "
        for m in methods:
            if not by.get(m):
                line += f"{'-':>26} {'':6} {'':6} "
                continue
            ratio = statistics.median(by[m]) / ref
            ratios[m].append(ratio)
            spreads[m].append(spread(by[m]))
            line += f"{'/'.join(f'{v:.1f}' for v in by[m]):>26} {ratio:6.2f} {spread(by[m]):6.1%} "
        print(line)
    for m in methods:
        worst = max(ratios[m], key=lambda r: abs(r - 1))
        agree = sum(AGREE[0] <= r <= AGREE[1] for r in ratios[m])
        repeat = sum(s <= REPEAT for s in spreads[m])
        print(
            f"{m}: ratio to {reference} median {statistics.median(ratios[m]):.3f}, worst {worst:.3f}; "
            f"run-to-run spread median {statistics.median(spreads[m]):.1%}, worst {max(spreads[m]):.1%}; "
            f"{agree} of {len(ratios[m])} kernels within {AGREE[0]}-{AGREE[1]}x, {repeat} repeat within {REPEAT:.0%}"
        )


def simulated(runs: int) -> None:
    print("simulated GPU stream (gac.agent.simulated_gpu): no real device, the reference is each kernel's true time")
    rows: dict[str, dict[str, list[float]]] = {}
    for us in SIM_KERNELS_US:
        by: dict[str, list[float]] = {"true": [], "ours": [], "chained": [], "synced": []}
        for run in range(runs):
            sim = SimulatedGpu(seed=run)
            by["true"].append(us)
            by["ours"].append(CudaTimer(queue=sim).time(sim.kernel(us), Timing()).median_us)
            by["chained"].append(CudaTimer(queue=sim).chained().time(sim.kernel(us, pooled=True), Timing()).median_us)
            sim = SimulatedGpu(seed=run)
            by["synced"].append(synced_samples(sim, sim.kernel(us), 50).median_us)
        rows[f"kernel of {us:g} us"] = by
    report(rows, "true")


def on_gpu(device: str, runs: int, small: bool = False) -> None:
    dev = torch.device(device)
    platform = detect_platform(dev)
    dtype = platform.fast_dtype.value if platform.fast_dtype else "float16"
    print(f"{platform.label()} driver {platform.driver_version} CUDA {platform.cuda_runtime} torch {platform.torch_version}; {dtype}")
    rows: dict[str, dict[str, list[float]]] = {}
    pool = CudaTimer(dev).chained().weight_pool_bytes  # what the chained timer's kernels rotate through
    with torch.inference_mode():
        for label, op, shape in SMALL_GPU_KERNELS if small else GPU_KERNELS:
            fn = build_kernel(op, dtype, shape, dev).fn
            pooled = build_kernel(op, dtype, shape, dev, weight_pool_bytes=pool).fn
            by: dict[str, list[float]] = {"do_bench": [], "ours": [], "chained": [], "synced": [], "graph": []}
            if op == "sdpa":  # no weights to rotate: a chain would be the same inputs warm, not what "chained" measures
                del by["chained"]
            if small:  # do_bench's flush is a 256 MB buffer, ours twice the L2: does the size explain a gap?
                by["ours 256MB"] = []
            for _ in range(runs):  # separate runs: a fresh timer each, the methods interleaved
                ref = do_bench_us(fn)
                if ref is None:
                    by.pop("do_bench", None)
                else:
                    by["do_bench"].append(ref)
                by["ours"].append(CudaTimer(dev).time(fn, Timing()).median_us)
                if "chained" in by:
                    by["chained"].append(CudaTimer(dev).chained().time(pooled, Timing()).median_us)
                if small:
                    by["ours 256MB"].append(CudaTimer(dev, flush_bytes=256_000_000).time(fn, Timing()).median_us)
                by["synced"].append(synced_samples(TorchCudaQueue(dev), fn, 200).median_us)
                by["graph"].append(graph_us(fn))
            rows[f"{label}"] = by
    report(rows, "do_bench" if "do_bench" in next(iter(rows.values())) else "graph")
    if not small:
        profiling_rate(dev, dtype)


def profiling_rate(dev: torch.device, dtype: str) -> None:
    """A q_proj-like curve (M=1024, K=4096, N swept over 200 widths) timed by the agent's runner."""
    plan = SweepPlan(
        name="rate", sweeps=[Sweep(op="gemm", dtypes=[dtype], axis="n", fixed={"m": 1024, "k": 4096}, values={"start": 1216, "stop": 1415})]
    )
    runner = PlanRunner(CudaTimer(dev), dev, adaptive=False)
    t0 = time.perf_counter()
    result = runner.run(plan)
    seconds = time.perf_counter() - t0
    print(
        f"profiling rate: {len(result.measurements)} points in {seconds:.1f} s = {len(result.measurements) / seconds:.1f} points/s "
        f"({len(result.failures)} failed)"
    )


# --why: the methods, in the order of the table; the reference first.
WHY_METHODS = ("do_bench", "replica", "replica fill", "replica 2xL2", "replica spin", "ours", "ours zero")
DO_BENCH_FLUSH_BYTES = 256 << 20  # triton's get_empty_cache_for_benchmark: 256 MiB of int32
REPLICA_SAMPLES = 1000
REPLICA_ROUND = 100  # samples per synchronisation in "replica spin"
REPLICA_WARMUP_MS = 25.0  # do_bench's warmup


class ZeroFlushQueue(TorchCudaQueue):
    """TorchCudaQueue whose L2 flush writes zeros (zero_(), as do_bench's) instead of ones."""

    def flush_l2(self) -> None:
        self._flush.zero_()


class SmClock:
    """The SM clock (MHz) read every ~1 ms by a background thread while a method runs (the agent's NVML
    probe); no readings without NVML."""

    def __init__(self, dev: torch.device) -> None:
        self._probe = NvmlProbe(dev)

    @contextmanager
    def polled(self) -> Iterator[list[int]]:
        """The readings taken while the with-block runs (filled in by the time it exits)."""
        readings: list[int] = []
        stop = threading.Event()

        def poll() -> None:
            while not stop.is_set():
                mhz = self._probe.read().get("sm_clock_mhz")
                if mhz is None:  # no NVML, or a failing read: no (more) readings, not a failed run
                    return
                readings.append(int(mhz))
                stop.wait(0.001)

        thread = threading.Thread(target=poll, daemon=True)
        thread.start()
        try:
            yield readings
        finally:
            stop.set()
            thread.join()


def replica_us(
    fn: Callable[[], object],
    flush: torch.Tensor,
    fill: bool = False,
    spin: Callable[[float], None] | None = None,
    n: int = REPLICA_SAMPLES,
) -> float:
    """Median us of n samples taken as triton's do_bench takes them: fn once, a sync, 5 flushed calls to
    estimate its time, ~25 ms of unflushed warm-up calls, then per sample a flush (flush.zero_(), or
    fill_(1) with fill), start event, fn, end event, all queued with no sync, one sync at the end.
    With spin (a TorchCudaQueue's spin): rounds of REPLICA_ROUND samples, each queued behind a spin
    twice the host's time to queue the last round (5 ms at first) and followed by a sync, as ours."""

    def clear() -> None:
        if fill:
            flush.fill_(1)
        else:
            flush.zero_()

    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        clear()
        fn()
    end.record()
    torch.cuda.synchronize()
    estimate_ms = max(start.elapsed_time(end) / 5, 1e-3)
    for _ in range(max(1, int(REPLICA_WARMUP_MS / estimate_ms))):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    per_round = REPLICA_ROUND if spin is not None else n
    lead_us = 5_000.0
    for first in range(0, n, per_round):
        if spin is not None:
            spin(lead_us)
        t0 = time.perf_counter()
        for i in range(first, min(n, first + per_round)):
            clear()
            starts[i].record()
            fn()
            ends[i].record()
        if spin is not None:
            lead_us = min(50_000.0, max(1_000.0, 2 * (time.perf_counter() - t0) * 1e6))
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return statistics.median([s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)])  # elapsed_time is in ms


def why_methods(
    dev: torch.device, fn: Callable[[], object], spin_queue: TorchCudaQueue, big: torch.Tensor, small: torch.Tensor
) -> dict[str, Callable[[], float | None]]:
    """Each --why method as a call returning its median us for fn (do_bench: None without triton); big
    and small are the replicas' flush buffers (do_bench's 256 MiB, ours 2x the L2)."""
    return {
        "do_bench": lambda: do_bench_us(fn),
        "replica": lambda: replica_us(fn, big),
        "replica fill": lambda: replica_us(fn, big, fill=True),
        "replica 2xL2": lambda: replica_us(fn, small),
        "replica spin": lambda: replica_us(fn, big, spin=spin_queue.spin),
        "ours": lambda: CudaTimer(dev).time(fn, Timing()).median_us,
        "ours zero": lambda: CudaTimer(queue=ZeroFlushQueue(dev)).time(fn, Timing()).median_us,
    }


def why(device: str, runs: int, seed: int = 0) -> None:
    """Ours against do_bench on the small kernels, the factors between them one at a time (see the docstring)."""
    if not torch.cuda.is_available():
        print("--why needs a CUDA GPU; this machine or torch build has none")
        return
    dev = torch.device(device)
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    platform = detect_platform(dev)
    dtype = platform.fast_dtype.value if platform.fast_dtype else "float16"
    torch.cuda.set_device(dev)  # events, spins and do_bench use the current device's stream
    spin_queue = TorchCudaQueue(dev)  # its flush is ours: 2x the L2 (256 MiB when the L2 size is unknown)
    spin_queue.spin(1.0)  # measures the spin's rate once, here rather than inside a timed method
    torch.cuda.synchronize()
    print(
        f"{platform.label()} driver {platform.driver_version} CUDA {platform.cuda_runtime} torch {platform.torch_version}; {dtype}; "
        f"L2 {spin_queue.l2_bytes / 2**20:.0f} MiB, flushes: do_bench/replica {DO_BENCH_FLUSH_BYTES >> 20} MiB, "
        f"ours/2xL2 {spin_queue.flush_bytes / 2**20:.0f} MiB; {runs} runs, methods shuffled (seed {seed})"
    )
    clock = SmClock(dev)
    rng = random.Random(seed)
    rows: dict[str, dict[str, list[float]]] = {}
    clocks: dict[str, dict[str, list[int]]] = {}
    with torch.inference_mode():
        big = torch.empty(DO_BENCH_FLUSH_BYTES // 4, dtype=torch.int32, device=dev)
        small = torch.empty(spin_queue.flush_bytes // 4, dtype=torch.int32, device=dev)
        for label, op, shape in GPU_KERNELS[:4]:
            fn = build_kernel(op, dtype, shape, dev).fn
            methods = why_methods(dev, fn, spin_queue, big, small)
            by: dict[str, list[float]] = {m: [] for m in WHY_METHODS}
            mhz: dict[str, list[int]] = {m: [] for m in WHY_METHODS}
            for _ in range(runs):
                order = list(WHY_METHODS)
                rng.shuffle(order)
                for m in order:
                    try:
                        with clock.polled() as readings:
                            us = methods[m]()
                    except Exception as e:  # noqa: BLE001 - one failing method must not lose the others' figures
                        print(f"{label} {m}: {type(e).__name__}: {e}")
                        continue
                    if us is not None:
                        by[m].append(us)
                    mhz[m].extend(readings)
            rows[label] = {m: v for m, v in by.items() if v}
            clocks[label] = mhz
    reference = "do_bench" if all("do_bench" in by for by in rows.values()) else "replica"
    if reference != "do_bench":
        print("triton's do_bench is not available: the reference is the replica of its loop")
    why_report(rows, clocks, reference)


def why_report(rows: dict[str, dict[str, list[float]]], clocks: dict[str, dict[str, list[int]]], reference: str) -> None:
    """The --why table (per kernel and method: the runs' medians, ratio to the reference's median,
    spread over runs, median SM clock) and per method the median and worst ratio over the kernels."""
    print(f"{'kernel':20} {'method':13} {'runs (us)':>22} {'x ' + reference:>11} {'spread':>7} {'SM MHz':>7}")
    ratios: dict[str, list[float]] = {}
    for label, by in rows.items():
        if reference not in by:
            print(f"{label:20} no {reference} figure")
            continue
        ref = statistics.median(by[reference])
        for m, values in by.items():
            ratio = statistics.median(values) / ref
            ratios.setdefault(m, []).append(ratio)
            readings = clocks.get(label, {}).get(m, [])
            mhz = f"{statistics.median(readings):.0f}" if readings else "-"
            print(f"{label:20} {m:13} {'/'.join(f'{v:.2f}' for v in values):>22} {ratio:11.3f} {spread(values):7.1%} {mhz:>7}")
    for m, rs in ratios.items():
        if m != reference:
            worst = max(rs, key=lambda r: abs(r - 1))
            print(f"{m}: ratio to {reference} median {statistics.median(rs):.3f}, worst {worst:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default=None, help="cuda:N (default: the simulated stream when this machine has no CUDA)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--small", action="store_true", help="the kernels of a few us only, with a 256 MB flush beside ours")
    ap.add_argument("--why", action="store_true", help="a GPU: ours against do_bench on the small kernels, one factor at a time")
    args = ap.parse_args()
    if args.why:
        why(args.device or "cuda:0", args.runs)
    elif args.device is None and not torch.cuda.is_available():
        simulated(args.runs)
    else:
        on_gpu(args.device or "cuda:0", args.runs, args.small)


if __name__ == "__main__":
    main()
