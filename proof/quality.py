"""Quality figures of a compressed model against the original, in float32 (compression
error, not the rounding of the dtype it is timed in).

The trained encoder (QualityJudge), on sentences shipped in the repo:
- mean cosine: between the compressed and the original model's embedding of each
  evaluation sentence (1.0 = identical embeddings);
- ranking agreement (STS-style): Spearman correlation between the two models'
  cosine similarities over all pairs of the first `pairs_of` sentences, i.e. how
  well the compressed model preserves which sentences are close to which.

The random-weight decoder (ReconstructionJudge), on seeded random token ids: the
relative output error ||logits - logits_orig||_F / ||logits_orig||_F (0 = identical)
and the mean cosine of each position's logits to the original's. These are
reconstruction errors of a model with random weights, not accuracy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from gac.proof.bert import BertEncoder, Tokenizer, embed_sentences

DATA = Path(__file__).resolve().parent / "data" / "sentences.txt"
N_CALIBRATION = 64  # the first sentences calibrate the compressors; the rest evaluate


def load_sentences(path: str | Path = DATA) -> list[str]:
    return [line.strip() for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def split_sentences(sentences: Sequence[str], n_calibration: int = N_CALIBRATION) -> tuple[list[str], list[str]]:
    """(calibration, evaluation): disjoint, fixed."""
    return list(sentences[:n_calibration]), list(sentences[n_calibration:])


def spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    """Spearman rank correlation of two 1-D tensors (ties are negligible for float similarities)."""
    ra = torch.argsort(torch.argsort(a)).double()
    rb = torch.argsort(torch.argsort(b)).double()
    ra, rb = ra - ra.mean(), rb - rb.mean()
    return float((ra * rb).sum() / (ra.norm() * rb.norm()))


def pair_similarities(emb: torch.Tensor) -> torch.Tensor:
    sims = emb @ emb.T
    i, j = torch.triu_indices(len(emb), len(emb), offset=1)
    return sims[i, j]


@dataclass(frozen=True)
class Quality:
    """One variant's figures against the original; `headline` names the one the target checks."""

    figures: dict[str, float]  # table label -> value, in table order
    headline: str
    higher_is_better: bool

    @property
    def value(self) -> float:
        return self.figures[self.headline]

    def relative_change(self, baseline: Quality) -> float:
        """(self - baseline) / |baseline| of the headline figure."""
        return (self.value - baseline.value) / abs(baseline.value) if baseline.value else 0.0

    def no_worse_than(self, baseline: Quality, tolerance: float = 0.01) -> bool:
        """Headline at most `tolerance` (relative) worse than the baseline's."""
        change = self.relative_change(baseline)
        return change >= -tolerance if self.higher_is_better else change <= tolerance


MEAN_COS, MIN_COS, RANK_AGR = "mean cos", "min cos", "rank agr"
REL_ERR, LOGIT_COS = "rel err", "logit cos"


class QualityJudge:
    """Embeds the evaluation sentences with the original once, then scores any variant against it."""

    def __init__(self, original: BertEncoder, tok: Tokenizer, sentences: Sequence[str], pairs_of: int = 120) -> None:
        self.tok = tok
        self.sentences = list(sentences)
        self.pairs_of = min(pairs_of, len(self.sentences))
        self.reference = embed_sentences(original, tok, self.sentences)
        self.ref_pairs = pair_similarities(self.reference[: self.pairs_of])

    def __call__(self, model: BertEncoder) -> Quality:
        emb = embed_sentences(model, self.tok, self.sentences)
        cos = (emb * self.reference).sum(-1)
        figures = {
            MEAN_COS: float(cos.mean()),
            MIN_COS: float(cos.min()),
            RANK_AGR: spearman(pair_similarities(emb[: self.pairs_of]), self.ref_pairs),
        }
        return Quality(figures, MEAN_COS, higher_is_better=True)


def relative_error(out: torch.Tensor, reference: torch.Tensor) -> float:
    return float((out.float() - reference).norm() / reference.norm())


class ReconstructionJudge:
    """Logits of the original on fixed random token ids (n, length), once; any variant scored against them."""

    def __init__(self, original: torch.nn.Module, ids: torch.Tensor) -> None:
        self.ids = ids
        with torch.inference_mode():
            self.reference = original(ids).float()

    def __call__(self, model: torch.nn.Module) -> Quality:
        with torch.inference_mode():
            out = model(self.ids).float()
        cos = torch.nn.functional.cosine_similarity(out, self.reference, dim=-1)
        figures = {REL_ERR: relative_error(out, self.reference), LOGIT_COS: float(cos.mean())}
        return Quality(figures, REL_ERR, higher_is_better=False)
