"""A compact Llama-style decoder in plain torch, for prefill and decode timing.

RMSNorm, rotary position embeddings, grouped-query attention with a KV cache and a
SwiGLU MLP, as in Llama 2/3. As in bert.py, every projection may be dense or a
low-rank pair and each layer's MLP width is its own, so a compressor can give
every weight its own dim; a projection may also be split per group of heads
(HeadGroups, for PaLU), each group dense or low-rank. Two sizes: the proof's
small decoder (PROOF_LLAMA) and Llama-3-8B's dimensions (LLAMA3_8B).

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
    max_positions: int = 4096
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

# Llama-3-8B's dimensions: hidden 4096, 32 heads and 8 KV heads of 128 (GQA 4:1), SwiGLU 14336,
# RoPE theta 500,000, 8,192 positions. Two of its 32 layers by default (--layers changes it): every
# layer runs the same GEMMs, and the proof compares variants layer for layer. The vocabulary is the
# proof's 8,192 rather than 128,256: embedding and LM head are never compressed, and prefill runs
# the head on the last position only.
LLAMA3_8B = LlamaConfig(
    vocab_size=8192, hidden=4096, intermediate=14336, heads=32, kv_heads=8, layers=2, max_positions=8192, rope_theta=500_000.0
)
LLAMA_CONFIGS = {"llama": PROOF_LLAMA, "llama8b": LLAMA3_8B}  # by the proof's --model name


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

    def __init__(self, cfg: LlamaConfig, batch: int, max_len: int, dtype: torch.dtype, device: torch.device | str = "cpu") -> None:
        shape = (batch, cfg.kv_heads, max_len, cfg.head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.layers)]

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
        self.linears = nn.ModuleDict(
            {
                "q": nn.Linear(h, cfg.heads * hd, bias=False),
                "k": nn.Linear(h, cfg.kv_heads * hd, bias=False),
                "v": nn.Linear(h, cfg.kv_heads * hd, bias=False),
                "o": nn.Linear(cfg.heads * hd, h, bias=False),
            }
        )

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
            mask = torch.ones(s, pos + s, dtype=torch.bool, device=x.device).tril(diagonal=pos)
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=True)
        return lin["o"](ctx.transpose(1, 2).reshape(b, s, self.heads * self.head_dim))


class HeadGroups(nn.Module):
    """One projection computed per group of heads: group i maps the input to its heads' rows of the
    output (a dense slice, or a low-rank pair), and the groups' outputs are concatenated in head order,
    so the attention sees the same (b, s, heads * head_dim) tensor as from the dense projection."""

    def __init__(self, groups: Sequence[nn.Module]) -> None:
        super().__init__()
        self.groups = nn.ModuleList(groups)

    @classmethod
    def split(cls, dense: nn.Linear, rows: int) -> HeadGroups:
        """dense's output rows in consecutive groups of `rows`, each a dense nn.Linear holding a copy of them."""
        if dense.out_features % rows:
            raise ValueError(f"{dense.out_features} output rows do not split into groups of {rows}")
        groups = []
        for start in range(0, dense.out_features, rows):
            lin = nn.Linear(dense.in_features, rows, bias=dense.bias is not None, device=dense.weight.device, dtype=dense.weight.dtype)
            with torch.no_grad():
                lin.weight.copy_(dense.weight[start : start + rows])
                if dense.bias is not None:
                    lin.bias.copy_(dense.bias[start : start + rows])
            groups.append(lin)
        return cls(groups)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([g(x) for g in self.groups], dim=-1)


def split_group(name: str) -> tuple[str, int | None]:
    """'layer0.attn.k.g3' -> ('layer0.attn.k', 3); a projection's own name -> (name, None)."""
    head, _, last = name.rpartition(".")
    if name.count(".") == 3 and last.startswith("g") and last[1:].isdigit():
        return head, int(last[1:])
    return name, None


class Block(nn.Module):
    def __init__(self, cfg: LlamaConfig, index: int, mlp_width: int | None = None) -> None:
        super().__init__()
        width = mlp_width or cfg.intermediate
        self.attn_norm = RMSNorm(cfg.hidden, cfg.eps)
        self.attn = Attention(cfg, index)
        self.mlp_norm = RMSNorm(cfg.hidden, cfg.eps)
        self.mlp = nn.ModuleDict(
            {
                "gate": nn.Linear(cfg.hidden, width, bias=False),
                "up": nn.Linear(cfg.hidden, width, bias=False),
                "down": nn.Linear(width, cfg.hidden, bias=False),
            }
        )

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
        cos, sin = self.cos[pos : pos + s], self.sin[pos : pos + s]
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x, cos, sin, cache, pos)
        if last_only:
            x = x[:, -1:]
        return self.lm_head(self.norm(x))

    def new_cache(self, batch: int, max_len: int) -> KVCache:
        return KVCache(self.cfg, batch, max_len, self.embed.weight.dtype, self.embed.weight.device)

    # ---- structure, for compressors and reports (same interface as BertEncoder)

    def named_linears(self) -> Iterator[tuple[str, nn.Module]]:
        for i, layer in enumerate(self.layers):
            for n in ATTN:
                yield f"layer{i}.attn.{n}", layer.attn.linears[n]
            for n in MLP:
                yield f"layer{i}.mlp.{n}", layer.mlp[n]

    def get_linear(self, name: str) -> nn.Module:
        """A projection by name, or one head group of a split projection ('layer0.attn.k.g3')."""
        proj, group = split_group(name)
        layer_s, part, which = proj.split(".")
        layer = self.layers[int(layer_s.removeprefix("layer"))]
        mod = layer.attn.linears[which] if part == "attn" else layer.mlp[which]
        return mod if group is None else _groups_of(mod, proj)[group]

    def set_linear(self, name: str, module: nn.Module) -> None:
        proj, group = split_group(name)
        layer_s, part, which = proj.split(".")
        layer = self.layers[int(layer_s.removeprefix("layer"))]
        holder = layer.attn.linears if part == "attn" else layer.mlp
        if group is None:
            holder[which] = module
        else:
            _groups_of(holder[which], proj)[group] = module

    def kv_linears(self) -> list[str]:
        """The key and value projections of every layer (what PaLU compresses)."""
        return [f"layer{i}.attn.{n}" for i in range(len(self.layers)) for n in ("k", "v")]

    def mlp_down(self, i: int) -> str:
        """The linear whose input is layer i's intermediate activations."""
        return f"layer{i}.mlp.down"

    def mlp_linears(self, i: int) -> list[nn.Module]:
        return [self.layers[i].mlp[n] for n in MLP]

    def with_mlp_neurons(self, keep: Sequence[torch.Tensor]) -> LlamaDecoder:
        """A copy keeping, per layer, the intermediate neurons `keep[i]` (indices, ascending)."""
        with torch.device(self.embed.weight.device):
            model = LlamaDecoder(self.cfg, [len(k) for k in keep])
        state = self.state_dict()
        for i, k in enumerate(keep):
            p = f"layers.{i}.mlp."
            k = k.to(state[p + "gate.weight"].device)
            state[p + "gate.weight"] = state[p + "gate.weight"][k]
            state[p + "up.weight"] = state[p + "up.weight"][k]
            state[p + "down.weight"] = state[p + "down.weight"][:, k]
        model.load_state_dict(state, strict=True)
        return model.eval()

    def param_count(self) -> int:
        return sum(p.numel() for p in self.parameters())


def _groups_of(mod: object, proj: str) -> nn.ModuleList:
    if not isinstance(mod, HeadGroups):
        raise KeyError(f"{proj} is not split into head groups")
    return mod.groups


def _spectral(out_f: int, in_f: int, slope: float, g: torch.Generator, device: torch.device | str = "cpu") -> torch.Tensor:
    """A random out x in matrix with singular values ~ (j + 1)^-slope, scaled so
    ||W||_F^2 = out (the norm of randn / sqrt(in)). The random numbers come from the CPU
    generator (the same on every device); the QR runs on `device`."""
    r = min(out_f, in_f)
    u, _ = torch.linalg.qr(torch.randn(out_f, r, generator=g).to(device))
    v, _ = torch.linalg.qr(torch.randn(in_f, r, generator=g).to(device))
    s = (torch.arange(r, dtype=torch.float32, device=device) + 1.0) ** -slope
    s *= math.sqrt(out_f) / s.norm()
    return (u * s[None, :]) @ v.T


def random_llama(cfg: LlamaConfig, seed: int = 0, device: torch.device | str = "cpu") -> LlamaDecoder:
    """The decoder with seeded random weights, built on `device`: each projection with its own spectral slope in [0.3, 1.0]."""
    g = torch.Generator().manual_seed(seed)
    with torch.device(device):
        model = LlamaDecoder(cfg)
    with torch.no_grad():
        model.embed.weight.copy_(torch.randn(model.embed.weight.shape, generator=g))
        model.lm_head.weight.copy_(torch.randn(model.lm_head.weight.shape, generator=g) / math.sqrt(cfg.hidden))
        for _, lin in model.named_linears():
            slope = 0.3 + 0.7 * float(torch.rand((), generator=g))
            lin.weight.copy_(_spectral(lin.out_features, lin.in_features, slope, g, device))
    return model.eval()
