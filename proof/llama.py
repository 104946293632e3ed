"""A compact Llama-style decoder in plain torch, for prefill and decode timing.

RMSNorm, rotary position embeddings, grouped-query attention with a KV cache and a
SwiGLU MLP, as in Llama 2/3. As in bert.py, every projection may be dense or a
low-rank pair and each layer's MLP width is its own, so a compressor can give
every weight its own dim.

No trained weights of such a model can be had on this machine (no hub access), so
the weights are random (seeded). Each projection gets a decaying singular spectrum
with its own slope, as trained projections have, so low rank keeps something and
ASVD's allocation differs per weight; quality figures of this model are
reconstruction errors against the uncompressed random model, never accuracy.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

ATTN = ("q", "k", "v", "o")
MLP = ("gate", "up", "down")


@dataclass(frozen=True)
class LlamaConfig:
    """Default: the proof's decoder (see PROOF_LLAMA)."""

    vocab_size: int = 8192
    hidden: int = 1024
    intermediate: int = 2816
    heads: int = 16
    kv_heads: int = 4
    layers: int = 4
    max_positions: int = 1024
    rope_theta: float = 10_000.0
    eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def to_dict(self) -> dict:
        return asdict(self)


# The proof's size. hidden 1024 with 16 heads of 64 and 4 KV heads (GQA 4:1 as in
# Llama 3), intermediate 2816 (Llama's 8/3 * hidden rounded up to 256), 4 layers:
# 45M parameters in the blocks. Prefill at S = 128..512 is 12-46 GFLOP of GEMMs
# (attention scores are under 5 % of that at S = 512), i.e. about 0.1-0.5 s on one
# AMX-BF16 core in bfloat16; decode reads the 90 MB of bf16 block weights per token.
# The 8,192-entry vocabulary keeps embedding and LM head (8.4M params each, never
# compressed) from dominating; prefill computes logits for the last position only.
PROOF_LLAMA = LlamaConfig()


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def rope_tables(cfg: LlamaConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of shape (max_positions, head_dim), halves repeated (the rotate-half layout)."""
    d = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = torch.outer(torch.arange(cfg.max_positions, dtype=torch.float64), inv)
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos().float(), ang.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (b, heads, s, head_dim); cos/sin: (s, head_dim)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


class KVCache:
    """Per layer, preallocated keys and values (b, kv_heads, max_len, head_dim)."""

    def __init__(self, cfg: LlamaConfig, batch: int, max_len: int, dtype: torch.dtype) -> None:
        shape = (batch, cfg.kv_heads, max_len, cfg.head_dim)
        self.k = [torch.zeros(shape, dtype=dtype) for _ in range(cfg.layers)]
        self.v = [torch.zeros(shape, dtype=dtype) for _ in range(cfg.layers)]

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor, pos: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Write positions pos..pos+s and return keys/values of positions 0..pos+s."""
        end = pos + k.shape[2]
        self.k[layer][:, :, pos:end] = k
        self.v[layer][:, :, pos:end] = v
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig, index: int) -> None:
        super().__init__()
        h, hd = cfg.hidden, cfg.head_dim
        self.index, self.heads, self.kv_heads, self.head_dim = index, cfg.heads, cfg.kv_heads, hd
        self.linears = nn.ModuleDict({
            "q": nn.Linear(h, cfg.heads * hd, bias=False),
            "k": nn.Linear(h, cfg.kv_heads * hd, bias=False),
            "v": nn.Linear(h, cfg.kv_heads * hd, bias=False),
            "o": nn.Linear(cfg.heads * hd, h, bias=False),
        })

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache | None, pos: int) -> torch.Tensor:
        b, s, _ = x.shape
        lin = self.linears
        q = lin["q"](x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = lin["k"](x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = lin["v"](x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.update(self.index, k, v, pos)
        mask, causal = None, False
        if pos == 0:
            causal = s > 1
        elif s > 1:  # a chunk after a prefix: query i sees keys 0..pos+i
            mask = torch.ones(s, pos + s, dtype=torch.bool).tril(diagonal=pos)
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=True)
        return lin["o"](ctx.transpose(1, 2).reshape(b, s, self.heads * self.head_dim))


class Block(nn.Module):
    def __init__(self, cfg: LlamaConfig, index: int, mlp_width: int | None = None) -> None:
        super().__init__()
        width = mlp_width or cfg.intermediate
        self.attn_norm = RMSNorm(cfg.hidden, cfg.eps)
        self.attn = Attention(cfg, index)
        self.mlp_norm = RMSNorm(cfg.hidden, cfg.eps)
        self.mlp = nn.ModuleDict({
            "gate": nn.Linear(cfg.hidden, width, bias=False),
            "up": nn.Linear(cfg.hidden, width, bias=False),
            "down": nn.Linear(width, cfg.hidden, bias=False),
        })

    @property
    def mlp_width(self) -> int:
        return self.mlp["gate"].out_features

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache | None, pos: int) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin, cache, pos)
        h = self.mlp_norm(x)
        m = self.mlp
        return x + m["down"](F.silu(m["gate"](h)) * m["up"](h))


class LlamaDecoder(nn.Module):
    mlp_gated = True

    def __init__(self, cfg: LlamaConfig, mlp_widths: Sequence[int] | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        widths = list(mlp_widths) if mlp_widths is not None else [cfg.intermediate] * cfg.layers
        if len(widths) != cfg.layers:
            raise ValueError(f"mlp_widths has {len(widths)} entries for {cfg.layers} layers")
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden)
        self.layers = nn.ModuleList(Block(cfg, i, w) for i, w in enumerate(widths))
        self.norm = RMSNorm(cfg.hidden, cfg.eps)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab_size, bias=False)
        cos, sin = rope_tables(cfg)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, ids: torch.Tensor, cache: KVCache | None = None, pos: int = 0, last_only: bool = False) -> torch.Tensor:
        """Logits (b, s, vocab) for tokens at positions pos..pos+s (pos > 0 needs the cache of 0..pos)."""
        s = ids.shape[1]
        if pos > 0 and cache is None:
            raise ValueError("positions after 0 need the KV cache of the earlier ones")
        cos, sin = self.cos[pos:pos + s], self.sin[pos:pos + s]
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x, cos, sin, cache, pos)
        if last_only:
            x = x[:, -1:]
        return self.lm_head(self.norm(x))

    def new_cache(self, batch: int, max_len: int) -> KVCache:
        return KVCache(self.cfg, batch, max_len, self.embed.weight.dtype)

    # ---- structure, for compressors and reports (same interface as BertEncoder)

    def named_linears(self) -> Iterator[tuple[str, nn.Module]]:
        for i, layer in enumerate(self.layers):
            for n in ATTN:
                yield f"layer{i}.attn.{n}", layer.attn.linears[n]
            for n in MLP:
                yield f"layer{i}.mlp.{n}", layer.mlp[n]

    def get_linear(self, name: str) -> nn.Module:
        layer_s, part, which = name.split(".")
        layer = self.layers[int(layer_s.removeprefix("layer"))]
        return layer.attn.linears[which] if part == "attn" else layer.mlp[which]

    def set_linear(self, name: str, module: nn.Module) -> None:
        layer_s, part, which = name.split(".")
        layer = self.layers[int(layer_s.removeprefix("layer"))]
        (layer.attn.linears if part == "attn" else layer.mlp)[which] = module

    def mlp_down(self, i: int) -> str:
        """The linear whose input is layer i's intermediate activations."""
        return f"layer{i}.mlp.down"

    def mlp_linears(self, i: int) -> list[nn.Module]:
        return [self.layers[i].mlp[n] for n in MLP]

    def with_mlp_neurons(self, keep: Sequence[torch.Tensor]) -> LlamaDecoder:
        """A copy keeping, per layer, the intermediate neurons `keep[i]` (indices, ascending)."""
        model = LlamaDecoder(self.cfg, [len(k) for k in keep])
        state = self.state_dict()
        for i, k in enumerate(keep):
            p = f"layers.{i}.mlp."
            state[p + "gate.weight"] = state[p + "gate.weight"][k]
            state[p + "up.weight"] = state[p + "up.weight"][k]
            state[p + "down.weight"] = state[p + "down.weight"][:, k]
        model.load_state_dict(state, strict=True)
        return model.eval()

    def param_count(self) -> int:
        return sum(p.numel() for p in self.parameters())


def _spectral(out_f: int, in_f: int, slope: float, g: torch.Generator) -> torch.Tensor:
    """A random out x in matrix with singular values ~ (j + 1)^-slope, scaled so
    ||W||_F^2 = out (the norm of randn / sqrt(in))."""
    r = min(out_f, in_f)
    u, _ = torch.linalg.qr(torch.randn(out_f, r, generator=g))
    v, _ = torch.linalg.qr(torch.randn(in_f, r, generator=g))
    s = (torch.arange(r, dtype=torch.float32) + 1.0) ** -slope
    s *= math.sqrt(out_f) / s.norm()
    return (u * s[None, :]) @ v.T


def random_llama(cfg: LlamaConfig, seed: int = 0) -> LlamaDecoder:
    """The decoder with seeded random weights: each projection with its own spectral slope in [0.3, 1.0]."""
    g = torch.Generator().manual_seed(seed)
    model = LlamaDecoder(cfg)
    with torch.no_grad():
        model.embed.weight.copy_(torch.randn(model.embed.weight.shape, generator=g))
        model.lm_head.weight.copy_(torch.randn(model.lm_head.weight.shape, generator=g) / math.sqrt(cfg.hidden))
        for _, lin in model.named_linears():
            slope = 0.3 + 0.7 * float(torch.rand((), generator=g))
            lin.weight.copy_(_spectral(lin.out_features, lin.in_features, slope, g))
    return model.eval()
