"""Regenerate the example files (deterministic): python examples/make_examples.py

- llama3-8b-asvd-r15.json: Llama-3-8B, ASVD-style low-rank at rho = 15 %, 224 weights
  (32 layers x q,k,v,o,gate,up,down), ranks allocated from importance as ASVD
  does, so they come out irregular (e.g. 1510.5). The budget is the parameter
  count of exactly these dims (sum of (out + in) * dim, as solver/kinds.py counts
  it), so GAC gets no more parameters than the model it is compared with.
- llama3-8b-llmpruner-mlp.json: Llama-3-8B, LLM-Pruner-style MLP width pruning
  of layers 4..29 (the first and last layers kept whole, as LLM-Pruner does).
- llama3-8b-asvd-config.json + llama3-8b-asvd-importance.json: the same ASVD
  allocation in the compressor's own format (a Llama-3-8B config.json with
  whole-number `truncation_ranks`) and its importance scores, the input of
  `gac import asvd` (see README.md).
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
HIDDEN, INTER, LAYERS, KV = 4096, 14336, 32, 1024
PROJ = {  # (out_features, in_features)
    "self_attn.q_proj": (HIDDEN, HIDDEN),
    "self_attn.k_proj": (KV, HIDDEN),
    "self_attn.v_proj": (KV, HIDDEN),
    "self_attn.o_proj": (HIDDEN, HIDDEN),
    "mlp.gate_proj": (INTER, HIDDEN),
    "mlp.up_proj": (INTER, HIDDEN),
    "mlp.down_proj": (HIDDEN, INTER),
}
LLAMA3_8B_CONFIG = {  # meta-llama/Meta-Llama-3-8B config.json
    "_name_or_path": "meta-llama/Meta-Llama-3-8B",
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "hidden_act": "silu",
    "hidden_size": HIDDEN,
    "initializer_range": 0.02,
    "intermediate_size": INTER,
    "max_position_embeddings": 8192,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": LAYERS,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "vocab_size": 128256,
}


def asvd_allocation(rho: float = 0.15, seed: int = 8, dense_cap: bool = False) -> list[tuple[str, int, int, float, float, bool]]:
    """(name, out, in, continuous rank, importance, capped) per projection, keeping 1 - rho of the params.

    Keep ratio ~ score^0.5, scaled to meet the budget; a rank that would pass its cap is
    capped there and the rest rescaled (water-filling), so the capped excess is not lost.
    The cap is full rank min(out, in), or with dense_cap the rank whose factors hold as
    many parameters as the dense matrix, out * in / (out + in): ASVD keeps such a module dense.
    """
    rng = random.Random(seed)
    names, shapes, scores = [], [], []
    for layer in range(LAYERS):
        for proj, shape in PROJ.items():
            names.append(f"model.layers.{layer}.{proj}")
            shapes.append(shape)
            # Early and late layers matter more (as ASVD's sensitivity scan finds).
            depth = 1.0 + 0.6 * math.cos(math.pi * layer / (LAYERS - 1)) ** 2
            scores.append(round(depth * rng.lognormvariate(0.0, 0.35), 4))
    full = [o * i for o, i in shapes]
    budget = (1 - rho) * sum(full)
    raw = [s**0.5 for s in scores]
    cap = [o * i / (o + i) if dense_cap else float(min(o, i)) for o, i in shapes]
    capped: set[int] = set()
    while True:
        left = budget - sum(cap[j] * sum(shapes[j]) for j in capped)
        scale = left / sum(raw[j] * full[j] for j in range(len(full)) if j not in capped)
        over = {j for j in range(len(full)) if j not in capped and raw[j] * scale * full[j] / sum(shapes[j]) > cap[j]}
        if not over:
            break
        capped |= over
    return [
        (n, o, i, cap[j] if j in capped else raw[j] * scale * full[j] / (o + i), s, j in capped)
        for j, (n, (o, i), s) in enumerate(zip(names, shapes, scores))
    ]


def asvd_manifest(rho: float = 0.15, seed: int = 8) -> dict:
    weights = []
    for name, o, i, rank, s, _ in asvd_allocation(rho, seed):
        # Half units: (out + in) is even, so every weight's parameter count is a whole number.
        weights.append({"name": name, "kind": "lowrank", "out_features": o, "in_features": i,
                        "dim": round(2 * rank) / 2, "importance": s})  # fmt: skip
    params = sum(round((w["out_features"] + w["in_features"]) * w["dim"]) for w in weights)
    return {"schema": "gac.manifest/v1", "model": "meta-llama/Meta-Llama-3-8B", "compressor": "asvd",
            "budget": {"params": params}, "workload": {"tokens": [1024], "dtype": "float16"},
            "weights": weights}  # fmt: skip


def asvd_config(rho: float = 0.15, seed: int = 8) -> tuple[dict, dict]:
    """ASVD's own output: the model's config.json with whole-number truncation_ranks; and the scores.

    A module whose factors would not be smaller than the dense matrix stays dense, so it has
    no rank (and no score: an importance key that names no imported weight is an error).
    """
    alloc = [a for a in asvd_allocation(rho, seed, dense_cap=True) if not a[5]]
    ranks = {name: min(round(rank), o * i // (o + i)) for name, o, i, rank, _, _ in alloc}
    return {**LLAMA3_8B_CONFIG, "truncation_ranks": ranks}, {name: s for name, _, _, _, s, _ in alloc}


def mlp_manifest(keep: float = 0.8, seed: int = 3) -> dict:
    rng = random.Random(seed)
    weights = []
    for layer in range(LAYERS):
        pruned = 4 <= layer < 30
        width = round(INTER * keep * rng.uniform(0.9, 1.1)) if pruned else INTER
        width = min(width, INTER)
        weights.append({"name": f"model.layers.{layer}.mlp", "kind": "mlp_width", "hidden": HIDDEN,
                        "full": INTER, "dim": width, "importance": round(rng.lognormvariate(0.0, 0.4), 4)})  # fmt: skip
    params = sum(3 * HIDDEN * w["dim"] for w in weights)
    return {"schema": "gac.manifest/v1", "model": "meta-llama/Meta-Llama-3-8B", "compressor": "llm-pruner",
            "budget": {"params": params}, "workload": {"tokens": [1024], "dtype": "float16"},
            "weights": weights}  # fmt: skip


def main() -> None:
    config, importance = asvd_config()
    docs = (
        ("llama3-8b-asvd-r15.json", asvd_manifest()),
        ("llama3-8b-llmpruner-mlp.json", mlp_manifest()),
        ("llama3-8b-asvd-config.json", config),
        ("llama3-8b-asvd-importance.json", importance),
    )
    for name, doc in docs:
        (HERE / name).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {HERE / name}")


if __name__ == "__main__":
    main()
