"""`gac align`'s table stays readable for any manifest: at most TABLE_ROWS weights, then how many more."""

from __future__ import annotations

from gac.commands import align as cmd
from gac.contracts.manifest import Manifest
from solver.align import AlignOptions, align


def _stored(weights: int) -> dict:
    doc = {
        "schema": "gac.manifest/v1", "model": "m", "compressor": "asvd", "budget": {"ratio": 0.3},
        "workload": {"tokens": [128], "dtype": "float32"},
        "weights": [{"name": f"layers.{i}.proj", "kind": "lowrank", "out_features": 512, "in_features": 512, "dim": 100.5 + i,
                     "importance": 1.0} for i in range(weights)],
    }
    result = align(Manifest.model_validate(doc), None, AlignOptions(cross_check="none", baselines=False))
    return {"id": None, "jobs": [], "result": result.model_dump(mode="json", by_alias=True)}


def _printed(stored: dict) -> str:
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
