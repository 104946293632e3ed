"""The agent's CUDA timer against independent timers, from ~3 us to ~1 ms, over separate runs.

    python benchmarks/gpu_timer.py --device cuda:0 [--runs 3]   # a real GPU
    python benchmarks/gpu_timer.py                               # no GPU: the simulated stream

Per kernel and method, the median of each run, the runs' spread (largest / smallest median - 1:
the repeatability) and the ratio to triton's do_bench (L2 flushed, one sync at the end). Methods:
ours (CudaTimer: rounds queued behind a spin), synced (the same events with a sync after each
sample: the agent's former timing), graph (the kernel replayed from a CUDA graph, warm L2: a floor
without launch costs). On the simulated stream the reference is the kernel's true duration.
The last lines give the median and the worst ratio and spread of each method. Then, on a GPU, the
profiling rate: a curve of GEMM points timed by the agent's runner, in points per second.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from gac.agent.gpu_queue import TorchCudaQueue
from gac.agent.kernels import build_kernel
from gac.agent.platform import detect_platform
from gac.agent.runner import PlanRunner
from gac.agent.simulated_gpu import SimulatedGpu
from gac.agent.timing import CudaTimer, synced_samples
from gac.contracts.plans import Sweep, SweepPlan, Timing

# (label, op, shape) on a GPU, in the platform's fast dtype: small GEMMs (a few us), a GEMV, the
# q_proj ranks 1288 / 1291 (aligned and not), SDPA at head_dim 128 / 100, a 1 ms GEMM.
GPU_KERNELS = (
    ("gemm 256x128x256", "gemm", {"m": 256, "n": 128, "k": 256}),
    ("gemm 256x136x256", "gemm", {"m": 256, "n": 136, "k": 256}),
    ("gemm 256x200x256", "gemm", {"m": 256, "n": 200, "k": 256}),
    ("gemv 4096x4096", "gemv", {"n": 4096, "k": 4096}),
    ("gemm 1024x1288x4096", "gemm", {"m": 1024, "n": 1288, "k": 4096}),
    ("gemm 1024x1291x4096", "gemm", {"m": 1024, "n": 1291, "k": 4096}),
    ("sdpa 1x32x2048 d128", "sdpa", {"b": 1, "h": 32, "s": 2048, "head_dim": 128}),
    ("sdpa 1x32x2048 d100", "sdpa", {"b": 1, "h": 32, "s": 2048, "head_dim": 100}),
    ("gemm 4096x4096x4096", "gemm", {"m": 4096, "n": 4096, "k": 4096}),
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


def spread(values: list[float]) -> float:
    return max(values) / min(values) - 1


def report(rows: dict[str, dict[str, list[float]]], reference: str) -> None:
    methods = [m for m in next(iter(rows.values())) if m != reference]
    print(f"{'kernel':24} {reference + ' (us)':>22} " + " ".join(f"{m + ' (us)':>26} {'x ref':>6} {'spread':>6}" for m in methods))
    ratios: dict[str, list[float]] = {m: [] for m in methods}
    spreads: dict[str, list[float]] = {m: [] for m in methods}
    for label, by in rows.items():
        ref = statistics.median(by[reference])
        line = f"{label:24} {'/'.join(f'{v:.1f}' for v in by[reference]):>22} "
        for m in methods:
            ratio = statistics.median(by[m]) / ref
            ratios[m].append(ratio)
            spreads[m].append(spread(by[m]))
            line += f"{'/'.join(f'{v:.1f}' for v in by[m]):>26} {ratio:6.2f} {spread(by[m]):6.1%} "
        print(line)
    for m in methods:
        worst = max(ratios[m], key=lambda r: abs(r - 1))
        print(
            f"{m}: ratio to {reference} median {statistics.median(ratios[m]):.3f}, worst {worst:.3f}; "
            f"run-to-run spread median {statistics.median(spreads[m]):.1%}, worst {max(spreads[m]):.1%}"
        )


def simulated(runs: int) -> None:
    print("simulated GPU stream (gac.agent.simulated_gpu): no real device, the reference is each kernel's true time")
    rows: dict[str, dict[str, list[float]]] = {}
    for us in SIM_KERNELS_US:
        by: dict[str, list[float]] = {"true": [], "ours": [], "synced": []}
        for run in range(runs):
            sim = SimulatedGpu(seed=run)
            by["true"].append(us)
            by["ours"].append(CudaTimer(queue=sim).time(sim.kernel(us), Timing()).median_us)
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
    with torch.inference_mode():
        for label, op, shape in GPU_KERNELS[:4] if small else GPU_KERNELS:
            fn = build_kernel(op, dtype, shape, dev).fn
            by: dict[str, list[float]] = {"do_bench": [], "ours": [], "synced": [], "graph": []}
            if small:  # do_bench's flush is a 256 MB buffer, ours twice the L2: does the size explain a gap?
                by["ours 256MB"] = []
            for _ in range(runs):  # separate runs: a fresh timer each, the methods interleaved
                ref = do_bench_us(fn)
                if ref is None:
                    by.pop("do_bench", None)
                else:
                    by["do_bench"].append(ref)
                by["ours"].append(CudaTimer(dev).time(fn, Timing()).median_us)
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default=None, help="cuda:N (default: the simulated stream when this machine has no CUDA)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--small", action="store_true", help="the kernels under ~25 us only, with a 256 MB flush beside ours")
    args = ap.parse_args()
    if args.device is None and not torch.cuda.is_available():
        simulated(args.runs)
    else:
        on_gpu(args.device or "cuda:0", args.runs, args.small)


if __name__ == "__main__":
    main()
