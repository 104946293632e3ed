"""What the importance objective's tie-break costs (gac.solver.ties), beside the solve it follows.

Per manifest, in one process and the same rounds: our MCKP solve alone (the baseline: what the
importance objective ran before ties went to the compressor's dims) and the solve followed by
closest_optimum, the median and worst ratio of the two over --repeat runs, the tied items, how far
the dims moved from the compressor's (median and largest) with and without the tie-break, and the
whole align() once, to set the cost beside everything else an alignment does.

Manifests: Llama-3-8B's ASVD ranks (224 weights) with their importances and with every importance
1.0, and rules-only random low-rank weights of Llama shapes (benchmarks/align_scale.py's generator)
at 10,000 and 100,000 weights: lognormal importances (rounded to 20 bits many share a slope), uniform,
and three levels (1, 2, 3 in turn: three large classes, which took minutes when the classes were solved jointly).

The latency objective's tie-break (gac.solver.ties.swapped_nearer: two weights of one class trade dims at
the same summed latency, toward the compressor's) is measured the same way: the whole align() with it and
with it left out, in turn, on Llama-3-8B priced by a synthetic lattice (every curve the alignment needs,
latency linear in d between steps, slower off multiples of 8 and most off even dims: exact ties abound).

    python benchmarks/ties.py                    # all of the above, 5 rounds
    python benchmarks/ties.py --quick            # no 100,000-weight manifests, 3 rounds
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository first: benchmarks/solver.py would otherwise shadow the solver package

from benchmarks.align_scale import manifest_doc  # noqa: E402
from gac.agent.platform import detect_platform  # noqa: E402
from gac.contracts.manifest import Manifest  # noqa: E402
from gac.solver import ties  # noqa: E402
from gac.solver.align import AlignOptions, _instance, align, integer_instance  # noqa: E402
from gac.solver.candidates import LatencyModel  # noqa: E402
from gac.solver.lookup import FileLookup  # noqa: E402
from gac.solver.mckp import solve_mckp  # noqa: E402
from gac.solver.ties import closest_optimum  # noqa: E402

solver_align = importlib.import_module("gac.solver.align")  # the package's name `align` is the function


def _llama(uniform: bool) -> dict:
    body = json.loads((ROOT / "examples" / "llama3-8b-asvd-r15.json").read_text())
    if uniform:
        for w in body["weights"]:
            w["importance"] = 1.0
    return body


def _scale(n: int, levels: int | None) -> dict:
    """align_scale's manifest; levels: importances 1..levels in turn (1: uniform) in place of its lognormal ones."""
    body = manifest_doc(n)
    if levels:
        for i, w in enumerate(body["weights"]):
            w["importance"] = 1.0 + i % levels
    return body


def _moves(cands, choice) -> tuple[float, float]:  # noqa: ANN001
    moved = [abs(ic.candidates[j].dim - ic.item.d_star) for ic, j in zip(cands, choice)]
    return statistics.median(moved), max(moved)


def measure(name: str, body: dict, rounds: int) -> None:
    manifest = Manifest.model_validate(body)
    opts = AlignOptions(cross_check="none")
    inst = _instance(manifest, None, opts, LatencyModel(None, manifest))
    costs, values = integer_instance(inst.cands, opts.importance_bits)
    alone, both, ratios = [], [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        sol = solve_mckp(costs, values, inst.budget)
        t1 = time.perf_counter()
        nearest = closest_optimum(inst.cands, costs, values, sol)
        t2 = time.perf_counter()
        alone.append(t1 - t0)
        both.append(t2 - t0)
        ratios.append((t2 - t0) / (t1 - t0))
    t0 = time.perf_counter()
    align(manifest, None, opts)
    whole = time.perf_counter() - t0
    before, after = _moves(inst.cands, sol.choice), _moves(inst.cands, nearest.choice)
    print(
        f"{name:<34} {len(inst.cands):>7,} {nearest.tied:>7,} "
        f"{statistics.median(alone):>8.3f} {statistics.median(both):>8.3f} "
        f"{statistics.median(ratios):>6.2f}x {max(ratios):>6.2f}x {whole:>8.2f} "
        f"{before[0]:>6.1f}/{before[1]:<6.1f} {after[0]:>6.1f}/{after[1]:<6.1f}",
        flush=True,
    )


def _lattice_lookup(manifest: Manifest) -> FileLookup:
    """Every curve the alignment asks for, from 1 to its largest dim: 20 µs + 0.01 µs a unit of d, 1.3x off
    multiples of 8, 2x off even dims (two decimals: sums that tie in µs tie in the solver's units too)."""
    rows = []
    for mc in align(manifest, None, AlignOptions(cross_check="none", baselines=False)).missing:
        for d in range(1, max(mc.dims) + 1):
            lat = round((20 + 0.01 * d) * (1.0 if d % 8 == 0 else 1.3 if d % 2 == 0 else 2.0), 2)
            rows.append((mc.op, mc.dtype, {**mc.fixed_shape, mc.axis: d}, mc.axis, lat, lat * 0.99, lat * 1.01, 20))
    return FileLookup(rows, "synthetic lattice")


def measure_latency(name: str, body: dict, rounds: int) -> None:
    """align() with the latency objective, with swapped_nearer and with it left out, in turn."""
    manifest = Manifest.model_validate(body)
    lookup = _lattice_lookup(manifest)
    opts = AlignOptions(objective="latency", cross_check="none", baselines=False)
    align(manifest, lookup, opts)  # the curve model's fits, cached for both
    times: dict[bool, list[float]] = {True: [], False: []}
    results = {}
    for _ in range(rounds):
        for swaps in (False, True):
            solver_align.swapped_nearer = ties.swapped_nearer if swaps else (lambda cands, items, choice: list(choice))
            t0 = time.perf_counter()
            results[swaps] = align(manifest, lookup, opts)
            times[swaps].append(time.perf_counter() - t0)
    solver_align.swapped_nearer = ties.swapped_nearer
    ratios = [b / a for a, b in zip(times[False], times[True])]
    totals = {k: (round(r.latency.aligned_us, 6), r.total_params, round(r.objective, 6)) for k, r in results.items()}
    same = totals[True] == totals[False]
    moves = {k: sorted(abs(w.dim - w.dim_before) for w in r.weights) for k, r in results.items()}
    print(
        f"{name:<34} {len(manifest.weights):>7,} {statistics.median(times[False]):>8.3f} {statistics.median(times[True]):>8.3f} "
        f"{statistics.median(ratios):>6.2f}x {max(ratios):>6.2f}x  same latency, params and importance: {same}; "
        f"moves (median/largest) {statistics.median(moves[False]):.1f}/{moves[False][-1]:.1f} -> "
        f"{statistics.median(moves[True]):.1f}/{moves[True][-1]:.1f}",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="no 100,000-weight manifests, 3 rounds")
    ap.add_argument("--repeat", type=int, default=None, help="rounds per manifest (default 5, --quick 3)")
    args = ap.parse_args()
    rounds = args.repeat or (3 if args.quick else 5)
    cases = [
        ("llama3-8b asvd, its importances", _llama(False)),
        ("llama3-8b asvd, importance 1.0", _llama(True)),
        ("10,000 rules-only, lognormal", _scale(10_000, None)),
        ("10,000 rules-only, uniform", _scale(10_000, 1)),
        ("10,000 rules-only, 3 levels", _scale(10_000, 3)),
    ]
    if not args.quick:
        kinds = (("lognormal", None), ("uniform", 1), ("3 levels", 3))
        cases += [(f"100,000 rules-only, {name}", _scale(100_000, levels)) for name, levels in kinds]
    cpu = detect_platform("cpu", dtypes=False)
    print(f"CPU {cpu.device_name} ({cpu.isa}); {rounds} rounds; seconds are medians; moves are dims from the compressor's")
    head = f"{'manifest':<34} {'items':>7} {'tied':>7} {'solve':>8} {'+ties':>8} {'median':>7} {'worst':>7} {'align()':>8}"
    print(f"{head} {'moves before':>13} {'moves after':>13}")
    for name, body in cases:
        measure(name, body, rounds)
    print(f"\nthe latency objective, priced by a synthetic lattice: {'manifest':<10} {'items':>7} {'without':>8} {'with':>8}")
    for name, body in cases[:2]:
        measure_latency(name, body, rounds)


if __name__ == "__main__":
    main()
