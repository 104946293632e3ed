"""Do a model's GEMMs run inside the model as they run in the profile? Every nn.Linear timed in place.

`gac proof` predicts a variant's speed-up from the profiled GEMM curves (each kernel timed alone)
and flags a miss above 0.03. This takes a saved proof run, rebuilds its unaligned model and one
other variant, and in the same shuffled rounds times three things per variant:

- model: a prefill forward (or with --decode, one decode step after the run's KV cache) with a clock
  around every nn.Linear (forward hooks; they add a few us per call, alike for both variants), summed
  over the linears;
- cold: the agent's own GEMM kernel for each linear (m = tokens, n = out_features, k = in_features)
  as the agent times it on a CPU: weights read from a pool beyond the caches
  (gac.agent.timing.WEIGHT_POOL_BYTES), a new copy each call;
- warm: the same kernel reusing one weight tensor, hot in cache (how the agent timed before).

It prints per linear the three medians, then per mode the total over the linears, what the variant
saves, and the paired ratio unaligned / variant with its 95 % bootstrap interval over rounds, beside
the saved run's own profile. The mode whose ratio and saving match the model's is the one whose
predictions hold inside a model.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/in_model_linears.py RUN.json [--method asvd] [--variant round-to-8] [--decode]

(RUN.json: a saved proof run, `gac proof ... --save RUN.json`.)
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import random
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gac.agent.kernels import build_kernel  # noqa: E402
from gac.agent.timing import WEIGHT_POOL_BYTES  # noqa: E402
from gac.proof.latency import median_of_passes  # noqa: E402
from gac.proof.pipeline import ProofConfig, compress, prepare, with_dtype  # noqa: E402
from gac.proof.retime import load_run  # noqa: E402
from gac.proof.stats import bootstrap_median_ci, paired_speedup  # noqa: E402

MODES = ("model", "cold", "warm")
PASSES = 10  # per linear and round in the kernel modes, after one warm-up call; their median counts


def clock_linears(model: torch.nn.Module) -> dict[str, list[float]]:
    """Per nn.Linear (by module name), the microseconds of each call from now on."""
    times: dict[str, list[float]] = defaultdict(list)
    started: dict[str, int] = {}
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear):
            mod.register_forward_pre_hook(lambda m, i, name=name: started.__setitem__(name, time.perf_counter_ns()))
            mod.register_forward_hook(lambda m, i, o, name=name: times[name].append((time.perf_counter_ns() - started[name]) / 1e3))
    return times


@dataclass
class Setup:
    """The two variants' models, ready to time: their linears' shapes, clocks and timed forwards."""

    names: tuple[str, str]  # ("unaligned", the variant)
    linears: dict[str, dict[str, tuple[int, int]]]  # variant -> linear -> (out_features, in_features)
    clocks: dict[str, dict[str, list[float]]]
    forwards: dict[str, Callable[[], object]]
    kernels: dict[tuple[str, tuple[int, int]], Callable[[], object]]  # (mode, (n, k)) -> the agent's GEMM
    tokens: int
    setting: str
    why: str
    method: str
    result: dict[str, Any]  # the saved run's result for the method


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="a saved proof run (gac proof --save FILE)")
    ap.add_argument("--method", default=None, help="asvd | prune (default: the run's first)")
    ap.add_argument("--variant", default="round-to-8", help="compared with unaligned (a variant name of the run)")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--decode", action="store_true", help="one decode step (M = 1) instead of the prefill")
    return ap.parse_args()


def build_setup(a: argparse.Namespace) -> Setup:
    """Rebuild the saved run's unaligned model and the variant, clock their linears, build the kernels."""
    saved = load_run(a.run)
    cfg = ProofConfig.from_json(saved["config"])
    subject = prepare(cfg)
    cfg, why = with_dtype(cfg, by="by the saved run")
    res = next(r for r in saved["results"] if a.method in (None, r["method"]))
    comp = compress(res["method"], dataclasses.replace(cfg, ratio=res["ratio"]), subject)
    dims = {name: {k: int(d) for k, d in v["dims"].items()} for name, v in res["variants"].items()}
    if a.variant not in dims:
        sys.exit(f"no variant {a.variant!r} in {a.run}: {', '.join(dims)}")
    if a.decode and (subject.decode is None or not cfg.decode_context):
        sys.exit(f"{a.run}: its model has no decode setting")
    tokens = 1 if a.decode else cfg.prefill_seqs[0]
    torch.set_num_threads(cfg.threads)
    names = ("unaligned", a.variant)
    models = {n: copy.deepcopy(comp.build(dims[n])).to(cfg.torch_dtype).eval() for n in names}
    linears = {
        n: {name: (mod.out_features, mod.in_features) for name, mod in m.named_modules() if isinstance(mod, torch.nn.Linear)}
        for n, m in models.items()
    }
    timed = subject.decode if a.decode else subject.prefill
    shapes = {nk for per in linears.values() for nk in per.values()}
    dtype = str(cfg.torch_dtype).removeprefix("torch.")
    return Setup(
        names=names,
        linears=linears,
        clocks={n: clock_linears(m) for n, m in models.items()},
        forwards={n: timed(m, cfg.decode_context if a.decode else tokens, cfg.seed) for n, m in models.items()},  # type: ignore[misc]
        kernels={
            (mode, nk): build_kernel(
                "gemm", dtype, {"m": tokens, "n": nk[0], "k": nk[1]}, weight_pool_bytes=WEIGHT_POOL_BYTES if mode == "cold" else 0
            ).fn
            for mode in ("cold", "warm")
            for nk in shapes
        },
        tokens=tokens,
        setting=f"decode@{cfg.decode_context} (M = 1)" if a.decode else f"prefill S = {tokens}",
        why=why,
        method=res["method"],
        result=res,
    )


def time_rounds(s: Setup, rounds: int) -> tuple[dict[tuple[str, str, str], list[float]], dict[tuple[str, str], list[float]]]:
    """Each round times every (mode, variant) once in a shuffled order: per linear, and summed."""
    per_linear: dict[tuple[str, str, str], list[float]] = defaultdict(list)  # (mode, variant, linear) -> us per round
    totals: dict[tuple[str, str], list[float]] = defaultdict(list)  # (mode, variant) -> sum over linears per round
    rng = random.Random(0)
    with torch.inference_mode():
        for fn in [*s.forwards.values(), *s.kernels.values()]:
            fn()
        for _ in range(rounds):
            jobs = [(mode, n) for mode in MODES for n in s.names]
            rng.shuffle(jobs)
            for mode, n in jobs:
                if mode == "model":
                    s.clocks[n].clear()
                    s.forwards[n]()
                    took = {name: sum(v) for name, v in s.clocks[n].items()}
                else:
                    took = {
                        name: median_of_passes(s.kernels[mode, nk], PASSES, filter_preempted=False)[0] for name, nk in s.linears[n].items()
                    }
                for name, us in took.items():
                    per_linear[mode, n, name].append(us)
                totals[mode, n].append(sum(took.values()))
    return per_linear, totals


def print_linears(s: Setup, per_linear: dict[tuple[str, str, str], list[float]], rounds: int) -> None:
    u, v = s.names
    print(f"{s.method}, {v} against unaligned, {s.setting}, {s.why}; us, median over {rounds} rounds")
    print(f"  {'linear':32s} {'unaligned':>10s} -> {v:<10s}  " + "  ".join(f"{m:>15s}" for m in MODES))
    for name in sorted(s.linears[u]):
        cells = "  ".join(
            f"{statistics.median(per_linear[m, u, name]):6.1f} -> {statistics.median(per_linear[m, v, name]):6.1f}" for m in MODES
        )
        shape_u, shape_v = (f"{s.linears[n][name][0]}x{s.linears[n][name][1]}" for n in s.names)
        print(f"  {name:32s} {shape_u:>10s} -> {shape_v:<10s}  {cells}")


def print_totals(s: Setup, totals: dict[tuple[str, str], list[float]]) -> None:
    u, v = s.names
    print(f"{len(s.linears[u])} linears, summed; saves = unaligned - {v} per round, median [95% CI]; ratio = paired unaligned / {v}:")
    for mode in MODES:
        base, var = totals[mode, u], totals[mode, v]
        saves = [b - x for b, x in zip(base, var)]
        lo, hi = bootstrap_median_ci(saves)
        sp = paired_speedup(base, var)
        share = statistics.median(base) / statistics.median(totals["model", u])
        print(
            f"  {mode:5s}  unaligned {statistics.median(base):7.0f} us ({share:.2f}x the model's)  "
            f"saves {statistics.median(saves):+6.0f} us "
            f"[{lo:+.0f} to {hi:+.0f}]  ratio {sp.median:.3f}x [{sp.ci_lo:.3f}-{sp.ci_hi:.3f}]"
        )


def print_saved_profile(s: Setup) -> None:
    """The same sums from the saved run's own profile, when it holds every shape."""
    res, (u, v) = s.result, s.names
    profile = {(m["shape"]["m"], m["shape"]["n"], m["shape"]["k"]): m["median_us"] for m in res["profile"] if m["op"] == "gemm"}
    saved_u = [profile.get((s.tokens, *nk)) for nk in s.linears[u].values()]
    saved_v = [profile.get((s.tokens, *nk)) for nk in s.linears[v].values()]
    if None not in saved_u and None not in saved_v:
        su, sv = sum(saved_u), sum(saved_v)  # type: ignore[arg-type]
        print(
            f"  the saved run's profile ({res['profile'][0]['timer']}): unaligned {su:.0f} us, "
            f"saves {su - sv:+.0f} us, ratio {su / sv:.3f}x"
        )


def main() -> None:
    a = parse_args()
    setup = build_setup(a)
    per_linear, totals = time_rounds(setup, a.rounds)
    print_linears(setup, per_linear, a.rounds)
    print_totals(setup, totals)
    print_saved_profile(setup)


if __name__ == "__main__":
    main()
