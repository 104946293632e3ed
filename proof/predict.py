"""Predicted vs measured speed-up of each variant over the unaligned one.

The prediction uses the solver's own latency model (gac.solver.candidates.LatencyModel): the
DENOISED estimate of every curve point (gac.solver.curve_model), never the raw medians of the
profile, so it is what the alignment believed when it chose the dims.

Kernel level: the compressed weights' kernels at the variant's dims vs at the unaligned dims,
token-weighted exactly as the solver weights them (the manifest's token_weights, normalized;
gac.proof.profile balances them to 1 / each M's total). One figure per variant.

Model level, per timed setting (one GEMM row count M): the kernels of that M alone, unweighted
(µs of one forward at batch 1), give the predicted saving S = T_M(unaligned dims) - T_M(variant
dims). Inside a model the same kernels take another time than alone: the caches hold other
layers' data and code, launches queue back to back, and each module call costs a little besides its
kernels. The proof clocks in place (gac.proof.latency) the unaligned model's compressed modules (P_u
µs against the profile's T_u for their kernels). On a CPU the saving is scaled by that ratio,
S' = S * P_u / T_u, every difference taken as proportional (on a 2-core Xeon with AMX, MiniLM's 72
low-rank linears took 1.7x their cold-weight profile in place and round-to-8 saved about 8 % of their
time in both). On a GPU it counts as the profile says, S' = S: small GEMMs in a graph shed a fixed few
µs each that their profile holds, and the saving does not shrink with them
(benchmarks/in_model_linears.py). Where the original has one module per weight (not PaLU's head
groups), the original model's modules at the same weights are clocked too (P_o against T_o), and the
two points fit in place = a x profile + c per GEMM launch (n_u and n_o launches). The report shows the
fit; it is not applied: a and c come from two clocks a few % noisy each (instances of one model differ
that much in place), and taken together the fit predicted worse than these rules over the runs compared in
docs/results/2026-11-27-h100-in-place.md.
The predicted model time is the MEASURED unaligned model time U minus S', so the predicted
speed-up is U / (U - S'); everything outside the compressed modules (attention, norms, embeddings, other layers) is
assumed unchanged. Interval: S' +/- 1.96 sigma (scaled alike), sigma from the curve
model's per-point standard errors, each distinct curve point counted once with its net
coefficient (a point both variants use cancels); estimates of one fitted run are correlated,
which this treats as independent. The measured speed-up beside it is the paired ratio with its
95 % bootstrap CI (gac.proof.stats).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from gac.contracts.manifest import LowRankWeight, Manifest
from gac.proof.latency import LatencyRun, is_cuda
from gac.proof.stats import Speedup
from gac.solver.candidates import LatencyModel
from gac.solver.kinds import Kernel, kernels, original_points
from gac.solver.lookup import LatencyLookup

Z = 1.96  # two-sided 95 % for the prediction's interval
SEPARABLE = 0.1  # the calibration's two points must differ this much in profiled time per launch (relative)
A_RANGE = (0.5, 2.0)  # a calibration slope outside it is taken for noise (no fit reported)
FLAG = 0.03  # |predicted - measured| speed-up above this is flagged
WITHIN = 0.03  # a prediction holds when |predicted / measured - 1| is at most this

# A curve point: (curve key, axis value).
PointKey = tuple[tuple, int]


@dataclass
class SettingPrediction:
    """One timed setting of one variant: predicted model speed-up [interval] next to the measured one."""

    label: str
    kind: str  # "prefill" | "decode"
    kernel_unaligned_us: float  # this M's compressed-weight kernels at the unaligned dims, one forward
    kernel_us: float  # ... at the variant's dims
    saving_us: float  # kernel_unaligned_us - kernel_us
    saving_sigma_us: float
    measured_unaligned_us: float  # the unaligned model's median over rounds
    measured: Speedup
    in_place_us: float | None = None  # the unaligned model's compressed modules clocked in place (None: not clocked)
    modules_us: float | None = None  # this variant's own compressed modules clocked in place (None: not clocked)
    original_in_place_us: float | None = None  # the original model's modules at the same weights, in place (None: not clocked)
    kernel_original_us: float | None = None  # the profile's time of the original's kernels at this M (None: a point missing)
    launches: int = 0  # GEMM launches of the compressed weights at this M (the unaligned and every aligned variant alike)
    launches_original: int = 0  # ... of the original's modules at the same weights
    on_gpu: bool = False  # timed on a GPU: the profile's saving counts unscaled (the module's docstring says why)

    @property
    def speedup(self) -> float:
        """Predicted model speed-up U / (U - saving * in_place_factor)."""
        return speedup_of(self.measured_unaligned_us, self.in_place_saving_us)

    @property
    def lo(self) -> float:
        return speedup_of(self.measured_unaligned_us, self.in_place_factor * (self.saving_us - Z * self.saving_sigma_us))

    @property
    def hi(self) -> float:
        return speedup_of(self.measured_unaligned_us, self.in_place_factor * (self.saving_us + Z * self.saving_sigma_us))

    @property
    def calibration(self) -> tuple[float, float] | None:
        """(a, c) with in place = a x profile + c per GEMM launch, through two points clocked in place: the
        unaligned model's compressed modules and the original's modules at the same weights. None where
        either is missing, where the two points cannot tell a from c, or where a is outside A_RANGE.
        Reported beside the prediction, not applied (the module's docstring says why)."""
        p_u, p_o, t_u, t_o = self.in_place_us, self.original_in_place_us, self.kernel_unaligned_us, self.kernel_original_us
        n_u, n_o = self.launches, self.launches_original
        if p_u is None or p_o is None or t_o is None or n_u <= 0 or n_o <= 0:
            return None
        det = t_u * n_o - t_o * n_u  # zero when both have the same profiled time per launch
        if abs(det) < SEPARABLE * t_u * n_o:
            return None
        a = (p_u * n_o - p_o * n_u) / det
        c = (p_o * t_u - p_u * t_o) / det
        return (a, c) if A_RANGE[0] <= a <= A_RANGE[1] else None

    @property
    def in_place_factor(self) -> float:
        """What the profile's saving is scaled by: 1 on a GPU (or not clocked); on a CPU how many times
        their profiled time the compressed modules take inside the unaligned model."""
        if self.on_gpu or self.in_place_us is None or self.kernel_unaligned_us <= 0:
            return 1.0
        return self.in_place_us / self.kernel_unaligned_us

    @property
    def in_place_saving_us(self) -> float:
        return self.saving_us * self.in_place_factor

    @property
    def modules_saving_us(self) -> float | None:
        """What the compressed modules saved in place, measured: the unaligned model's less this variant's."""
        if self.in_place_us is None or self.modules_us is None:
            return None
        return self.in_place_us - self.modules_us

    @property
    def kernel_speedup(self) -> float:
        return self.kernel_unaligned_us / self.kernel_us if self.kernel_us > 0 else float("nan")

    @property
    def diff(self) -> float:
        """predicted - measured (median paired ratio)."""
        return self.speedup - self.measured.median

    @property
    def flagged(self) -> bool:
        return abs(self.diff) > FLAG

    def within(self, tolerance: float = WITHIN) -> bool:
        """The predicted model speed-up is within `tolerance` (relative) of the measured one."""
        m = self.measured.median
        return m > 0 and math.isfinite(self.speedup) and abs(self.speedup / m - 1) <= tolerance

    @property
    def kernel_share(self) -> float:
        """How much of the measured unaligned model time the predicted kernels make up."""
        return self.kernel_unaligned_us / self.measured_unaligned_us if self.measured_unaligned_us > 0 else float("nan")

    @property
    def measured_saving_us(self) -> float:
        return self.measured_unaligned_us * (1 - 1 / self.measured.median) if self.measured.median > 0 else float("nan")

    def misses(self) -> str:
        """What the prediction leaves out, in this setting's own numbers (for a flagged row)."""
        rest = self.measured_saving_us - self.in_place_saving_us
        scaled = "on a GPU: unscaled" if self.on_gpu else "the in-place ratio"
        in_place = (
            f"; in place they took {self.in_place_us / 1e3:.2f} ms ({self.in_place_us / self.kernel_unaligned_us:.2f}x the"
            f" profile), so the {self.saving_us:+.0f} us the profile predicts count as {self.in_place_saving_us:+.0f} us"
            f" ({self.in_place_factor:.2f}x, {scaled})"
            if self.in_place_us is not None and self.kernel_unaligned_us > 0
            else ""
        )
        measured_modules = (
            f"; in place the modules themselves saved {self.modules_saving_us:+.0f} us" if self.modules_saving_us is not None else ""
        )
        parts = [
            f"the compressed weights' GEMMs are {self.kernel_share:.0%} of the measured unaligned time by the profile"
            f" ({self.kernel_unaligned_us / 1e3:.2f} of {self.measured_unaligned_us / 1e3:.2f} ms){in_place};"
            " the prediction holds the rest fixed",
            f"the model saved {self.measured_saving_us:+.0f} us, the prediction {self.in_place_saving_us:+.0f} us"
            f" ({rest:+.0f} us elsewhere: non-GEMM work, or the kernels' savings not growing as their time does in place)"
            f"{measured_modules}",
        ]
        if self.kind == "decode":
            parts.append("decode: M = 1 GEMMs are memory-bound and per-token overhead (KV cache, attention) dominates")
        return "; ".join(parts)


@dataclass
class VariantPrediction:
    variant: str
    kernel_us: float | None = None  # token-weighted, as the solver weights them
    kernel_unaligned_us: float | None = None
    settings: list[SettingPrediction] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # curve points the prediction lacks, and why
    note: str = ""  # why there is no prediction at all

    @property
    def complete(self) -> bool:
        return not self.missing and not self.note and self.kernel_us is not None

    @property
    def kernel_speedup(self) -> float | None:
        if self.kernel_us is None or self.kernel_unaligned_us is None or self.kernel_us <= 0:
            return None
        return self.kernel_unaligned_us / self.kernel_us


class _Points:
    """Curve points of a set of dims: coefficient of each (curve, x), per M."""

    def __init__(self, model: LatencyModel) -> None:
        self.model = model
        self.kernel_of: dict[tuple, Kernel] = {}

    def coefficients(self, manifest: Manifest, dims: Mapping[str, int], m: int) -> dict[PointKey, float]:
        out: dict[PointKey, float] = {}
        for w in manifest.weights:
            for k in kernels(w, m):
                self.kernel_of.setdefault(k.curve_key, k)
                key = (k.curve_key, k.scale * int(dims[w.name]))
                out[key] = out.get(key, 0.0) + k.count
        return out

    def estimate(self, key: PointKey) -> tuple[float, float] | None:
        """(denoised estimate, its sigma) of a curve point; None when the profile lacks it."""
        k = self.kernel_of[key[0]]
        est = self.model.estimate(k, key[1])
        if est is None:
            return None
        return est, self.model.model(k).sigma.get(key[1], 0.0)

    def describe(self, key: PointKey) -> str:
        k = self.kernel_of[key[0]]
        shape = ",".join(f"{a}={v}" for a, v in k.fixed)
        return f"{k.op.value}({shape}) {k.axis}={key[1]}"


def _total(points: _Points, coeffs: Mapping[PointKey, float]) -> tuple[float | None, list[PointKey]]:
    total, missing = 0.0, []
    for key, c in coeffs.items():
        e = points.estimate(key)
        if e is None:
            missing.append(key)
        else:
            total += c * e[0]
    return (None if missing else total), missing


def _saving(points: _Points, base: Mapping[PointKey, float], var: Mapping[PointKey, float]) -> tuple[float, float]:
    """(predicted saving base - var, its sigma): distinct points independent, net coefficients."""
    net: dict[PointKey, float] = dict(base)
    for key, c in var.items():
        net[key] = net.get(key, 0.0) - c
    saving = var_sum = 0.0
    for key, c in net.items():
        est, sigma = points.estimate(key)  # type: ignore[misc]  # callers checked completeness
        saving += c * est
        var_sum += (c * sigma) ** 2
    return saving, math.sqrt(var_sum)


def _original_total(model: LatencyModel, manifest: Manifest, m: int) -> float | None:
    """The profile's time of the original's kernels at M = m, one forward (None: a point is missing)."""
    total = 0.0
    for w in manifest.weights:
        for k, x in original_points(w, m):
            est = model.estimate(k, x)
            if est is None:
                return None
            total += k.count * est
    return total


def speedup_of(unaligned_us: float, saving_us: float) -> float:
    """The speed-up a saving gives on a run of `unaligned_us` (inf if it saves the whole run or more)."""
    return unaligned_us / (unaligned_us - saving_us) if unaligned_us - saving_us > 0 else float("inf")


def predict(
    manifest: Manifest,
    lookup: LatencyLookup | None,
    dims_by_variant: Mapping[str, Mapping[str, int]],
    latency: LatencyRun,
    unaligned: str = "unaligned",
    original: str = "original",
    why_missing: str = "not in the profile: the alignment asked for each weight's window, its look-ahead, "
    "the original and the compressor's dims only",
) -> dict[str, VariantPrediction]:
    """Every variant but the unaligned baseline: kernel-level and per-setting model-level predictions."""
    out: dict[str, VariantPrediction] = {}
    if lookup is None:
        return {
            v: VariantPrediction(v, note="no latency data (rules-only alignment): nothing to predict from")
            for v in dims_by_variant
            if v != unaligned
        }
    model = LatencyModel(lookup, manifest)
    points = _Points(model)
    base_dims = dims_by_variant[unaligned]
    settings = latency.settings
    ms = sorted({s.gemm_m for s in settings} | {m for m, _ in model.tokens})
    base = {m: points.coefficients(manifest, base_dims, m) for m in ms}
    base_tot = {m: _total(points, base[m]) for m in ms}
    launches = {m: sum(k.count for w in manifest.weights for k in kernels(w, m)) for m in ms}
    launches_original = {m: sum(k.count for w in manifest.weights for k, _ in original_points(w, m)) for m in ms}
    original_tot = {m: _original_total(model, manifest, m) for m in ms}
    for name, dims in dims_by_variant.items():
        if name == unaligned:
            continue
        vp = VariantPrediction(name)
        out[name] = vp
        if name == original and any(isinstance(w, LowRankWeight) for w in manifest.weights):
            vp.note = "n/a: the original runs dense weights, not the low-rank kernels the profile holds"
            continue
        var = {m: points.coefficients(manifest, dims, m) for m in ms}
        var_tot = {m: _total(points, var[m]) for m in ms}
        lacking = {key for m in ms for key in base_tot[m][1] + var_tot[m][1]}
        if lacking:
            vp.missing = [f"{points.describe(k)}: {why_missing}" for k in sorted(lacking, key=lambda k: (str(k[0]), k[1]))]
            continue
        vp.kernel_us = math.fsum(w * var_tot[m][0] for m, w in model.tokens)  # type: ignore[operator]
        vp.kernel_unaligned_us = math.fsum(w * base_tot[m][0] for m, w in model.tokens)  # type: ignore[operator]
        for s in settings:
            m = s.gemm_m
            u = float(latency.stat(unaligned, s.label).median)
            saving, sigma = _saving(points, base[m], var[m])
            sp = SettingPrediction(
                label=s.label,
                kind=s.kind,
                kernel_unaligned_us=base_tot[m][0],
                kernel_us=var_tot[m][0],  # type: ignore[arg-type]
                saving_us=saving,
                saving_sigma_us=sigma,
                measured_unaligned_us=u,
                measured=latency.speedup(name, unaligned, s.label),
                in_place_us=latency.in_place_us(s.label) if latency.in_place_variant == unaligned else None,
                modules_us=latency.in_place_us(s.label, name),
                original_in_place_us=latency.in_place_us(s.label, original),
                kernel_original_us=original_tot[m],
                launches=launches[m],
                launches_original=launches_original[m],
                on_gpu=is_cuda(latency.device),
            )
            vp.settings.append(sp)
    return out
