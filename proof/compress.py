"""Three real dimension-reducing compressors, each emitting a GAC manifest.

- ASVD-style low-rank factorisation: every linear W is scaled by its calibration
  input magnitudes, factorised by SVD and unscaled; per-weight ranks come from a
  global greedy over singular values weighted by each weight's measured sensitivity,
  under one parameter budget, so the ranks come out irregular.
- Structured MLP-width pruning: each intermediate neuron is scored by its mean
  activation magnitude times the norm of its output column; one global ranking of
  the layer-normalised scores under the budget sets irregular per-layer widths.
- PaLU-style low-rank keys and values: ASVD's factorisation applied per group of
  KV heads of each key and value projection (decoders only; see PaluCompressor).

All keep what they computed (SVD factors, neuron scores), so the same compressor
rebuilds the model at any dims: its own, round-to-8, or GAC's. They work on any
model with the structure interface of BertEncoder and LlamaDecoder (named_linears,
get/set_linear, mlp_down, mlp_linears, with_mlp_neurons, mlp_gated; PaLU also
kv_linears and a config with kv_heads and head_dim) and take their data through a
Calibration. They run where the model's weights are (CPU or GPU), so the models they
build live on the same device.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from gac.contracts.manifest import Manifest, kept_params
from gac.proof.bert import LowRankLinear
from gac.proof.llama import HeadGroups, split_group

ASVD_ALPHA = 0.5  # the ASVD paper's activation-scaling exponent


class Calibration(Protocol):
    """The data a compressor sees: calibration inputs, and a small probe to measure output change."""

    def run(self, model: nn.Module) -> None:
        """Feed every calibration input through `model` (forward hooks collect statistics)."""
        ...

    def distance(self, model: nn.Module) -> float:
        """How far `model`'s outputs on the probe are from the original's (0 = identical)."""
        ...


@dataclass
class Compression:
    """A compressor's decision: dims per weight, importances, and a way to build any dims."""

    method: str
    dims: dict[str, int]  # the compressor's own (irregular) dims
    importance: dict[str, float]  # per parameter, from the compressor's own scores
    manifest: Manifest
    compressor: Compressor

    def build(self, dims: dict[str, int] | None = None) -> Any:
        return self.compressor.build(dims or self.dims)


class Compressor:
    method: str = ""

    def build(self, dims: dict[str, int]) -> Any:  # pragma: no cover - interface
        raise NotImplementedError


# ----------------------------------------------------------------- calibration


@torch.inference_mode()
def input_magnitudes(model: Any, calibration: Calibration) -> dict[str, torch.Tensor]:
    """Mean |x| per input channel of every projection, over every calibration token."""
    sums: dict[str, torch.Tensor] = {}
    counts: dict[str, int] = {}
    hooks = []
    for name, mod in model.named_linears():

        def hook(_m: nn.Module, args: tuple[torch.Tensor, ...], _out: torch.Tensor, name: str = name) -> None:
            x = args[0].reshape(-1, args[0].shape[-1]).float().abs()
            sums[name] = sums.get(name, 0) + x.sum(0)
            counts[name] = counts.get(name, 0) + x.shape[0]

        hooks.append(mod.register_forward_hook(hook))
    try:
        calibration.run(model)
    finally:
        for h in hooks:
            h.remove()
    return {n: sums[n] / counts[n] for n in sums}


# ----------------------------------------------------------------- ASVD


@dataclass
class _Target:
    """One matrix a low-rank compressor factorises: a projection, or some of its output rows."""

    weight: torch.Tensor  # out x in
    bias: torch.Tensor | None
    source: str  # the projection (a named_linears name) whose input magnitudes scale it


@dataclass
class _Factors:
    u_sigma: torch.Tensor  # out x r_max: U * Sigma
    vt_unscaled: torch.Tensor  # r_max x in: V^T S^-1
    bias: torch.Tensor | None
    energy: torch.Tensor  # sigma_j^2 / sum sigma^2, descending (on the CPU: the allocation reads it element-wise)
    in_features: int
    out_features: int


def _factorise(t: _Target, magnitudes: torch.Tensor) -> _Factors:
    """ASVD: SVD of W scaled by its input magnitudes ** ASVD_ALPHA, in float64 on the weight's device."""
    w = t.weight.detach().double()
    s = magnitudes.double().clamp(min=1e-6) ** ASVD_ALPHA
    u, sig, vt = torch.linalg.svd(w * s[None, :], full_matrices=False)
    return _Factors(
        u_sigma=(u * sig[None, :]).float(),
        vt_unscaled=(vt / s[None, :]).float(),
        bias=None if t.bias is None else t.bias.detach().clone(),
        energy=(sig**2 / (sig**2).sum()).float().cpu(),
        in_features=w.shape[1],
        out_features=w.shape[0],
    )


class AsvdCompressor(Compressor):
    """Activation-aware SVD of every projection, ranks set by sensitivity-weighted energy.

    What gets factorised is `targets` (every projection here); `install` puts a low-rank module
    in a target's place. Subclasses change the two (PaluCompressor: K/V rows per head group)."""

    method = "asvd"

    def __init__(self, model: Any, calibration: Calibration) -> None:
        self.base = model
        mags = input_magnitudes(model, calibration)
        self.factors: dict[str, _Factors] = {name: _factorise(t, mags[t.source]) for name, t in self.targets(model)}
        self.sensitivity = self._sensitivity(calibration)

    def targets(self, model: Any) -> Iterator[tuple[str, _Target]]:
        for name, lin in model.named_linears():
            assert isinstance(lin, nn.Linear)
            yield name, _Target(lin.weight, lin.bias, name)

    def projection(self, name: str) -> str:
        """The model's projection a target belongs to."""
        return name

    def install(self, model: Any, name: str, module: nn.Module) -> None:
        model.set_linear(name, module)

    def _sensitivity(self, calibration: Calibration) -> dict[str, float]:
        """How much the outputs move when one target alone keeps half its rank (ASVD's sensitivity, cheaply)."""
        out: dict[str, float] = {}
        for name, f in self.factors.items():
            proj = self.projection(name)
            dense = self.base.get_linear(proj)
            self.install(self.base, name, self._lowrank(name, min(f.in_features, f.out_features) // 2))
            try:
                out[name] = max(1e-6, calibration.distance(self.base))
            finally:
                self.base.set_linear(proj, dense)
        return out

    def _lowrank(self, name: str, rank: int) -> LowRankLinear:
        f = self.factors[name]
        mod = LowRankLinear(f.in_features, f.out_features, rank, bias=f.bias is not None, device=f.u_sigma.device)
        with torch.no_grad():
            mod.down.weight.copy_(f.vt_unscaled[:rank])
            mod.up.weight.copy_(f.u_sigma[:, :rank])
            if f.bias is not None:
                mod.up.bias.copy_(f.bias)
        return mod

    def unit(self, name: str) -> int:
        f = self.factors[name]
        return f.in_features + f.out_features

    def original_params(self) -> int:
        return sum(f.in_features * f.out_features for f in self.factors.values())

    def break_even(self, name: str) -> int:
        """The largest rank whose factors hold no more parameters than the dense weight.

        ASVD never factorises a weight beyond this: the pair would be bigger and slower."""
        f = self.factors[name]
        return (f.in_features * f.out_features) // (f.in_features + f.out_features)

    def allocate(self, budget: int, min_rank: int = 8) -> dict[str, int]:
        """Ranks maximising sum of sensitivity * retained energy, greedily per parameter, within budget
        (each rank at most the weight's break-even rank).

        Within a weight the gain per singular value falls (sigma is sorted), so
        taking the globally best gain-per-parameter first keeps every weight's
        choice a prefix: the greedy is the exact LP optimum up to one item.
        """
        ranks = {n: min_rank for n in self.factors}
        used = sum(self.unit(n) * r for n, r in ranks.items())
        gains: list[tuple[float, str, int]] = []
        for n, f in self.factors.items():
            per_param = self.sensitivity[n] / self.unit(n)
            for j in range(min_rank, self.break_even(n)):
                gains.append((float(f.energy[j]) * per_param, n, j))
        gains.sort(key=lambda g: -g[0])
        for _, n, j in gains:
            if j != ranks[n]:
                continue  # only extend a prefix (ties could reorder within a weight)
            if used + self.unit(n) > budget:
                continue
            ranks[n] += 1
            used += self.unit(n)
        return ranks

    def marginal_importance(self, name: str, rank: int, window: int = 4) -> float:
        """Per-parameter value of the singular values around the cut: what rounding up or down trades."""
        f = self.factors[name]
        lo, hi = max(0, rank - window), min(len(f.energy), rank + window)
        return self.sensitivity[name] * float(f.energy[lo:hi].mean()) / self.unit(name)

    def build(self, dims: dict[str, int]) -> Any:
        model = copy.deepcopy(self.base)
        for name, r in dims.items():
            self.install(model, name, self._lowrank(name, int(r)))
        return model.eval()


class PaluCompressor(AsvdCompressor):
    """PaLU-style low-rank keys and values, per group of KV heads.

    PaLU factorises each layer's key and value projections per head group, W_g (rows of the group's
    heads x hidden) = B_g A_g with a rank r_g of its own: x A_g^T is the group's latent (what PaLU
    caches) and B_g reconstructs the group's keys or values. Each group here is one `lowrank`
    manifest weight named 'layerI.attn.k.gJ' (or .v), out_features = heads_per_group * head_dim,
    in_features = hidden, dim = r_g: the model runs exactly that weight's two GEMMs (M x hidden ->
    r_g, then r_g -> out) per group (gac.proof.llama.HeadGroups), so the solver's kernels for the
    `lowrank` kind are the ones timed, and r_g is the irregular dim it aligns. Every group is its
    own weight (no manifest `group` tying K to V): PaLU gives keys and values ranks of their own.
    Ranks come from ASVD's activation-aware SVD and sensitivity-weighted greedy, over the K/V
    groups only; PaLU's Fisher-information rank search is not reproduced. The KV cache still holds
    the reconstructed keys and values: the proof times the projections, not the cache's size.
    """

    method = "palu"

    def __init__(self, model: Any, calibration: Calibration, heads_per_group: int = 1) -> None:
        cfg = model.cfg
        if heads_per_group < 1 or cfg.kv_heads % heads_per_group:
            raise ValueError(f"heads_per_group {heads_per_group} must divide the {cfg.kv_heads} KV heads")
        self.rows = heads_per_group * cfg.head_dim
        super().__init__(model, calibration)

    def targets(self, model: Any) -> Iterator[tuple[str, _Target]]:
        for proj in model.kv_linears():
            lin = model.get_linear(proj)
            assert isinstance(lin, nn.Linear)
            for g, start in enumerate(range(0, lin.out_features, self.rows)):
                rows = slice(start, start + self.rows)
                yield f"{proj}.g{g}", _Target(lin.weight[rows], None if lin.bias is None else lin.bias[rows], proj)

    def projection(self, name: str) -> str:
        return split_group(name)[0]

    def install(self, model: Any, name: str, module: nn.Module) -> None:
        """Split the target's projection into dense head groups (once), then put `module` in its group's place."""
        proj = self.projection(name)
        dense = model.get_linear(proj)
        if not isinstance(dense, HeadGroups):
            model.set_linear(proj, HeadGroups.split(dense, self.rows))
        model.set_linear(name, module)


def _lowrank_manifest(
    comp: AsvdCompressor,
    ranks: dict[str, int],
    model_name: str,
    ratio: float,
    tokens: Sequence[int],
    token_weights: Sequence[float] | None,
    dtype: str,
) -> Compression:
    importance = {n: comp.marginal_importance(n, r) for n, r in ranks.items()}
    weights = [
        {
            "name": n,
            "kind": "lowrank",
            "out_features": f.out_features,
            "in_features": f.in_features,
            "dim": ranks[n],
            "importance": importance[n],
        }
        for n, f in comp.factors.items()
    ]
    manifest = _manifest(model_name, comp.method, ratio, tokens, token_weights, dtype, weights)
    return Compression(comp.method, ranks, importance, manifest, comp)


def compress_asvd(
    model: Any,
    calibration: Calibration,
    ratio: float,
    tokens: Sequence[int],
    dtype: str,
    model_name: str = "model",
    token_weights: Sequence[float] | None = None,
) -> Compression:
    comp = AsvdCompressor(model, calibration)
    ranks = comp.allocate(kept_params(ratio, comp.original_params()))
    return _lowrank_manifest(comp, ranks, model_name, ratio, tokens, token_weights, dtype)


def compress_palu(
    model: Any,
    calibration: Calibration,
    ratio: float,
    tokens: Sequence[int],
    dtype: str,
    model_name: str = "model",
    token_weights: Sequence[float] | None = None,
    heads_per_group: int = 1,
) -> Compression:
    """PaLU-style ranks per KV head group (PaluCompressor); the budget is a share of the K/V projections' parameters."""
    comp = PaluCompressor(model, calibration, heads_per_group)
    ranks = comp.allocate(kept_params(ratio, comp.original_params()))
    return _lowrank_manifest(comp, ranks, model_name, ratio, tokens, token_weights, dtype)


# ----------------------------------------------------------------- MLP-width pruning


class PruneCompressor(Compressor):
    """Structured pruning of each layer's MLP intermediate neurons by activation-weighted magnitude."""

    method = "prune"

    def __init__(self, model: Any, calibration: Calibration) -> None:
        self.base = model
        mags = input_magnitudes(model, calibration)  # of each down projection: the intermediate activations
        self.scores: list[torch.Tensor] = []
        for i in range(len(model.layers)):
            down = model.mlp_down(i)
            s = mags[down] * model.get_linear(down).weight.detach().float().norm(dim=0)
            # layer-normalised: a neuron's share of its layer's output; on the CPU, as the allocation reads it element-wise
            self.scores.append((s / s.sum()).cpu())
        self.order = [torch.argsort(s, descending=True) for s in self.scores]
        self.hidden = model.cfg.hidden
        self.gated = bool(model.mlp_gated)

    def name(self, i: int) -> str:
        return f"layer{i}.mlp"

    @property
    def unit(self) -> int:
        """Parameters per neuron: its row of each up projection (gate and up, or one) and its down column."""
        return (3 if self.gated else 2) * self.hidden

    def original_params(self) -> int:
        return sum(self.unit * len(s) for s in self.scores)

    def allocate(self, budget: int, min_width: int = 64) -> dict[str, int]:
        """Keep the globally best neurons (by layer-normalised score) that fit in the budget."""
        widths = [min_width] * len(self.scores)
        ranked = sorted(
            ((float(s[self.order[i][j]]), i, j) for i, s in enumerate(self.scores) for j in range(min_width, len(s))),
            key=lambda t: -t[0],
        )
        keep = budget // self.unit - sum(widths)
        for _, i, _j in ranked[: max(0, keep)]:
            widths[i] += 1
        return {self.name(i): w for i, w in enumerate(widths)}

    def marginal_importance(self, i: int, width: int, window: int = 4) -> float:
        s = self.scores[i][self.order[i]]
        lo, hi = max(0, width - window), min(len(s), width + window)
        return float(s[lo:hi].mean()) / self.unit

    def build(self, dims: dict[str, int]) -> Any:
        widths = [int(dims.get(self.name(i), len(s))) for i, s in enumerate(self.scores)]
        keep = [torch.sort(self.order[i][:w]).values for i, w in enumerate(widths)]  # original neuron order
        return self.base.with_mlp_neurons(keep)


def compress_prune(
    model: Any,
    calibration: Calibration,
    ratio: float,
    tokens: Sequence[int],
    dtype: str,
    model_name: str = "model",
    token_weights: Sequence[float] | None = None,
) -> Compression:
    comp = PruneCompressor(model, calibration)
    budget = kept_params(ratio, comp.original_params())
    widths = comp.allocate(budget)
    importance = {comp.name(i): comp.marginal_importance(i, widths[comp.name(i)]) for i in range(len(comp.scores))}
    weights = [
        {
            "name": comp.name(i),
            "kind": "mlp_width",
            "hidden": comp.hidden,
            "full": len(s),
            "gated": comp.gated,
            "dim": widths[comp.name(i)],
            "importance": importance[comp.name(i)],
        }
        for i, s in enumerate(comp.scores)
    ]
    manifest = _manifest(model_name, "prune", ratio, tokens, token_weights, dtype, weights)
    return Compression("prune", widths, importance, manifest, comp)


def _manifest(
    model: str, method: str, ratio: float, tokens: Sequence[int], token_weights: Sequence[float] | None, dtype: str, weights: list[dict]
) -> Manifest:
    """tokens: the GEMM row counts M the model is timed at (batch 1: each prefill S, and 1 for decode)."""
    workload: dict = {"tokens": list(tokens), "dtype": dtype}
    if token_weights is not None:
        workload["token_weights"] = list(token_weights)
    return Manifest.model_validate(
        {
            "schema": "gac.manifest/v1",
            "model": model,
            "compressor": method,
            "budget": {"ratio": ratio},
            "workload": workload,
            "weights": weights,
        }
    )


def manifest_params(manifest: Manifest, dims: dict[str, int]) -> int:
    """The manifest's parameter count of the listed weights at the given dims."""
    from gac.solver.kinds import unit_params

    return sum(unit_params(w) * int(dims[w.name]) for w in manifest.weights)


def _layer_of(name: str) -> int:
    """The layer index of a manifest weight named 'layerI....'."""
    return int(name.split(".")[0].removeprefix("layer"))


def compressed_modules(model: Any, manifest: Manifest) -> list[nn.Module]:
    """The modules that run the manifest's weights in the model: each low-rank pair, each pruned MLP's linears."""
    out: list[nn.Module] = []
    for w in manifest.weights:
        if w.kind == "lowrank":
            lin = model.get_linear(w.name)
            assert isinstance(lin, LowRankLinear)
            out.append(lin)
        elif w.kind == "mlp_width":
            out += model.mlp_linears(_layer_of(w.name))
        else:  # pragma: no cover - not produced here
            raise ValueError(f"unsupported kind {w.kind}")
    return out


def original_modules(model: Any, manifest: Manifest) -> list[nn.Module] | None:
    """The uncompressed model's modules at the manifest's weights (each dense linear, each MLP's linears), clocked
    in place for the fit the report shows beside the prediction (gac.proof.predict); None where a weight is part of
    a module (PaLU's head groups)."""
    out: list[nn.Module] = []
    for w in manifest.weights:
        if w.kind == "mlp_width":
            out += model.mlp_linears(_layer_of(w.name))
            continue
        try:
            lin = model.get_linear(w.name)
        except KeyError:  # a head group: the original runs the whole projection, whose kernels the profile lacks
            return None
        if not isinstance(lin, nn.Linear):
            return None
        out.append(lin)
    return out


def compressed_params(model: Any, manifest: Manifest) -> int:
    """Weight parameters of the manifest's weights as built in the model (biases excluded, like the manifest)."""
    return sum(p.numel() for mod in compressed_modules(model, manifest) for name, p in mod.named_parameters() if name.endswith("weight"))


__all__ = [
    "AsvdCompressor",
    "Calibration",
    "Compression",
    "PaluCompressor",
    "PruneCompressor",
    "compress_asvd",
    "compress_palu",
    "compress_prune",
    "compressed_modules",
    "compressed_params",
    "manifest_params",
    "original_modules",
]
