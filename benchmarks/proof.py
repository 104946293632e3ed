"""Table 5 on this machine: a model compressed by ASVD, MLP-width pruning and/or PaLU, aligned by
GAC against the device's measured GEMM profile (this CPU, or a CUDA GPU with --device cuda:N),
timed in the device's fast dtype unless --dtype says otherwise (prefill; decode for the decoders).

    python benchmarks/proof.py [--model minilm|llama|llama8b] [--quick] [--compressor asvd|prune|palu|both|all] [--ratio R]
    python benchmarks/proof.py --model llama8b --compressor all --device cuda:0
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

from gac.proof.cli import config_kwargs, run  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=("minilm", "llama", "llama8b"), default="minilm")
    ap.add_argument(
        "--compressor",
        choices=("asvd", "prune", "palu", "both", "all"),
        default="both",
        help="both: asvd and prune; all: asvd, prune and palu (decoders)",
    )
    ap.add_argument("--ratio", type=float, default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seq", type=int, action="append", default=None)
    ap.add_argument(
        "--decode-context", type=int, default=None, help="decoders: decode at this context (0: off; default llama 256, llama8b 1024)"
    )
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--passes", type=int, default=None)
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--rel-tol", type=float, default=None)
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (CPU runs only)")
    ap.add_argument(
        "--dtype",
        choices=("float32", "bfloat16", "float16"),
        default=None,
        help="Compress for, profile and time in this dtype (default: the device's fast dtype)",
    )
    ap.add_argument("--device", default=None, help="cpu (default) | cuda | cuda:N")
    ap.add_argument("--layers", type=int, default=None, help="decoders: how many layers (default llama 4, llama8b 2)")
    ap.add_argument(
        "--frontier-search",
        choices=("bisect", "scan"),
        default=None,
        help="How the frontier variant's points are scored for quality (at most 6; default bisect)",
    )
    ap.add_argument(
        "--save", "--json", dest="save", type=Path, default=None, help="Write the run here (default benchmarks/out/proof-MODEL.json)"
    )
    ap.add_argument("--retime", type=Path, default=None, help="Re-time a saved run from its dims; no profiling")
    ap.add_argument(
        "--instances",
        type=int,
        default=None,
        help="Builds of every model, timed in rotation over the rounds (default: 2 on a GPU, 1 on a CPU; at most the rounds)",
    )
    a = ap.parse_args(argv)
    try:
        kw = config_kwargs(
            a.model,
            a.compressor,
            a.ratio,
            a.seq,
            a.decode_context,
            a.rounds,
            a.passes,
            a.window,
            a.rel_tol,
            a.threads,
            a.dtype,
            a.frontier_search,
            a.device,
            a.layers,
            retime=a.retime is not None,
            instances=a.instances,
        )
    except ValueError as exc:
        ap.error(str(exc))
    print(run(kw, a.quick, a.save, a.retime, log=lambda m: print(m, file=sys.stderr, flush=True)))


if __name__ == "__main__":
    main()
