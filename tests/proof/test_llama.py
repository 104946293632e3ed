"""The Llama-style decoder: KV-cache decode equals a full forward, compressed variants hold
exactly the dims asked for, aligned variants stay within budget."""

from __future__ import annotations

import pytest
import torch

from gac.proof.compress import compress_asvd, compress_prune, compressed_params, manifest_params
from gac.proof.llama import LlamaConfig, LlamaDecoder, random_llama
from gac.proof.pipeline import ProofConfig, round8_dims
from gac.proof.profile import align_options, dims_of
from gac.proof.subjects import TokenCalibration, random_ids
from gac.solver.align import align, budget_params
from gac.solver.kinds import original_params, unit_params

TINY = LlamaConfig(vocab_size=512, hidden=64, intermediate=176, heads=4, kv_heads=2, layers=3, max_positions=128)


@pytest.fixture(scope="module")
def tiny() -> LlamaDecoder:
    return random_llama(TINY, seed=3)


@pytest.fixture(scope="module")
def calibration(tiny) -> TokenCalibration:
    return TokenCalibration(tiny, random_ids(TINY.vocab_size, (4, 32), 11), random_ids(TINY.vocab_size, (2, 32), 12))


@pytest.fixture(scope="module", params=["asvd", "prune"])
def compression(request, tiny, calibration):
    fn = compress_asvd if request.param == "asvd" else compress_prune
    return fn(tiny, calibration, 0.25, [16, 1], "bfloat16", model_name="tiny")


def decode_matches_full(model: LlamaDecoder) -> None:
    """Prefill 10 tokens into the cache, a chunk of 5, then one token at a time: same logits as one full forward."""
    ids = random_ids(TINY.vocab_size, (2, 24), 5)
    with torch.inference_mode():
        full = model(ids)
        cache = model.new_cache(2, 24)
        parts = [model(ids[:, :10], cache, 0), model(ids[:, 10:15], cache, 10)]
        parts += [model(ids[:, p : p + 1], cache, p) for p in range(15, 24)]
    stepwise = torch.cat(parts, dim=1)
    assert stepwise.shape == full.shape == (2, 24, TINY.vocab_size)
    torch.testing.assert_close(stepwise, full, atol=1e-5, rtol=1e-4)


def test_kv_cache_decode_equals_full_forward(tiny) -> None:
    decode_matches_full(tiny)
    with torch.inference_mode():  # and last_only is the last position of the full forward
        ids = random_ids(TINY.vocab_size, (1, 12), 6)
        torch.testing.assert_close(tiny(ids, last_only=True)[:, 0], tiny(ids)[:, -1])


def test_attention_is_causal(tiny) -> None:
    ids = random_ids(TINY.vocab_size, (1, 16), 7)
    changed = ids.clone()
    changed[0, 10:] = (changed[0, 10:] + 1) % TINY.vocab_size
    with torch.inference_mode():
        a, b = tiny(ids), tiny(changed)
    torch.testing.assert_close(a[:, :10], b[:, :10])
    assert not torch.allclose(a[:, 10:], b[:, 10:])


def test_compressed_variants_have_exactly_the_asked_dims(compression, tiny) -> None:
    m = compression.manifest
    assert m.workload.tokens == [16, 1]
    dims = list(compression.dims.values())
    assert len(set(dims)) > 1 and any(d % 8 for d in dims), f"compressor dims should be irregular: {dims}"
    if compression.method == "prune":
        assert all(w.kind == "mlp_width" and w.gated for w in m.weights)
        assert all(unit_params(w) == 3 * TINY.hidden for w in m.weights)
    rules = dims_of(align(m, None, align_options(16)))
    for asked in (compression.dims, round8_dims(m), rules):
        model = compression.build(asked)
        assert compressed_params(model, m) == manifest_params(m, asked)
        for w in m.weights:
            if w.kind == "lowrank":
                assert model.get_linear(w.name).rank == asked[w.name]
            else:
                layer = model.layers[int(w.name.split(".")[0].removeprefix("layer"))]
                assert layer.mlp_width == asked[w.name]
                assert layer.mlp["up"].out_features == layer.mlp["down"].in_features == asked[w.name]
        # the rest of the model is untouched: only the manifest's weights changed size
        others = model.param_count() - compressed_params(model, m)
        assert others == tiny.param_count() - sum(original_params(w) for w in m.weights)


def test_compressor_within_budget_and_aligned_variant_too(compression) -> None:
    m = compression.manifest
    budget = budget_params(m)
    assert manifest_params(m, compression.dims) <= budget
    res = align(m, None, align_options(16))
    assert res.total_params == manifest_params(m, dims_of(res)) <= res.budget == budget


def test_compressed_variant_decodes_like_it_forwards(compression) -> None:
    decode_matches_full(compression.build())


def test_quality_is_a_reconstruction_error(compression, tiny) -> None:
    from gac.proof.quality import REL_ERR, ReconstructionJudge

    judge = ReconstructionJudge(tiny, random_ids(TINY.vocab_size, (2, 16), 13))
    q0, q = judge(tiny), judge(compression.build())
    assert q0.headline == REL_ERR and not q0.higher_is_better
    assert q0.value == pytest.approx(0.0, abs=1e-6) and q.value > 1e-3


def test_proof_config_times_what_the_manifest_names() -> None:
    cfg = ProofConfig(model="llama", seqs=(128, 512), decode_context=256)
    assert [s.label for s in cfg.settings] == ["S=128", "S=512", "decode@256"]
    assert cfg.gemm_tokens() == [128, 512, 1]  # batch 1: prefill M = S, decode M = 1
    assert ProofConfig().gemm_tokens() == [128, 256, 512] and ProofConfig().context is None
    assert ProofConfig.quick_config(model="llama").gemm_tokens() == [128, 1]


def test_matches_transformers_llama(tiny) -> None:
    """Our decoder against transformers' LlamaForCausalLM with the same weights (when installed)."""
    tr = pytest.importorskip("transformers")
    cfg = tr.LlamaConfig(
        vocab_size=TINY.vocab_size,
        hidden_size=TINY.hidden,
        intermediate_size=TINY.intermediate,
        num_attention_heads=TINY.heads,
        num_key_value_heads=TINY.kv_heads,
        num_hidden_layers=TINY.layers,
        max_position_embeddings=TINY.max_positions,
        rms_norm_eps=TINY.eps,
        rope_theta=TINY.rope_theta,
        tie_word_embeddings=False,
        attention_bias=False,
        mlp_bias=False,
    )
    ref = tr.LlamaForCausalLM(cfg).eval()
    state = {"model.embed_tokens.weight": tiny.embed.weight, "model.norm.weight": tiny.norm.weight, "lm_head.weight": tiny.lm_head.weight}
    for i, layer in enumerate(tiny.layers):
        p = f"model.layers.{i}."
        for n in ("q", "k", "v", "o"):
            state[p + f"self_attn.{n}_proj.weight"] = layer.attn.linears[n].weight
        for n in ("gate", "up", "down"):
            state[p + f"mlp.{n}_proj.weight"] = layer.mlp[n].weight
        state[p + "input_layernorm.weight"] = layer.attn_norm.weight
        state[p + "post_attention_layernorm.weight"] = layer.mlp_norm.weight
    missing, unexpected = ref.load_state_dict(state, strict=False)
    assert not unexpected and all("rotary" in k for k in missing)
    ids = random_ids(TINY.vocab_size, (2, 20), 8)
    with torch.inference_mode():
        torch.testing.assert_close(tiny(ids), ref(ids).logits, atol=1e-4, rtol=1e-4)
