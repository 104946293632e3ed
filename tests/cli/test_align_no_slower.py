"""`gac align --no-slower`: the flag, the manifest's field, and the per-token-count line on the terminal."""

from __future__ import annotations

import json

from tests.cli.test_user_mistakes import gac
from tests.solver.test_no_slower import prefill_fast_decode_slow, setup


def test_the_flag_holds_decode_and_the_terminal_shows_each_token_count(tmp_path):
    manifest, *_ = setup(tmp_path, prefill_fast_decode_slow)  # writes the measurements to tmp_path / "m.jsonl"
    path = tmp_path / "manifest.json"
    path.write_text(manifest.model_dump_json(by_alias=True, exclude_none=True))
    measured = ("--measurements", str(tmp_path / "m.jsonl"), "--objective", "latency")

    free = gac("align", str(path), *measured)
    assert free.returncode == 0, free.stderr
    said = " ".join(free.stdout.split())  # the summary wraps at the terminal's width
    assert "per token count: M=64: 1.200x, M=1: 0.744x slower (--no-slower: none slower)" in said, free.stdout

    held = gac("align", str(path), *measured, "--no-slower", "--json")
    assert held.returncode == 0, held.stderr
    res = json.loads(held.stdout)
    assert res["no_slower"] and all(t["aligned_us"] <= t["unaligned_us"] for t in res["latency"]["by_tokens"])

    # The manifest's own field asks the same; --slower-allowed overrides it.
    path.write_text(manifest.model_copy(update={"no_slower": True}).model_dump_json(by_alias=True, exclude_none=True))
    from_field = json.loads(gac("align", str(path), *measured, "--json").stdout)
    assert from_field["no_slower"] and [w["dim"] for w in from_field["weights"]] == [w["dim"] for w in res["weights"]]
    overridden = json.loads(gac("align", str(path), *measured, "--slower-allowed", "--json").stdout)
    assert not overridden["no_slower"]
