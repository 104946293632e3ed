"""How an alignment's time splits as manifests grow: parse, align (our solver, OR-Tools's
cross-check, the paper-DP baselines, the rest), serialize. Rules only (no platform), lognormal
importances, random low-rank weights of Llama-3-8B shapes.

    python benchmarks/align_scale.py                  # 1,000 weights
    python benchmarks/align_scale.py --sizes 1000 10000

Prints, per size, each part's seconds and our solver's time as a ratio of the cross-check's
(both solve the same knapsack in the same process).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

# The repository first: benchmarks/solver.py would otherwise shadow the solver package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gac.contracts.manifest import Manifest  # noqa: E402
from solver.align import align  # noqa: E402

SHAPES = [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336)]


def manifest_doc(n: int, seed: int = 0) -> dict:
    rng = random.Random(seed)
    weights = []
    for i in range(n):
        out, inn = rng.choice(SHAPES)
        weights.append({
            "name": f"layers.{i}.proj", "kind": "lowrank", "out_features": out, "in_features": inn,
            "dim": rng.uniform(200, min(out, inn) - 70), "importance": rng.lognormvariate(0, 1),
        })
    budget = int(sum(w["dim"] * (w["out_features"] + w["in_features"]) for w in weights))
    return {"schema": "gac.manifest/v1", "model": f"scale-{n}", "compressor": "asvd", "budget": {"params": budget},
            "workload": {"tokens": [1024], "dtype": "bfloat16"}, "weights": weights}


def run(n: int) -> dict[str, float]:
    text = json.dumps(manifest_doc(n))
    t0 = time.perf_counter()
    manifest = Manifest.model_validate_json(text)
    t1 = time.perf_counter()
    result = align(manifest, None)
    t2 = time.perf_counter()
    body = result.model_dump_json(by_alias=True)
    t3 = time.perf_counter()
    solve = result.solver.seconds
    check = result.solver.cross_check.seconds or 0.0
    baselines = sum(b.seconds or 0.0 for b in result.baselines)
    return {
        "weights": n, "parse": t1 - t0, "align": t2 - t1, "solve": solve, "cross-check": check,
        "paper-dp": baselines, "rest": (t2 - t1) - solve - check - baselines, "serialize": t3 - t2,
        "MB": len(body) / 1e6, "ratio": solve / check if check else float("nan"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000])
    args = ap.parse_args()
    cols = ["weights", "parse", "align", "solve", "cross-check", "paper-dp", "rest", "serialize", "MB", "ratio"]
    print("  ".join(f"{c:>11}" for c in cols) + "   (seconds; ratio = our solve / OR-Tools's)")
    for n in args.sizes:
        r = run(n)
        print("  ".join(f"{r[c]:>11,.3f}" if c != "weights" else f"{r[c]:>11,d}" for c in cols))


if __name__ == "__main__":
    main()
