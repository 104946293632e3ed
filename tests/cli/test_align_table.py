"""`gac align`'s table stays readable for any manifest: at most TABLE_ROWS weights, then how many more."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from gac.commands import align as cmd
from gac.contracts.manifest import Manifest
from gac.solver.align import AlignOptions, align
from gac.solver.kinds import unit_params


def _manifest(weights: int) -> Manifest:
    doc = {
        "schema": "gac.manifest/v1",
        "model": "m",
        "compressor": "asvd",
        "budget": {"ratio": 0.3},
        "workload": {"tokens": [128], "dtype": "float32"},
        "weights": [
            {"name": f"layers.{i}.proj", "kind": "lowrank", "out_features": 512, "in_features": 512, "dim": 100.5 + i, "importance": 1.0}
            for i in range(weights)
        ],
    }
    return Manifest.model_validate(doc)


def _stored(weights: int) -> cmd._Stored:
    result = align(_manifest(weights), None, AlignOptions(cross_check="none", baselines=False))
    return cmd._Stored(result, result.model_dump(mode="json", by_alias=True))


def _printed(stored: cmd._Stored) -> str:
    with cmd.console.capture() as out:
        cmd._print(stored)
    return out.get()


def test_a_long_manifest_lists_the_first_rows_and_counts_the_rest():
    n = cmd.TABLE_ROWS + 7
    text = _printed(_stored(n))
    listed = [i for i in range(n) if f"layers.{i}.proj " in text]
    assert listed == list(range(cmd.TABLE_ROWS))
    assert "… and 7 more weights: --out FILE or --json gives every one" in text


def test_a_short_manifest_lists_every_weight():
    text = _printed(_stored(5))
    assert all(f"layers.{i}.proj " in text for i in range(5)) and "more weights" not in text


SUMMARY_LABELS = (
    "optimized for",
    "predicted",
    "aligned dims",
    "budget",
    "solver",
    "baseline",
    "frontier",
    "missing data",
    "warning",
    "stored as",
)


def test_the_summary_reads_at_80_columns(monkeypatch):
    """Every line fits 80 columns, and a summary row that wraps continues under its text, never at the margin."""
    from gac.solver.lookup import FileLookup
    from tests.solver.synthetic import Measure, curve_rows, gemm_truth, llama_like_manifest, lowrank_curves, measure_fast, platform_rows

    doc = llama_like_manifest(1, hidden=512, seed=3, tokens=128, objective="latency")
    manifest = Manifest.model_validate({"schema": "gac.manifest/v1", **doc})
    rows, _ = platform_rows(lowrank_curves(doc), 32, Measure(seed=3))
    result = align(manifest, FileLookup(rows, "f" * 64), AlignOptions(cross_check="none"))
    for mc in result.missing:  # what --profile-missing would measure (the original model's kernels)
        truth = gemm_truth({**mc.fixed_shape, mc.axis: 1}, mc.axis, 32)
        rows += curve_rows(mc.fixed_shape, mc.axis, measure_fast(truth, mc.dims, Measure(seed=3)))
    result = align(manifest, FileLookup(rows, "f" * 64), AlignOptions(cross_check="none"))
    assert not result.missing
    monkeypatch.setattr(cmd.console, "width", 80)
    text = _printed(cmd._Stored(result, result.model_dump(mode="json", by_alias=True), "0" * 32))
    lines = text.splitlines()
    assert "importance-only GAC" in text and "baseline" in text, text  # the long rows are there
    assert max(len(line) for line in lines) <= 80, text
    at_margin = [line for line in lines[1:] if line and not line[0].isspace()]
    assert at_margin and all(line.startswith(SUMMARY_LABELS) for line in at_margin), text
    assert lines[0].startswith("llama-like on platform ffffffffffffffff") and len(lines[0]) < 80


def test_baselines_read_as_objective_and_importance_kept():
    """Each baseline shows its objective and the importance it keeps as a share of importance-only GAC's, the
    summary's measure, in percent (a ratio of objectives, which are differences, read +99 % for a 0.6 % gap)."""
    result = align(_manifest(6), None, AlignOptions(cross_check="none"))
    assert result.baselines
    text = _printed(cmd._Stored(result, result.model_dump(mode="json", by_alias=True)))
    assert " kept" in text and "vs GAC" not in text
    own = sum(w.importance * unit_params(w) * w.dim for w in _manifest(6).weights)
    for b in result.baselines:
        row = next(line for line in text.splitlines() if line.lstrip().startswith(b.method + " "))
        assert f"{b.objective:,.1f}" in row, row
        if not b.within_budget:
            assert row.rstrip().endswith("-"), row
        else:
            assert row.rstrip().endswith(f"{(own + b.objective) / (own + result.objective):.2%}"), row
    # The columns are explained where they are printed: what the objective sums, what "kept" divides.
    legend = " ".join(line.strip() for line in text.splitlines()[text.splitlines().index(row) + 1 :])
    assert "objective: the solver's" in legend and "importance x parameters gained" in legend
    assert "kept: the importance kept, as a share of what importance-only GAC keeps" in legend


def test_piped_output_is_not_cut_to_80_columns(tmp_path):
    """`gac align m.json | less`: off a terminal, the tables keep their cells whole ("budget", not "budg…")."""
    manifest = Path(__file__).resolve().parents[2] / "examples" / "cpu-demo-lowrank.json"
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | {"GAC_DATA_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "gac", "align", str(manifest)], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "…" not in out.stdout and " budget " in out.stdout and "speed-up" in out.stdout, out.stdout
    assert max(len(line) for line in out.stdout.splitlines()) > 80  # the wide table, on one line each row


def test_at_80_columns_the_names_give_way_and_the_numbers_stay_whole(monkeypatch):
    """Weights of 8B size have 10-digit params and long names: the names are shortened from the left, never a number."""
    weights = [
        {"name": f"model.language_model.layers.{i}.mlp.gate_proj", "kind": "mlp_width", "hidden": 4096, "full": 14336, "dim": 12185.5 - i}
        for i in range(3)
    ]
    doc = {"model": "m", "budget": {"ratio": 0.12}, "workload": {"tokens": [128]}, "weights": [{**w, "importance": 1.0} for w in weights]}
    result = align(Manifest.model_validate(doc), None, AlignOptions(cross_check="none", baselines=False))
    monkeypatch.setattr(cmd.console, "width", 80)
    text = _printed(cmd._Stored(result, result.model_dump(mode="json", by_alias=True)))
    rows = [line for line in text.splitlines() if "gate_proj" in line]
    assert len(rows) == 3 and all(len(line) <= 80 for line in rows), text
    for w, row in zip(result.weights, rows):
        assert f"{w.params:,}" in row and f"{w.dim_before:g}" in row and row.lstrip().startswith("…"), row
    assert "µs before" in text and "µs after" in text, text


def test_the_frontier_objective_prints_its_trade_off():
    """--objective frontier is asked for the trade-off: a table of points (the chosen one marked), not a count."""
    from gac.solver.lookup import FileLookup
    from tests.solver.synthetic import Measure, llama_like_manifest, lowrank_curves, platform_rows

    doc = llama_like_manifest(2, hidden=512, seed=3, tokens=128, objective="frontier")
    manifest = Manifest.model_validate({"schema": "gac.manifest/v1", **doc})
    rows, _ = platform_rows(lowrank_curves(doc), 32, Measure(seed=3))
    result = align(manifest, FileLookup(rows, "f" * 64), AlignOptions(cross_check="none"))
    assert len(result.frontier) >= 3
    text = _printed(cmd._Stored(result, result.model_dump(mode="json", by_alias=True)))
    lines = text.splitlines()
    (chosen,) = [line for line in lines if line.split() and line.split()[0] == "chosen"]
    point = next(p for p in result.frontier if p.chosen)
    assert f"{point.latency_us:,.1f}" in chosen and f"{point.importance_kept:.2%}" in chosen and f"{point.params:,}" in chosen
    shown = min(len(result.frontier), cmd.FRONTIER_ROWS)
    assert sum(1 for line in lines if re.match(r"^\s*(chosen)?\s+[\d,]+\.\d\s", line)) >= shown - 1, text
    assert "Pareto points: each is the fastest keeping its share" in " ".join(text.split())
