"""Importers on sample files in the compressors' real formats, and `gac import` on good and bad files."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gac.contracts.manifest import Manifest
from gac.solver import AlignOptions, align
from gac.solver.importers import ImportErrorDetail, import_asvd, import_palu, import_width_map, load_importance, load_json
from gac.solver.kinds import unit_params

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
LLAMA = DATA / "llama_config.json"  # tiny: hidden 64, intermediate 172, 4 heads (2 kv) of head_dim 16, 2 layers
QKV = ("q_proj", "k_proj", "v_proj")


def unaligned_params(m: Manifest) -> float:
    """The parameters of the manifest's own dims, counted as the solver counts them."""
    return math.fsum(unit_params(w) * w.dim for w in m.weights)


def write(tmp_path: Path, name: str, doc) -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def gac_import(*args: str | Path):
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """gac"""

    from gac.solver.cli import register

    register(app)
    return CliRunner().invoke(app, ["import", *map(str, args)])


def one_error_line(res, *needles: str) -> str:
    """Exit 2, exactly one line on stderr naming the problem, nothing on stdout, no traceback."""
    assert res.exit_code == 2, (res.exit_code, res.output)
    assert isinstance(res.exception, SystemExit), res.exception  # not an uncaught error
    assert "Traceback" not in res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert res.stdout == ""
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# ---- the importers as a library --------------------------------------------------------------------------


def test_asvd_truncation_ranks():
    cfg = load_json(DATA / "asvd_config.json")
    imp = load_importance(DATA / "asvd_importance.json")
    got = import_asvd(cfg, importance=imp)
    m = got.manifest
    assert got.warnings == []
    assert len(m.weights) == 14 and m.compressor == "asvd" and m.model == "tiny-llama"
    by = {w.name: w for w in m.weights}
    q, k, down = by["model.layers.0.self_attn.q_proj"], by["model.layers.0.self_attn.k_proj"], by["model.layers.1.mlp.down_proj"]
    assert (q.out_features, q.in_features, q.dim) == (64, 64, 27)
    assert (k.out_features, k.in_features) == (32, 64)  # 2 kv heads x head_dim 16
    assert (down.out_features, down.in_features, down.dim) == (64, 172, cfg["truncation_ranks"][down.name])
    assert q.importance == imp["model.layers.0.self_attn.q_proj"]
    # Default budget: the compressor's own parameter count, exactly.
    ranks = cfg["truncation_ranks"]
    assert m.budget.params == sum(ranks[w.name] * (w.out_features + w.in_features) for w in m.weights) == unaligned_params(m)


def test_default_importance_warns():
    got = import_asvd(load_json(DATA / "asvd_config.json"), budget={"ratio": 0.3})
    assert got.manifest.budget.ratio == 0.3
    assert {w.importance for w in got.manifest.weights} == {1.0}
    assert any("importance" in w for w in got.warnings)


def test_palu_head_wise_ranks():
    m = import_palu(load_json(DATA / "palu_config.json")).manifest
    assert len(m.weights) == 8  # 2 layers x (k, v) x 2 head groups
    g = {w.name: w for w in m.weights}["model.layers.1.self_attn.v_proj.g1"]
    assert (g.out_features, g.in_features, g.dim) == (16, 64, 9)
    assert m.budget.params == unaligned_params(m)


def test_errors_name_the_entry(tmp_path):
    cfg = load_json(DATA / "asvd_config.json")
    with pytest.raises(ImportErrorDetail, match="lm_head"):
        import_asvd({**cfg, "truncation_ranks": {"lm_head": 3}})
    with pytest.raises(ImportErrorDetail, match="truncation_ranks"):
        import_asvd({k: v for k, v in cfg.items() if k != "truncation_ranks"})
    with pytest.raises(ImportErrorDetail, match="has no score"):
        import_asvd(cfg, importance={"model.layers.0.self_attn.q_proj": 1.0})
    with pytest.raises(ImportErrorDetail, match="-1"):
        import_asvd({**cfg, "truncation_ranks": {"model.layers.0.self_attn.q_proj": -1}})
    bad = tmp_path / "imp.json"
    bad.write_text(json.dumps({"a": "high"}))
    with pytest.raises(ImportErrorDetail, match="importance"):
        load_importance(bad)


def test_a_file_that_starts_with_a_byte_order_mark_reads_as_its_document(tmp_path):
    """Some editors save UTF-8 with a BOM: it is not the document's first character."""
    saved = tmp_path / "m.json"
    saved.write_bytes(b"\xef\xbb\xbf" + json.dumps({"model": "m"}).encode())
    assert load_json(saved) == {"model": "m"}


# ---- structure: what the old importers got wrong ---------------------------------------------------------


def test_gate_and_up_share_one_width():
    """gate and up multiply elementwise (and down_proj reads their product): one weight, one dim per layer.
    Before: one linear_out weight each, aligned independently (e.g. 11824 vs 10704)."""
    widths = {f"model.layers.{i}.mlp.{p}": 150 - 10 * i for i in range(2) for p in ("gate_proj", "up_proj")}
    m = import_width_map(widths, load_json(LLAMA)).manifest
    assert [(w.name, w.kind, w.dim, w.hidden, w.full, w.gated) for w in m.weights] == [
        ("model.layers.0.mlp", "mlp_width", 150, 64, 172, True),
        ("model.layers.1.mlp", "mlp_width", 140, 64, 172, True),
    ]
    assert m.budget.params == 3 * 64 * (150 + 140) == unaligned_params(m)
    res = align(m, None, AlignOptions(cross_check="none", baselines=False))
    assert len(res.weights) == 2  # one aligned width per layer, shared by gate, up and down


def test_gate_and_up_must_agree():
    widths = {"model.layers.0.mlp.gate_proj": 150, "model.layers.0.mlp.up_proj": 144}
    with pytest.raises(ImportErrorDetail, match=r"up_proj: width 144 differs from .*gate_proj's 150.*one width"):
        import_width_map(widths, load_json(LLAMA))


def test_head_pruned_widths_are_whole_heads():
    """The shipped sample keeps q_proj at 53, not a multiple of head_dim 16: refused (before: accepted)."""
    with pytest.raises(ImportErrorDetail, match=r"q_proj: width 53 is not a whole number of heads \(head_dim 16\)"):
        import_width_map(load_json(DATA / "llmpruner_widths.json"), load_json(LLAMA))
    # Whole heads are accepted; the manifest has no head-count weight, so they stay outside it (and its budget).
    widths = {"model.layers.0.mlp": 150, "model.layers.0.self_attn.q_proj": 32, "model.layers.0.self_attn.k_proj": 16,
              "model.layers.0.self_attn.v_proj": 16}  # fmt: skip
    got = import_width_map(widths, load_json(LLAMA))
    assert [w.name for w in got.manifest.weights] == ["model.layers.0.mlp"]
    assert got.manifest.budget.params == 3 * 64 * 150
    assert any("whole heads of 16" in n and "outside the manifest" in n for n in got.notes)
    with pytest.raises(ImportErrorDetail, match="k_proj keeps 1 heads but v_proj 2"):
        import_width_map({**widths, "model.layers.0.self_attn.v_proj": 32}, load_json(LLAMA))


def test_o_proj_does_not_prune_the_hidden_size():
    """o_proj's output is the hidden size (never pruned), its input follows the heads: no weight of its own.
    Before: an o_proj entry became a linear_out weight pruning the hidden size."""
    cfg = load_json(LLAMA)
    base = {"model.layers.0.mlp": 150, "model.layers.0.self_attn.q_proj": 48}
    for o_width in (64, 48):  # the hidden size, or q_proj's heads: both consistent, neither a weight
        m = import_width_map({**base, "model.layers.0.self_attn.o_proj": o_width}, cfg).manifest
        assert [w.name for w in m.weights] == ["model.layers.0.mlp"] and m.budget.params == 3 * 64 * 150
    with pytest.raises(ImportErrorDetail, match=r"o_proj: width 50: its output is the hidden size 64, which width pruning does not change"):
        import_width_map({**base, "model.layers.0.self_attn.o_proj": 50}, cfg)
    with pytest.raises(ImportErrorDetail, match="down_proj: width 100: its output is the hidden size 64"):
        import_width_map({**base, "model.layers.0.mlp.down_proj": 100}, cfg)


def test_rank_above_min_out_in_is_an_error():
    """k_proj is 32 x 64: rank 3000 is more than the matrix has (before: a pydantic error, not the importer's)."""
    cfg = load_json(DATA / "asvd_config.json")
    with pytest.raises(ImportErrorDetail, match=r"k_proj: rank 3000 is above min\(out, in\) = 32"):
        import_asvd({**cfg, "truncation_ranks": {"model.layers.0.self_attn.k_proj": 3000}})
    with pytest.raises(ImportErrorDetail, match=r"g0: rank 17 is above min\(out, in\) = 16"):
        import_palu({**cfg, "head_wise_ranks": {"model.layers.0.self_attn.k_proj": [17, 3]}})


def test_non_integer_rank_is_an_error():
    cfg = load_json(DATA / "asvd_config.json")
    with pytest.raises(ImportErrorDetail, match="q_proj: rank must be a whole number, not 12.5"):
        import_asvd({**cfg, "truncation_ranks": {"model.layers.0.self_attn.q_proj": 12.5}})


def test_misspelled_importance_keys_are_named():
    """Before: a key naming no weight was silently ignored."""
    cfg = load_json(DATA / "asvd_config.json")
    imp = {**load_importance(DATA / "asvd_importance.json"), "model.layers.0.self_attn.qproj": 9.0}
    with pytest.raises(ImportErrorDetail, match=r"'model.layers.0.self_attn.qproj' \(did you mean 'model.layers.0.self_attn.q_proj'\?\)"):
        import_asvd(cfg, importance=imp)
    widths = {"model.layers.0.mlp": 150}
    with pytest.raises(ImportErrorDetail, match="'model.layers.0.mpl'"):
        import_width_map(widths, load_json(LLAMA), importance={"model.layers.0.mpl": 1.0})
    # a block may be scored by its own name or by its projections (their mean)
    importance = {"model.layers.0.mlp.gate_proj": 1.0, "model.layers.0.mlp.up_proj": 2.0}
    m = import_width_map(widths, load_json(LLAMA), importance=importance).manifest
    assert m.weights[0].importance == 1.5


# ---- `gac import`: one clear line and exit 2 for every bad file ------------------------------------------

ASVD_CFG = json.loads((DATA / "asvd_config.json").read_text())


def _asvd_ranks(**ranks) -> dict:
    return {**ASVD_CFG, "truncation_ranks": {f"model.layers.0.self_attn.{k}": v for k, v in ranks.items()}}


BAD = {
    # name: (compressor, file content, extra files {option: content}, what the line must say)
    "malformed JSON": ("asvd", '{"hidden_size": 64,', {}, ["is not valid JSON", "line 1"]),
    "top level not an object": ("asvd", "[1, 2]", {}, ["expected a JSON object at the top level, got an array"]),
    "no layers": ("asvd", {k: v for k, v in ASVD_CFG.items() if k != "truncation_ranks"}, {}, ["no 'truncation_ranks' map"]),
    "empty layers": ("asvd", {**ASVD_CFG, "truncation_ranks": {}}, {}, ["'truncation_ranks' must be a non-empty"]),
    "layer the model lacks": (
        "asvd",
        {**ASVD_CFG, "truncation_ranks": {"model.layers.7.self_attn.q_proj": 8}},
        {},
        ["model.layers.7.self_attn.q_proj: layer 7 does not exist: the model has 2 layers"],
    ),
    "rank above min(out, in)": ("asvd", _asvd_ranks(k_proj=3000), {}, ["rank 3000 is above min(out, in) = 32"]),
    "non-integer rank": ("asvd", _asvd_ranks(q_proj=12.5), {}, ["q_proj: rank must be a whole number, not 12.5"]),
    "rank as a string": ("asvd", _asvd_ranks(q_proj="12"), {}, ["q_proj: rank must be a whole number, not '12'"]),
    "zero rank": ("asvd", _asvd_ranks(q_proj=0), {}, ["q_proj: rank must be at least 1, not 0"]),
    "unknown projection": ("asvd", {**ASVD_CFG, "truncation_ranks": {"lm_head": 3}}, {}, ["lm_head: unknown projection"]),
    "duplicate module": (
        "asvd",
        '{"hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 172, '
        '"truncation_ranks": {"model.layers.0.self_attn.q_proj": 8, "model.layers.0.self_attn.q_proj": 9}}',
        {},
        ["key 'model.layers.0.self_attn.q_proj' appears twice"],
    ),
    "config not numeric": ("asvd", {**ASVD_CFG, "hidden_size": "64"}, {}, ["'hidden_size' must be a whole number"]),
    "misspelled importance key": (
        "asvd",
        ASVD_CFG,
        {"--importance": {**json.loads((DATA / "asvd_importance.json").read_text()), "model.layers.9.mlp.up": 1}},
        ["'model.layers.9.mlp.up'", "name no weight"],
    ),
    "importance not an object": ("asvd", ASVD_CFG, {"--importance": "[0.5]"}, ["--importance", "expected a JSON object"]),
    "importance not a number": (
        "asvd",
        ASVD_CFG,
        {"--importance": {"model.layers.0.self_attn.q_proj": "high"}},
        ["must be a finite number >= 0"],
    ),
    "palu groups not whole heads": (
        "palu",
        {**ASVD_CFG, "head_wise_ranks": {"model.layers.0.self_attn.k_proj": [3, 3, 3]}},
        {},
        ["do not split into 3 groups of whole heads"],
    ),
    "pruner without --config": ("pruner", {"model.layers.0.mlp": 150}, {}, ["pruner needs --config"]),
    "pruner gate/up disagree": (
        "pruner",
        {"model.layers.0.mlp.gate_proj": 150, "model.layers.0.mlp.up_proj": 144},
        {"--config": LLAMA.read_text()},
        ["must keep one width"],
    ),
    "pruner partial heads": (
        "pruner",
        {"model.layers.0.self_attn.q_proj": 53},
        {"--config": LLAMA.read_text()},
        ["not a whole number of heads"],
    ),
    "pruner o_proj prunes hidden": (
        "pruner",
        {"model.layers.0.mlp": 150, "model.layers.0.self_attn.o_proj": 50},
        {"--config": LLAMA.read_text()},
        ["hidden size 64, which width pruning does not change"],
    ),
    "pruner width above full": (
        "pruner",
        {"model.layers.0.mlp": 200},
        {"--config": LLAMA.read_text()},
        ["width 200 is above the original intermediate size 172"],
    ),
    "pruner only heads": ("pruner", {"model.layers.0.self_attn.q_proj": 48}, {"--config": LLAMA.read_text()}, ["nothing to align"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_file_one_line_exit_2(tmp_path, case):
    compressor, content, extra, needles = BAD[case]
    args: list[str | Path] = [compressor, write(tmp_path, "in.json", content), "-o", tmp_path / "m.json"]
    for option, doc in extra.items():
        args += [option, write(tmp_path, option.strip("-") + ".json", doc)]
    one_error_line(gac_import(*args), *needles)
    assert not (tmp_path / "m.json").exists()


def test_missing_file_one_line(tmp_path):
    one_error_line(gac_import("asvd", tmp_path / "nope.json", "-o", tmp_path / "m.json"), "cannot read file", "nope.json")


def test_import_prints_what_it_assumed(tmp_path):
    out = tmp_path / "m.json"
    res = gac_import("asvd", DATA / "asvd_config.json", "-o", out)
    assert res.exit_code == 0, res.output
    m = Manifest.model_validate_json(out.read_text())
    assert m.budget.params == unaligned_params(m) and len(m.weights) == 14
    text = res.stdout
    assert "model config: " in text and "hidden 64, intermediate 172, 4 heads (2 key/value) of head_dim 16, 2 layers" in text
    assert "importance: uniform, every weight 1.0" in text
    assert f"budget: {m.budget.params:,} params, the compressor's own (unaligned) dims" in text
    assert "workload: M = 1024 tokens" in text and "float16 (the config's torch_dtype" in text


def test_dash_is_standard_output_and_dtypes_read_as_a_manifest_reads_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = gac_import("asvd", DATA / "asvd_config.json", "-o", "-", "--dtype", "BF16")
    assert res.exit_code == 0, res.output
    assert not (tmp_path / "-").exists()
    assert Manifest.model_validate_json(res.stdout).workload.dtype == "bfloat16"
    assert "a dim may move far from the compressor's; --importance keeps what matters" in res.stderr
    bad = gac_import("asvd", DATA / "asvd_config.json", "--dtype", "int8")
    one_error_line(bad, "--dtype 'int8': choose from bfloat16, float16, float32")


def test_gac_import_is_a_gac_command(tmp_path):
    """Registered in gac/cli.py: `python -m gac import` runs it; a bad file still gives one line and exit 2."""
    ok = subprocess.run([sys.executable, "-m", "gac", "import", "palu", str(DATA / "palu_config.json"), "-o", str(tmp_path / "m.json")],
                        capture_output=True, text=True, timeout=120, cwd=ROOT)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert Manifest.model_validate_json((tmp_path / "m.json").read_text()).compressor == "palu"
    bad = subprocess.run([sys.executable, "-m", "gac", "import", "asvd", str(write(tmp_path, "bad.json", "[]"))],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)  # fmt: skip
    assert bad.returncode == 2 and bad.stdout == "" and len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr


# ---- the shipped examples ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["llama3-8b-asvd-r15.json", "llama3-8b-llmpruner-mlp.json", "cpu-demo-lowrank.json"])
def test_example_budget_is_the_unaligned_params(name):
    """GAC gets exactly the compressor's own parameter count (before: llama3-8b-asvd-r15 gave it 20.7M more,
    a ratio of the original although two ranks had been cut to full rank without redistributing)."""
    m = Manifest.model_validate_json((EXAMPLES / name).read_text())
    assert m.budget.params is not None and m.budget.params == unaligned_params(m)
    if name == "llama3-8b-asvd-r15.json":
        res = align(m, None, AlignOptions(cross_check="none", baselines=False))
        assert res.budget == res.unaligned_params and res.total_params <= res.budget


def test_examples_are_regenerated():
    """The shipped files are what examples/make_examples.py writes."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        import make_examples as mk
    finally:
        sys.path.remove(str(EXAMPLES))
    config, importance = mk.asvd_config()
    for name, doc in (("llama3-8b-asvd-r15.json", mk.asvd_manifest()), ("llama3-8b-llmpruner-mlp.json", mk.mlp_manifest()),
                      ("llama3-8b-asvd-config.json", config), ("llama3-8b-asvd-importance.json", importance)):  # fmt: skip
        assert json.loads((EXAMPLES / name).read_text()) == doc, name


def test_walkthrough_from_the_shipped_asvd_output(tmp_path):
    """README: gac import asvd examples/llama3-8b-asvd-config.json --importance ... -o m.json && gac align m.json"""
    out = tmp_path / "m.json"
    importance = EXAMPLES / "llama3-8b-asvd-importance.json"
    res = gac_import("asvd", EXAMPLES / "llama3-8b-asvd-config.json", "--importance", importance, "-o", out)
    assert res.exit_code == 0, res.output
    m = Manifest.model_validate_json(out.read_text())
    cfg = json.loads((EXAMPLES / "llama3-8b-asvd-config.json").read_text())
    assert m.model == "meta-llama/Meta-Llama-3-8B" and len(m.weights) == len(cfg["truncation_ranks"])
    assert all(w.dim == int(w.dim) and w.dim * (w.out_features + w.in_features) <= w.out_features * w.in_features for w in m.weights)
    assert m.budget.params == unaligned_params(m)
    assert m.workload.dtype.value == "bfloat16"  # the config's torch_dtype
    res = align(m, None, AlignOptions(cross_check="none", baselines=False))
    assert res.total_params <= res.budget and res.aligned_share_after == 1.0


@pytest.mark.parametrize("compressor", ["asvd", "palu", "pruner"])
def test_a_manifest_given_to_import_is_sent_to_align(compressor):
    manifest = EXAMPLES / "cpu-demo-lowrank.json"
    one_error_line(gac_import(compressor, manifest), "already a GAC manifest", f"gac align {manifest}")
