"""What a CPU point costs before its first sample: building its kernel, weight copies included.

    .venv/bin/python benchmarks/kernel_build.py [--repeats 7]

A CPU kernel reads the next of up to 16,384 copies of its weights on each call (gac.agent.kernels).
Its views are made before timing; this times build_kernel as the agent calls it against the same
views made one slice per copy (the way it was done before) side by side, in this process, on
small and medium GEMMs and low-rank pairs, and prints each ratio, the median and the worst.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gac.agent.kernels as kernels  # noqa: E402
from gac.agent.platform import detect_platform  # noqa: E402

POOL = 256 << 20
CASES = [
    ("gemm", {"m": 8, "n": 12, "k": 48}),
    ("lowrank", {"m": 8, "in_features": 48, "rank": 12, "out_features": 40}),
    ("gemm", {"m": 256, "n": 100, "k": 256}),
    ("lowrank", {"m": 256, "in_features": 256, "rank": 97, "out_features": 256}),
    ("gemm", {"m": 1024, "n": 1291, "k": 4096}),
]


def one_slice_per_copy(buf, start, shapes, strides, count):  # type: ignore[no-untyped-def]
    """The baseline: the same views, one Python slice per copy and weight."""
    out, at = [], start
    for _ in range(count):
        ws = []
        for (n, k), stride in zip(shapes, strides, strict=True):
            ws.append(buf[at : at + n * k].view(n, k))
            at += stride
        out.append(tuple(ws))
    return out


def build_seconds(op: str, shape: dict[str, int], repeats: int) -> list[float]:
    times = []
    for seed in range(repeats + 1):
        t0 = time.perf_counter()
        kernels.build_kernel(op, "float32", shape, "cpu", seed=seed, weight_pool_bytes=POOL)
        times.append(time.perf_counter() - t0)
    return times[1:]  # the first one allocates the pool


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"platform: {detect_platform('cpu', dtypes=False).label()}; float32, {POOL >> 20} MiB pool, median of {args.repeats}")
    ours = kernels._copies_at
    ratios = []
    for op, shape in CASES:
        kernels._copies_at = one_slice_per_copy
        base = build_seconds(op, shape, args.repeats)
        kernels._copies_at = ours
        now = build_seconds(op, shape, args.repeats)
        ratio = statistics.median(base) / statistics.median(now)
        ratios.append(ratio)
        strides, copies = kernels._copy_layout(
            [(shape["n"], shape["k"])] if op == "gemm" else [(shape["rank"], shape["in_features"]), (shape["out_features"], shape["rank"])],
            POOL,
            torch.float32,
        )
        print(
            f"{op} {shape}: {copies} copies; one slice per copy {1e3 * statistics.median(base):.1f} ms, "
            f"one view per weight {1e3 * statistics.median(now):.1f} ms: {ratio:.1f}x"
        )
    print(f"build time, one slice per copy / now: median {statistics.median(ratios):.1f}x, worst {min(ratios):.1f}x")


if __name__ == "__main__":
    main()
