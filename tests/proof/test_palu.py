"""The PaLU-style compressor: one low-rank weight per (layer, K or V, KV head group), ranks within
the budget, built models holding exactly those ranks and still computing the same attention shapes."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gac.proof.bert import LowRankLinear
from gac.proof.compress import compress_palu, compressed_params, manifest_params
from gac.proof.llama import HeadGroups, LlamaConfig, LlamaDecoder, random_llama, split_group
from gac.proof.pipeline import round8_dims
from gac.proof.profile import align_options, dims_of
from gac.proof.subjects import TokenCalibration, random_ids
from gac.solver.align import align, budget_params

# head_dim 32: a group's K (or V) rows are 32 x 128, so ranks 8..25 (its break-even) can differ per group.
PALU_TINY = LlamaConfig(vocab_size=512, hidden=128, intermediate=176, heads=4, kv_heads=2, layers=2, max_positions=128)


@pytest.fixture(scope="module")
def model() -> LlamaDecoder:
    return random_llama(PALU_TINY, seed=4)


@pytest.fixture(scope="module")
def palu(model):
    cal = TokenCalibration(model, random_ids(512, (3, 32), 21), random_ids(512, (2, 16), 22))
    return compress_palu(model, cal, 0.5, [16, 1], "bfloat16", model_name="tiny")


def test_one_lowrank_weight_per_kv_head_of_k_and_v(palu) -> None:
    m, cfg = palu.manifest, PALU_TINY
    expect = [f"layer{i}.attn.{p}.g{g}" for i in range(cfg.layers) for p in ("k", "v") for g in range(cfg.kv_heads)]
    assert [w.name for w in m.weights] == expect and m.compressor == "palu"
    for w in m.weights:
        assert w.kind == "lowrank" and (w.out_features, w.in_features) == (cfg.head_dim, cfg.hidden)
        assert 8 <= w.dim <= (cfg.head_dim * cfg.hidden) // (cfg.head_dim + cfg.hidden)  # at most the break-even rank
        assert w.importance > 0
    assert len(set(palu.dims.values())) > 1, f"ranks per head should differ: {palu.dims}"


def test_ranks_fill_the_kv_budget(palu) -> None:
    m = palu.manifest
    budget = budget_params(m)
    kv_params = PALU_TINY.layers * 2 * PALU_TINY.kv_heads * PALU_TINY.head_dim * PALU_TINY.hidden
    assert budget == kv_params // 2  # rho 0.5 of the K/V projections' parameters
    used = manifest_params(m, palu.dims)
    assert used <= budget and budget - used < PALU_TINY.head_dim + PALU_TINY.hidden  # full up to one rank's params


def test_compressing_leaves_the_base_model_dense(palu, model) -> None:
    for i in range(PALU_TINY.layers):
        for p in ("k", "v"):
            assert type(model.get_linear(f"layer{i}.attn.{p}")) is nn.Linear


def test_built_model_holds_exactly_the_ranks_asked_and_runs(palu, model) -> None:
    m = palu.manifest
    rules = dims_of(align(m, None, align_options(16)))
    ids = random_ids(PALU_TINY.vocab_size, (2, 12), 23)
    for asked in (palu.dims, round8_dims(m), rules):
        built = palu.build(asked)
        assert compressed_params(built, m) == manifest_params(m, asked)
        for w in m.weights:
            proj, group = split_group(w.name)
            assert isinstance(built.get_linear(proj), HeadGroups) and group is not None
            assert isinstance(built.get_linear(w.name), LowRankLinear) and built.get_linear(w.name).rank == asked[w.name]
        assert type(built.get_linear("layer0.attn.q")) is nn.Linear  # only K and V are compressed
        with torch.inference_mode():
            out = built(ids)
        assert out.shape == (2, 12, PALU_TINY.vocab_size) and torch.isfinite(out).all()
    assert manifest_params(m, rules) <= budget_params(m)


def test_full_rank_groups_reproduce_the_dense_projection(palu, model) -> None:
    """Each group's rows in head order: at full rank the split projection is the dense one."""
    full = {w.name: min(w.out_features, w.in_features) for w in palu.manifest.weights}
    built = palu.build(full)
    x = torch.randn(2, 5, PALU_TINY.hidden, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        for p in ("k", "v"):
            name = f"layer1.attn.{p}"
            torch.testing.assert_close(built.get_linear(name)(x), model.get_linear(name)(x), atol=1e-4, rtol=1e-4)
        ids = random_ids(PALU_TINY.vocab_size, (1, 10), 24)
        torch.testing.assert_close(built(ids), model(ids), atol=1e-3, rtol=1e-3)


def test_groups_of_two_kv_heads(model) -> None:
    cal = TokenCalibration(model, random_ids(512, (2, 16), 25), random_ids(512, (1, 16), 26))
    comp = compress_palu(model, cal, 0.5, [16], "float32", heads_per_group=2)
    assert [w.name for w in comp.manifest.weights][:2] == ["layer0.attn.k.g0", "layer0.attn.v.g0"]
    assert all(w.out_features == 2 * PALU_TINY.head_dim for w in comp.manifest.weights)
    with pytest.raises(ValueError, match="must divide"):
        compress_palu(model, cal, 0.5, [16], "float32", heads_per_group=3)
