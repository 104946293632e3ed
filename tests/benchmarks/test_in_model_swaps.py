"""benchmarks/in_model_swaps.py: which builds it makes, what the profile predicts for each, how it reads the
rounds, and the whole script on a tiny saved PaLU run on the CPU."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from benchmarks.in_model_kernels import step_anatomy
from benchmarks.in_model_swaps import CONTROL, UNALIGNED, anatomy_lines, clock_rounds, main, predicted_delta, report, swaps
from gac.proof.pipeline import run_proof
from gac.proof.retime import save_run
from tests.proof.test_device import rules_only, tiny_cfg

BASE = {"layer0.attn.k.g0": 25, "layer0.attn.k.g1": 23, "layer0.attn.v.g0": 9, "layer1.mlp": 135}
VARIANT = {"layer0.attn.k.g0": 24, "layer0.attn.k.g1": 24, "layer0.attn.v.g0": 9, "layer1.mlp": 136}


def test_swaps_group_a_projections_head_groups_and_leave_equal_dims_alone():
    builds = swaps(BASE, VARIANT, by="projection", one_out=False)
    assert builds == {
        "+layer0.attn.k": {**BASE, "layer0.attn.k.g0": 24, "layer0.attn.k.g1": 24},
        "+layer1.mlp": {**BASE, "layer1.mlp": 136},
    }


def test_swaps_by_weight_and_one_out():
    builds = swaps(BASE, VARIANT, by="weight", one_out=True)
    assert sorted(builds) == sorted(
        ["+layer0.attn.k.g0", "+layer0.attn.k.g1", "+layer1.mlp", "-layer0.attn.k.g0", "-layer0.attn.k.g1", "-layer1.mlp"]
    )
    assert builds["+layer0.attn.k.g1"] == {**BASE, "layer0.attn.k.g1": 24}
    assert builds["-layer0.attn.k.g1"] == {**VARIANT, "layer0.attn.k.g1": 23}


def test_predicted_delta_counts_only_the_calls_that_differ():
    base = Counter({(1, 25, 4096): 1, (1, 128, 25): 1, (1, 4096, 4096): 2})
    moved = Counter({(1, 24, 4096): 1, (1, 128, 24): 1, (1, 4096, 4096): 2})
    profile = {(1, 25, 4096): 9.0, (1, 128, 25): 3.0, (1, 24, 4096): 5.0, (1, 128, 24): 2.5}  # no (1, 4096, 4096): it is common
    assert predicted_delta(moved, base, profile) == pytest.approx((5.0 + 2.5) - (9.0 + 3.0))
    assert predicted_delta(base, base, {}) == 0
    assert predicted_delta(moved, base, {(1, 24, 4096): 5.0}) is None  # a shape the profile lacks


def test_rounds_pair_each_build_with_unaligned_and_the_report_sums_the_one_ins():
    base = {UNALIGNED: 100.0, CONTROL: 101.0, "GAC": 130.0, "+k": 110.0, "+v": 118.0, "-k": 121.0}
    calls = Counter()

    def clock(label):
        def read():
            calls[label] += 1
            return base[label]

        return read

    clocked = clock_rounds({label: clock(label) for label in base}, rounds=4, passes=3)
    assert all(n == 12 for n in calls.values())
    assert clocked.deltas("+k") == [10.0] * 4
    lines = report(clocked, {CONTROL: 0.0, "GAC": 25.0, "+k": 9.0, "+v": None, "-k": 16.0}, {"+k": "g0 25->24"})
    text = "\n".join(lines)
    assert "+k" in text and "+10.0 [+10.0 .. +10.0]   profile     +9.0  g0 25->24" in text
    assert "(profile lacks a shape)" in text  # +v
    assert "(against the variant -9.0)" in text  # -k: 121 against GAC's 130
    assert "one in, summed over 2 groups: +28.0 µs, the variant itself +30.0" in text  # no profile sum: +v lacks one
    assert "the control (the same dims, built again): +1.0 .. +1.0 µs" in text


def test_anatomy_lines_say_where_a_builds_step_time_moved():
    # Two steps each. Unaligned: k, k (2 µs each, 0.5 apart). GAC: k, then a 20 µs wait, then s (3 µs).
    unaligned = step_anatomy([("k", 0, 2), ("k", 2.5, 4.5), ("k", 100, 102), ("k", 102.5, 104.5)], reps=2)
    gac = step_anatomy([("k", 0, 2), ("s", 22, 25), ("k", 100, 102), ("s", 122, 125)], reps=2)
    assert gac is not None and gac.largest_gap == (20.0, "k", "s") and gac.by_name == {"k": 2.0, "s": 3.0}
    lines = anatomy_lines({UNALIGNED: unaligned, "GAC": gac}, {UNALIGNED: 6.0, "GAC": 40.0})
    text = "\n".join(lines)
    assert "span     4.5 = busy     4.0 + waits    0.5" in text and "clock - span    +1.5" in text  # unaligned
    assert "span    25.0 = busy     5.0 + waits   20.0 (longest  20.0: k -> s); clock - span   +15.0" in text
    assert "against unaligned: span +20.5, busy +1.0, waits +19.5, outside +13.5; by kernel: s +3.0, k -2.0" in text


@pytest.fixture(scope="module")
def tiny_palu_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("swaps") / "run.json"
    save_run(run_proof(tiny_cfg(compressors=("palu",)), log=lambda _m: None, aligner=rules_only), path)
    return path


def test_the_script_clocks_every_swap_of_a_saved_run(tiny_palu_run, capsys):
    main([str(tiny_palu_run), "--method", "palu", "--decode", "--rounds", "2", "--passes", "1", "--one-out", "--traced"])
    out = capsys.readouterr().out
    assert "round-to-8's dims swapped into unaligned, by projection" in out
    rows = [ln for ln in out.splitlines() if re.search(r"µs +[+-][\d.]+ \[", ln)]  # the clocked rows (not the steps' anatomy)
    plus = [ln.split()[0] for ln in rows if ln.strip().startswith("+layer")]
    minus = [ln.split()[0] for ln in rows if ln.strip().startswith("-layer")]
    assert plus and [p[1:] for p in plus] == [m[1:] for m in minus]  # every group swapped in and out (twice: --traced)
    assert all(".attn." in p and ".g" not in p for p in plus)  # by projection: head groups together
    assert out.count(f"one in, summed over {len(plus) // 2} groups") == 2 and out.count("the control") == 2
    assert "clocked under torch.profiler's device trace" in out
    ops = re.search(r"unaligned's step runs (\d+) GEMM ops", out)
    assert ops and int(ops.group(1)) > 0
    assert all("+0 kernels" in ln for ln in rows if ln.strip().startswith(("+layer", "-layer")))  # a rank keeps its pair's two GEMMs
    # Where each build's step goes: one line per build, the span its kernels' busy time plus the waits.
    anatomy = out[out.index("where each build's step goes") :].splitlines()[1:]
    spans = [re.search(r"span +([\d.]+) = busy +([\d.]+) \+ waits +([\d.]+)", ln) for ln in anatomy if "= busy" in ln]
    assert len(spans) == len(rows) // 2 + 1  # every build, unaligned included (its row has no profile column)
    for m in spans:
        span, busy, waits = (float(g) for g in m.groups())
        assert 0 < span <= busy + waits + 0.15  # one step's figures; equal where no two kernels overlap (aten ops can nest)
    assert sum("against unaligned: span" in ln for ln in anatomy) == len(spans) - 1
