"""`make demo`'s alignment on a busy machine: a profile whose points stalled (or were flagged and
left out) never makes the alignment fail. Items whose compressor's dims were not measured fall
back to rule candidates and the result names them; only a budget below the compressor's own dims
is infeasible."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from gac.contracts.measurements import Batch, Measurement, RunInfo
from tests import factories as f
from tests.cli.test_user_mistakes import MANIFEST, assert_clean_failure, gac

# The quick plan's GEMM sweeps at the demo's shapes (M = 256 tokens, 256 x 256 weights): N every 4
# and K every 8 over 56..200, so the compressor's dims (97, 113, ...) are never among them.
SWEEPS = (("n", range(56, 201, 4)), ("k", range(56, 201, 8)))


def stalled_profile(path: Path, stalls: dict[tuple[str, int], float]) -> Path:
    """A 2-core machine's quick-plan GEMMs in bfloat16: a staircase of 64 with some points stalled
    (descheduled timing threads: a median many times too slow, with a huge spread), as a results file."""
    rows = []
    for axis, dims in SWEEPS:
        for d in dims:
            lat = 90.0 * -(-d // 64)
            slow = lat * stalls.get((axis, d), 1.0)
            shape = {"m": 256, "k": 256, "n": d} if axis == "n" else {"m": 256, "n": 256, "k": d}
            rows.append(
                Measurement(
                    id=uuid.uuid4(),
                    op="gemm",
                    dtype="bfloat16",
                    shape=shape,
                    sweep_axis=axis,
                    median_us=slow,
                    p10_us=lat,
                    p90_us=slow * 1.5,
                    mean_us=slow,
                    n=20,
                    timer="cpu-perf-counter",
                )
            )
    batch = Batch(
        id=uuid.uuid4(), platform=f.platform(device_name="busy 2-core"), run=RunInfo(id=uuid.uuid4(), agent="t"), measurements=rows
    )
    path.write_text(batch.model_dump_json(by_alias=True) + "\n")
    return path


def test_the_demos_alignment_on_a_stalled_profile_finishes_and_names_its_rule_items(tmp_path):
    profile = stalled_profile(tmp_path / "busy.jsonl", {("n", 60): 260.0, ("n", 96): 90.0, ("k", 112): 120.0})
    out = gac("align", str(MANIFEST), "--measurements", str(profile), "--objective", "importance", "--json")
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["total_params"] <= res["budget"]
    named = set(res["rule_items"])
    assert named and named <= {w["name"] for w in res["weights"]}
    for w in res["weights"]:
        if w["name"] in named:  # the compressor's own dim, unmeasured, is among its candidates
            assert int(w["dim_before"]) in [c["dim"] for c in w["candidates"]]
    assert any("has not measured" in x for x in res["warnings"]), res["warnings"]
    small = tmp_path / "small.json"
    small.write_text(json.dumps({**json.loads(MANIFEST.read_text()), "budget": {"params": 600_000}}))
    out = gac("align", str(small), "--measurements", str(profile))
    assert_clean_failure(out, f"{small}: budget:", "the compressor's own dims, each rounded down, take 665,600 params")


HOG_PLAN = """
name: demo-gemms
timing: {time_cap_ms: 60, warmup_ms: 2, max_samples: 40}
sweeps:
  - {op: gemm, dtypes: [float32], axis: n, fixed: {m: 256, k: 256}, values: {start: 72, stop: 144, step: 8}}
  - {op: gemm, dtypes: [float32], axis: k, fixed: {m: 256, n: 256}, values: {start: 72, stop: 144, step: 8}}
"""


@pytest.mark.slow
@pytest.mark.serial  # its own CPU hog, and the kernels it times: not beside other tests
def test_the_demos_alignment_finishes_on_a_profile_timed_beside_a_cpu_hog(tmp_path):
    """Real kernels timed with two threads while another process spins on this machine's cores,
    then aligned: whatever the stalls did to the figures, the alignment answers within the budget."""
    (tmp_path / "plan.yaml").write_text(HOG_PLAN)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        out = gac(
            "agent",
            "run",
            "--plan",
            str(tmp_path / "plan.yaml"),
            "--out",
            str(tmp_path / "r.jsonl"),
            "--threads",
            "2",
            "--quiet",
            "--dtype",
            "float32",
        )
    finally:
        hog.kill()
        hog.wait()
    assert out.returncode == 0, out.stderr
    for objective in ("importance", "latency"):
        out = gac(
            "align", str(MANIFEST), "--measurements", str(tmp_path / "r.jsonl"), "--dtype", "float32", "--objective", objective, "--json"
        )
        assert out.returncode == 0, out.stderr
        res = json.loads(out.stdout)
        assert res["total_params"] <= res["budget"]
        assert set(res["rule_items"]) <= {w["name"] for w in res["weights"]}
