"""benchmarks/prediction_rules.py: each rule's prediction from a saved run's fields, and the whole script
on a tiny saved run made on the CPU."""

from __future__ import annotations

import pytest

from benchmarks.prediction_rules import RULES, Case, cases, main, score, speedup
from gac.proof.pipeline import run_proof
from gac.proof.retime import save_run
from tests.proof.test_device import tiny_cfg
from tests.proof.test_objectives import synthetic_aligner


def _case(saving_us: float, measured: float, fit_a: float | None = None, in_place_us: float | None = None) -> Case:
    return Case("run m v S=8", saved=1.0, measured=measured, unaligned_us=100.0, saving_us=saving_us,
                in_place_us=in_place_us, kernel_unaligned_us=50.0, fit_a=fit_a)  # fmt: skip


def test_each_rule_scales_the_profiles_saving_its_own_way():
    c = _case(saving_us=20.0, measured=1.3, fit_a=1.5, in_place_us=25.0)
    assert speedup(c, 1.0) == pytest.approx(100 / 80)
    assert RULES["unscaled"](c) == pytest.approx(1.25)
    assert RULES["one point"](c) == pytest.approx(100 / (100 - 20 * 0.5))  # in place 25 of the profile's 50
    assert RULES["two points where they fit, else unscaled"](c) == pytest.approx(100 / 70)
    assert RULES["two points where they fit, else unscaled"](_case(20.0, 1.3)) == pytest.approx(1.25)  # no fit


def test_score_counts_within_three_percent_and_names_the_misses():
    near, far = _case(20.0, measured=1.25 * 1.02), _case(20.0, measured=1.25 / 1.10)
    within, median, worst, misses = score([near, far], RULES["unscaled"])
    assert within == 1 and worst == pytest.approx(0.10) and [w for w, _ in misses] == [far.where]
    assert median == pytest.approx((abs(1 / 1.02 - 1) + 0.10) / 2)


def test_the_script_reads_a_saved_run(tmp_path, capsys):
    # The aligner's synthetic profile gives every variant a prediction (rules only would give none).
    path = save_run(run_proof(tiny_cfg(compressors=("asvd",)), log=lambda _m: None, aligner=synthetic_aligner), tmp_path / "run.json")
    got = cases(path)
    assert got and all(c.measured > 0 and c.unaligned_us > 0 for c in got)
    main([str(path)])
    out = capsys.readouterr().out
    assert f"{len(got)} predictions from 1 saved run(s)" in out
    assert all(f"{name:42s}" in out for name in RULES)
    # On a CPU the run itself scaled by the one-point ratio: the two rows agree.
    row = {name: next(ln[2 + 42 :] for ln in out.splitlines() if ln.startswith(f"  {name:42s}")) for name in RULES}
    assert row["one point"] == row["as saved"] and " of " in row["as saved"]
