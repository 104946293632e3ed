"""Do a model's GEMMs run inside the model as they ran in the profile? Every nn.Linear timed in place.

`gac proof` predicts a variant's speed-up from the profiled GEMM curves (each kernel timed alone,
warm) and flags a miss above 0.03. This takes a saved proof run, rebuilds its unaligned model and
one other variant, times a prefill forward of each in shuffled rounds with a clock around every
nn.Linear (forward hooks; they add a few us per call, alike for both), and prints per linear
the median time inside the model beside the saved profile's median for the same GEMM
(m = tokens, n = out_features, k = in_features), then the totals: what the variant saves inside
the model against what the profile says it saves.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/in_model_linears.py RUN.json [--method asvd] [--variant round-to-8]

(RUN.json: a saved proof run, e.g. benchmarks/out/proof-minilm.json.)
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
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proof.pipeline import ProofConfig, compress, prepare, with_dtype  # noqa: E402
from proof.retime import load_run  # noqa: E402


def clock_linears(model: torch.nn.Module) -> dict[str, list[float]]:
    """Per nn.Linear (by module name), the microseconds of each call from now on."""
    times: dict[str, list[float]] = defaultdict(list)
    started: dict[str, int] = {}
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear):
            mod.register_forward_pre_hook(lambda m, i, name=name: started.__setitem__(name, time.perf_counter_ns()))
            mod.register_forward_hook(lambda m, i, o, name=name: times[name].append((time.perf_counter_ns() - started[name]) / 1e3))
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="a saved proof run (gac proof --save FILE)")
    ap.add_argument("--method", default=None, help="asvd | prune (default: the run's first)")
    ap.add_argument("--variant", default="round-to-8", help="compared with unaligned (a variant name of the run)")
    ap.add_argument("--rounds", type=int, default=30)
    a = ap.parse_args()
    saved = load_run(a.run)
    cfg = ProofConfig.from_json(saved["config"])
    subject = prepare(cfg)
    cfg, why = with_dtype(cfg, by="by the saved run")
    res = next(r for r in saved["results"] if a.method in (None, r["method"]))
    comp = compress(res["method"], dataclasses.replace(cfg, ratio=res["ratio"]), subject)
    dims = {name: {k: int(d) for k, d in v["dims"].items()} for name, v in res["variants"].items()}
    if a.variant not in dims:
        ap.error(f"no variant {a.variant!r} in {a.run}: {', '.join(dims)}")
    tokens = cfg.prefill_seqs[0]
    torch.set_num_threads(cfg.threads)
    names = ("unaligned", a.variant)
    models = {n: copy.deepcopy(comp.build(dims[n])).to(cfg.torch_dtype).eval() for n in names}
    clocks = {n: clock_linears(m) for n, m in models.items()}
    forwards = {n: subject.prefill(m, tokens, cfg.seed) for n, m in models.items()}
    totals: dict[str, list[float]] = {n: [] for n in names}
    rng = random.Random(0)
    with torch.no_grad():
        for fn in forwards.values():
            fn()
        for c in clocks.values():
            c.clear()
        for _ in range(a.rounds):
            order = list(names)
            rng.shuffle(order)
            for n in order:
                t0 = time.perf_counter_ns()
                forwards[n]()
                totals[n].append((time.perf_counter_ns() - t0) / 1e3)
    profile = {(m["shape"]["m"], m["shape"]["n"], m["shape"]["k"]): m["median_us"] for m in res["profile"] if m["op"] == "gemm"}
    print(f"{res['method']}, {a.variant} against unaligned, prefill S = {tokens}, {why}; us, median over {a.rounds} rounds")
    forward = {n: statistics.median(v) for n, v in totals.items()}
    print(f"forward: unaligned {forward['unaligned']:.0f}, {a.variant} {forward[a.variant]:.0f} (hooks included)")
    saved_model = saved_profile = in_model = in_profile = 0.0
    compared = 0
    for name in sorted(clocks["unaligned"]):
        mods = {n: dict(models[n].named_modules())[name] for n in names}
        t = {n: statistics.median(clocks[n][name]) for n in names}
        p = {n: profile.get((tokens, mods[n].out_features, mods[n].in_features)) for n in names}
        shape = {n: f"{mods[n].out_features}x{mods[n].in_features}" for n in names}
        line = f"  {name:32s} {shape['unaligned']:>10s} -> {shape[a.variant]:<10s} model {t['unaligned']:7.1f} -> {t[a.variant]:7.1f}"
        if p["unaligned"] is not None and p[a.variant] is not None:
            line += f"   profile {p['unaligned']:7.1f} -> {p[a.variant]:7.1f}"
            saved_model += t["unaligned"] - t[a.variant]
            saved_profile += p["unaligned"] - p[a.variant]
            in_model += t["unaligned"]
            in_profile += p["unaligned"]
            compared += 1
        print(line)
    print(f"{compared} linears with both GEMMs in the profile: unaligned inside the model {in_model:.0f} us, in the profile "
          f"{in_profile:.0f} us ({in_model / max(in_profile, 1e-9):.2f}x); {a.variant} saves {saved_model:+.0f} us inside the model, "
          f"{saved_profile:+.0f} us by the profile")


if __name__ == "__main__":
    main()
