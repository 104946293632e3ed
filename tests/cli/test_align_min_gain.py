"""`gac align --min-gain`: the least share of predicted time the latency objective must save to give up importance."""

from __future__ import annotations

import json

from tests.cli.test_user_mistakes import gac
from tests.solver.test_align import _stair_manifest, _staircase_lookup


def test_the_flag_and_the_manifests_field_set_the_gain_worth_some_importance(tmp_path):
    _staircase_lookup(tmp_path)  # writes tmp_path / "stair.jsonl"
    path = tmp_path / "manifest.json"
    path.write_text(_stair_manifest(epsilon=0.06).model_dump_json(by_alias=True, exclude_none=True))
    measured = ("--measurements", str(tmp_path / "stair.jsonl"), "--objective", "latency", "--json")

    def kept(*args: str) -> tuple[float, list[str]]:
        out = gac("align", str(path), *measured, *args)
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        return doc["latency"]["importance_kept"], doc["warnings"]

    traded, _ = kept()  # this staircase's trade saves more than 2 % of the time
    held, said = kept("--min-gain", "0.5")
    assert traded < 1.0 <= held and any("under the 50.0% it must save" in w for w in said)
    path.write_text(_stair_manifest(epsilon=0.06, min_gain=0.5).model_dump_json(by_alias=True, exclude_none=True))
    assert kept()[0] >= 1.0 and kept("--min-gain", "0")[0] == traded  # the flag wins over the manifest
    refused = gac("align", str(path), "--min-gain", "1.5")
    assert refused.returncode == 2 and "--min-gain" in refused.stderr
