"""The proof's predictions recomputed from saved runs under each rule for the in-place saving.

`gac proof` predicts a variant's model speed-up as U / (U - f x S): U the unaligned model's measured
time, S the profile's kernel saving, f what that saving counts for inside the model. The rules for f:

- as saved: what the run itself printed (on a GPU unscaled, on a CPU the one-point ratio);
- unscaled: f = 1;
- one point: f = the unaligned model's compressed modules in place over their profile;
- two points: f = a of the fit in place = a x profile + c per launch (the unaligned and the original
  model's modules), where the run has one; else unscaled.

Each rule's count within 3 % of the measured speed-up, its median and worst error, and its misses:

    python benchmarks/prediction_rules.py RUN.json [RUN.json ...]

(RUN.json: a saved proof run, `gac proof ... --save RUN.json`; no device needed.) One lease's runs
are a small sample: compare rules over every lease's runs before changing the proof's own.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gac.proof.predict import WITHIN, speedup_of
from gac.proof.retime import load_run


@dataclass
class Case:
    """One variant at one timed setting of one saved run, as its prediction recorded it."""

    where: str  # run file, method, variant, setting
    saved: float  # the prediction the run printed
    measured: float
    unaligned_us: float  # U
    saving_us: float  # S, the profile's
    in_place_us: float | None
    kernel_unaligned_us: float
    fit_a: float | None


def cases(path: Path) -> list[Case]:
    run = load_run(path)
    out = []
    for res in run["results"]:
        for variant, pred in res.get("predictions", {}).items():
            for setting, s in (pred.get("settings") or {}).items():
                if not s or s.get("measured") is None or s.get("predicted") is None:
                    continue
                out.append(
                    Case(
                        where=f"{path.name} {res['method']} {variant} {setting}",
                        saved=s["predicted"],
                        measured=s["measured"],
                        unaligned_us=s["measured_unaligned_us"],
                        saving_us=s["saving_us"],
                        in_place_us=s.get("in_place_us"),
                        kernel_unaligned_us=s["kernel_unaligned_us"],
                        fit_a=(s.get("calibration") or [None])[0],
                    )
                )
    return out


def speedup(c: Case, f: float) -> float:
    """The proof's own prediction from the case's fields, its saving scaled by f."""
    return speedup_of(c.unaligned_us, f * c.saving_us)


def one_point(c: Case) -> float:
    return c.in_place_us / c.kernel_unaligned_us if c.in_place_us and c.kernel_unaligned_us > 0 else 1.0


RULES: dict[str, Callable[[Case], float]] = {
    "as saved": lambda c: c.saved,
    "unscaled": lambda c: speedup(c, 1.0),
    "one point": lambda c: speedup(c, one_point(c)),
    "two points where they fit, else unscaled": lambda c: speedup(c, c.fit_a if c.fit_a is not None else 1.0),
}


def score(all_cases: Sequence[Case], rule: Callable[[Case], float]) -> tuple[int, float, float, list[tuple[str, float]]]:
    """(within WITHIN, median |error|, the worst error, the misses) of one rule over the cases."""
    errors = [(c.where, rule(c) / c.measured - 1) for c in all_cases]
    misses = [(w, e) for w, e in errors if abs(e) > WITHIN]
    worst = max((e for _, e in errors), key=abs, default=0.0)
    return len(errors) - len(misses), statistics.median(abs(e) for _, e in errors) if errors else 0.0, worst, misses


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path, nargs="+", help="saved proof runs (gac proof --save FILE)")
    a = ap.parse_args(argv)
    every = [c for p in a.runs for c in cases(p)]
    print(f"{len(every)} predictions from {len(a.runs)} saved run(s); within {WITHIN:.0%} = |predicted / measured - 1| <= {WITHIN}")
    for name, rule in RULES.items():
        within, median, worst, misses = score(every, rule)
        print(f"  {name:42s} {within:3d} of {len(every)} within, median |error| {median:.1%}, worst {worst:+.1%}")
        for where, e in misses:
            print(f"      miss {e:+6.1%}  {where}")


if __name__ == "__main__":
    main()
