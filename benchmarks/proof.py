"""Table 5 on this machine: a model compressed by ASVD and by MLP-width pruning, aligned by
GAC against this CPU's measured GEMM profile, timed in this CPU's fast dtype unless --dtype
says otherwise (prefill; decode for llama).

    python benchmarks/proof.py [--model minilm|llama] [--quick] [--compressor asvd|prune|both] [--ratio R]
    python benchmarks/proof.py --retime benchmarks/out/proof-llama.json [--rounds N]

Same as `gac proof`; prints the tables (progress goes to stderr) and saves the run
(default benchmarks/out/proof-MODEL.json) for --retime.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# This file is named like the package it runs: put the repo root first so
# `import proof` finds the package, not this script.
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proof.cli import config_kwargs, run  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=("minilm", "llama"), default="minilm")
    ap.add_argument("--compressor", choices=("asvd", "prune", "both"), default="both")
    ap.add_argument("--ratio", type=float, default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seq", type=int, action="append", default=None)
    ap.add_argument("--decode-context", type=int, default=None, help="llama: decode at this context (0: off; default 256)")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--passes", type=int, default=None)
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--rel-tol", type=float, default=None)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=None,
                    help="Compress for, profile and time in this dtype (default: this CPU's fast dtype)")
    ap.add_argument("--frontier-search", choices=("bisect", "scan"), default=None,
                    help="How the frontier variant's points are scored for quality (at most 6; default bisect)")
    ap.add_argument("--save", "--json", dest="save", type=Path, default=None,
                    help="Write the run here (default benchmarks/out/proof-MODEL.json)")
    ap.add_argument("--retime", type=Path, default=None, help="Re-time a saved run from its dims; no profiling")
    a = ap.parse_args(argv)
    try:
        kw = config_kwargs(a.model, a.compressor, a.ratio, a.seq, a.decode_context, a.rounds, a.passes, a.window, a.rel_tol,
                           a.threads, a.dtype, a.frontier_search)
    except ValueError as exc:
        ap.error(str(exc))
    print(run(kw, a.quick, a.save, a.retime, log=lambda m: print(m, file=sys.stderr, flush=True)))


if __name__ == "__main__":
    main()
