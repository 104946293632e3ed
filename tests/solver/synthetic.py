"""Synthetic platforms for tests and benchmarks: latency curves with a hidden staircase (or none),
measured the way the agent measures, with seeded noise.

A curve is a truth function x -> latency (us) plus a measurement model:
  * sample_noise: each point draws n samples with this relative sigma and reports their
    median, p10 and p90 (what the agent sends);
  * jitter: the whole point is scaled by one draw of this relative sigma (run-to-run drift:
    the medians scatter more than their own p10..p90 admit);
  * spikes: dims whose truth is `spike` times slower than their neighbours (a bad kernel pick).
Everything is deterministic given the seed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from gac.solver.curve_model import Point

Truth = Callable[[int], float]


def staircase(period: int, step: float = 0.10, rise: float = 0.005, base_us: float = 50.0) -> Truth:
    """Latency that jumps up by `step` (relative) right after each multiple of `period`, and rises
    by `rise` (relative) across each step, so the top of a step is barely slower than its bottom."""

    def truth(x: int) -> float:
        k, within = divmod(x - 1, period)  # x = k * period + 1 .. (k + 1) * period share step k
        return base_us * (1 + step) ** k * (1 + rise * within / max(1, period - 1))

    return truth


def smooth(per_dim_us: float = 0.05, const_us: float = 20.0) -> Truth:
    """No cliffs at all: latency proportional to the dim, plus a launch constant."""
    return lambda x: const_us + per_dim_us * x


def step_tops(xs: Iterable[int], period: int) -> set[int]:
    """The dims right before each jump: the ones worth choosing on a staircase."""
    return {x for x in xs if x % period == 0}


@dataclass(frozen=True)
class Measure:
    sample_noise: float = 0.0  # relative sigma of one timing sample
    n: int = 20  # samples per point
    jitter: float = 0.0  # relative sigma of a whole point (its median moves by this)
    spike: float = 0.30  # how much slower a spike dim is than its truth
    seed: int = 0


def measure(truth: Truth, xs: Iterable[int], how: Measure = Measure(), spikes: Iterable[int] = ()) -> list[Point]:
    """One measured point per x: median, p10, p90 and n of its samples."""
    rng = np.random.default_rng(how.seed)
    spiked = set(spikes)
    points = []
    for x in xs:
        mu = truth(x) * (1 + how.spike if x in spiked else 1.0)
        samples = mu * (1 + how.sample_noise * rng.standard_normal(how.n))
        samples *= 1 + how.jitter * rng.standard_normal()
        samples = np.maximum(samples, 1e-3 * mu)  # a timing is never negative
        p10, med, p90 = np.percentile(samples, [10, 50, 90])
        points.append(Point(int(x), float(med), float(p10), float(p90), how.n))
    return points


def measure_fast(truth: Truth, xs: Iterable[int], how: Measure = Measure(), spikes: Iterable[int] = ()) -> list[Point]:
    """measure(), all points drawn at once (another random stream): for curves of thousands of dims."""
    rng = np.random.default_rng(how.seed)
    xs = list(xs)
    spiked = set(spikes)
    mu = np.array([truth(x) * (1 + how.spike if x in spiked else 1.0) for x in xs])
    samples = mu[:, None] * (1 + how.sample_noise * rng.standard_normal((len(xs), how.n)))
    samples *= 1 + how.jitter * rng.standard_normal((len(xs), 1))
    samples = np.maximum(samples, 1e-3 * mu[:, None])
    p10, med, p90 = np.percentile(samples, [10, 50, 90], axis=1)
    return [Point(int(x), float(m), float(a), float(b), how.n) for x, m, a, b in zip(xs, med, p10, p90)]


def spike_dims(xs: list[int], count: int, seed: int, avoid: set[int] = frozenset()) -> list[int]:  # type: ignore[assignment]
    """`count` distinct dims, none adjacent to another (each spike has plain neighbours)."""
    rng = np.random.default_rng(10_000 + seed)
    chosen: list[int] = []
    for x in rng.permutation(xs[1:-1]):
        if len(chosen) == count:
            break
        if x not in avoid and all(abs(int(x) - c) > 2 for c in chosen):
            chosen.append(int(x))
    return sorted(chosen)


# ---------------------------------------------------------------------------------------------
# Whole platforms and models: align() end to end


def tiled(period: int, per_dim_us: float, const_us: float) -> Truth:
    """A GEMM's tile quantization: the swept axis is padded up to a multiple of `period`, so
    latency is flat within a tile and jumps by period * per_dim_us right after each multiple.
    The relative step shrinks as the dim grows (about period / x at large x)."""
    return lambda x: const_us + per_dim_us * period * -(-x // period)


def gemm_truth(shape: dict[str, int], axis: str, period: int | None) -> Truth:
    """A plausible GEMM on a 20 TFLOP/s, 1 TB/s device: compute padded to `period` along the
    swept axis (None: no tiles, latency linear in the dim), a 5 us launch and the fixed operand's
    memory traffic as the constant."""
    other = [v for k, v in shape.items() if k not in (axis, "m")]
    m, fixed = shape["m"], other[0] if other else 1
    per_dim = 2.0 * m * fixed / 2e7  # us per unit of the swept axis
    const = 5.0 + 2.0 * m * fixed / 1e6
    return tiled(period, per_dim, const) if period else smooth(per_dim_us=per_dim, const_us=const)


@dataclass(frozen=True)
class CurveSpec:
    """One measured curve of a platform: a gemm with its fixed shape, swept over 1..top."""

    fixed: tuple[tuple[str, int], ...]
    axis: str
    top: int

    def shape(self, x: int) -> dict[str, int]:
        return {**dict(self.fixed), self.axis: x}


def platform_rows(
    curves: Iterable[CurveSpec], period: int | None, how: Measure, spikes_per_dim: float = 0.0
) -> tuple[list[tuple], dict[tuple, list[int]]]:
    """FileLookup rows (op, dtype, shape, axis, median, p10, p90, n) measuring each curve at every
    dim 1..top, and the spike dims planted per curve (keyed by (fixed, axis)). Each curve draws
    its own noise from the seed and its index."""
    rows: list[tuple] = []
    planted: dict[tuple, list[int]] = {}
    for i, c in enumerate(curves):
        xs = list(range(1, c.top + 1))
        spikes = spike_dims(xs, int(spikes_per_dim * len(xs)), how.seed * 1000 + i) if spikes_per_dim else []
        planted[(c.fixed, c.axis)] = spikes
        truth = gemm_truth(c.shape(1), c.axis, period)
        pts = measure_fast(truth, xs, Measure(**{**vars(how), "seed": how.seed * 1000 + i}), spikes=spikes)
        rows += curve_rows(dict(c.fixed), c.axis, pts)
    return rows, planted


def curve_rows(fixed: dict[str, int], axis: str, pts: Iterable[Point]) -> list[tuple]:
    """FileLookup rows (op, dtype, shape, axis, median, p10, p90, n) of measured points of one float16 gemm curve."""
    return [("gemm", "float16", {**fixed, axis: p.x}, axis, p.median_us, p.p10_us, p.p90_us, p.n) for p in pts]


def llama_like_shapes(hidden: int = 2048) -> dict[str, tuple[int, int]]:
    """(out_features, in_features) per projection of a Llama-like layer: MLP 2.75x wide, 8x GQA
    (hidden 2048: a 1B model's layer; MLP 5632, K and V 256 wide)."""
    mlp, kv = hidden * 11 // 4, hidden // 8
    return {
        "self_attn.q_proj": (hidden, hidden),
        "self_attn.k_proj": (kv, hidden),
        "self_attn.v_proj": (kv, hidden),
        "self_attn.o_proj": (hidden, hidden),
        "mlp.gate_proj": (mlp, hidden),
        "mlp.up_proj": (mlp, hidden),
        "mlp.down_proj": (hidden, mlp),
    }


def llama_like_manifest(
    layers: int, hidden: int = 2048, rho: float = 0.3, seed: int = 0, tokens: int = 512, objective: str | None = None
) -> dict:
    """An ASVD-style low-rank manifest of a Llama-like model: importance-driven, irregular ranks
    (fractional, spread over each weight's whole range), the budget exactly their parameters."""
    rng = np.random.default_rng(seed)
    weights = []
    for layer in range(layers):
        for proj, (o, i) in llama_like_shapes(hidden).items():
            full = min(o, i)
            keep = float(np.clip((1 - rho) * rng.lognormal(0.0, 0.45), 0.03, 1.0))  # of the full params
            rank = max(1.0, min(full, keep * o * i / (o + i)))
            weights.append({"name": f"layers.{layer}.{proj}", "kind": "lowrank", "out_features": o, "in_features": i,
                            "dim": round(rank, 1), "importance": round(float(rng.lognormal(0.0, 0.5)), 4)})  # fmt: skip
    params = sum((w["out_features"] + w["in_features"]) * w["dim"] for w in weights)
    doc = {"model": "llama-like", "budget": {"params": int(params)}, "workload": {"tokens": [tokens], "dtype": "float16"},
           "weights": weights}  # fmt: skip
    if objective is not None:
        doc["objective"] = objective
    return doc


def lowrank_curves(manifest_doc: dict) -> list[CurveSpec]:
    """The gemm curves a low-rank manifest's weights need, each swept over its whole range."""
    (m,) = manifest_doc["workload"]["tokens"]
    tops: dict[tuple, int] = {}
    for w in manifest_doc["weights"]:
        o, i = w["out_features"], w["in_features"]
        full = min(o, i)
        for fixed, axis in ((("k", i), ("m", m)), "n"), ((("m", m), ("n", o)), "k"):
            tops[(fixed, axis)] = max(tops.get((fixed, axis), 0), full)
    return [CurveSpec(fixed, axis, top) for (fixed, axis), top in sorted(tops.items())]


# ---------------------------------------------------------------------------------------------
# A GPU fleet's platform: long lattice curves and a mixed 512-weight Llama-3-8B manifest

FLEET_HIDDEN, FLEET_MLP, FLEET_KV, FLEET_TOKENS = 4096, 14336, 1024, 1024
FLEET_CLASS = {1: 2.6, 2: 1.9, 4: 1.35}  # odd, 2 mod 4 and 4 mod 8 widths against the multiples of 8


def gpu_truth(shape: dict[str, int], axis: str, tile: int = 64) -> Truth:
    """A GPU GEMM: compute padded to tiles of `tile` along the swept axis, times a factor for
    widths that are not multiples of 8 (the kernel's slower code paths), as an H100's fp16 GEMMs run."""
    base = gemm_truth(shape, axis, tile)
    return lambda x: base(x) * FLEET_CLASS.get(x & -x, 1.0)


def fleet_curves() -> list[CurveSpec]:
    """The gemm curves fleet_manifest() runs, each swept over every dim up to the largest any
    weight asks for: 14,336 + 14,336 + 4,096 + 4,096 + 1,024 + 256 = 38,144 points."""
    m, h, f, kv = FLEET_TOKENS, FLEET_HIDDEN, FLEET_MLP, FLEET_KV
    return [
        CurveSpec((("k", h), ("m", m)), "n", f),  # the A of low-rank pairs of input h; an MLP's up/gate
        CurveSpec((("m", m), ("n", h)), "k", f),  # the B of pairs of output h; an MLP's down
        CurveSpec((("m", m), ("n", f)), "k", h),  # gate/up's B
        CurveSpec((("k", f), ("m", m)), "n", h),  # down's A
        CurveSpec((("m", m), ("n", kv)), "k", kv),  # k/v's B (ASVD)
        CurveSpec((("m", m), ("n", kv // 4)), "k", kv // 4),  # a PaLU head group's B
    ]


def fleet_rows(how: Measure = Measure(sample_noise=0.03, n=20), tile: int = 64) -> list[tuple]:
    """FileLookup rows measuring every dim of fleet_curves() on the GPU-like platform."""
    rows: list[tuple] = []
    for i, c in enumerate(fleet_curves()):
        truth = gpu_truth(c.shape(1), c.axis, tile)
        pts = measure_fast(truth, range(1, c.top + 1), Measure(**{**vars(how), "seed": how.seed * 1000 + i}))
        rows += curve_rows(dict(c.fixed), c.axis, pts)
    return rows


def fleet_manifest(seed: int = 0, rho: float = 0.2) -> dict:
    """512 weights of Llama-3-8B: ASVD ranks of every projection (224), PaLU ranks of K and V per
    group of 2 heads (256 groups of 256 rows) and LLM-Pruner widths of the 32 MLPs; irregular
    dims, lognormal importances, the budget exactly their parameters."""
    rng = np.random.default_rng(seed)
    h, f, kv = FLEET_HIDDEN, FLEET_MLP, FLEET_KV
    shapes = {"q_proj": (h, h), "k_proj": (kv, h), "v_proj": (kv, h), "o_proj": (h, h),
              "gate_proj": (f, h), "up_proj": (f, h), "down_proj": (h, f)}  # fmt: skip

    def importance() -> float:
        return round(float(rng.lognormal(0.0, 0.5)), 4)

    weights: list[dict] = []
    for layer in range(32):
        for proj, (o, i) in shapes.items():
            if proj in ("k_proj", "v_proj"):
                continue
            rank = float(np.clip((1 - rho) * rng.lognormal(0.0, 0.3), 0.05, 0.95)) * o * i / (o + i)
            weights.append({"name": f"asvd.layers.{layer}.{proj}", "kind": "lowrank", "out_features": o, "in_features": i,
                            "dim": round(min(rank, min(o, i) - 1), 1), "importance": importance()})  # fmt: skip
        for proj in ("k_proj", "v_proj"):
            o, i = shapes[proj]
            rank = float(np.clip((1 - rho) * rng.lognormal(0.0, 0.3), 0.05, 0.95)) * o * i / (o + i)
            weights.append({"name": f"asvd.layers.{layer}.{proj}", "kind": "lowrank", "out_features": o, "in_features": i,
                            "dim": round(rank, 1), "importance": importance()})  # fmt: skip
            for g in range(4):
                weights.append({"name": f"palu.layers.{layer}.{proj}.g{g}", "kind": "lowrank", "out_features": kv // 4, "in_features": i,
                                "dim": round(float(rng.uniform(40, 240)), 1), "importance": importance()})  # fmt: skip
        width = f * float(np.clip((1 - rho) * rng.lognormal(0.0, 0.1), 0.5, 0.97))
        weights.append({"name": f"pruned.layers.{layer}.mlp", "kind": "mlp_width", "hidden": h, "full": f,
                        "dim": round(width, 1), "importance": importance()})  # fmt: skip
    params = sum(weight_unit(w) * w["dim"] for w in weights)
    return {"schema": "gac.manifest/v1", "model": "meta-llama/Meta-Llama-3-8B", "compressor": "asvd+palu+llm-pruner",
            "budget": {"params": int(params)}, "workload": {"tokens": [FLEET_TOKENS], "dtype": "float16"}, "weights": weights}  # fmt: skip


def weight_unit(w: dict) -> int:
    """Parameters per unit of a manifest weight's dim (low-rank or MLP width)."""
    return w["out_features"] + w["in_features"] if w["kind"] == "lowrank" else 3 * w["hidden"]


def fleet_batches(rows: list[tuple], per_batch: int = 10_000) -> tuple[str, list]:
    """The fleet's rows as gac.batch/v1 batches of a synthetic H100 (what its agent would send),
    and the platform's fingerprint."""
    import uuid

    from gac.contracts.measurements import Batch, Measurement, PlatformDescriptor, RunInfo

    plat = PlatformDescriptor(device_kind="cuda", device_name="Synthetic H100 (fleet)", compute_capability="9.0", sm_count=132,
                              driver_version="560.0", cuda_runtime="12.6", torch_version="2.13.0")  # fmt: skip
    run = RunInfo(id=uuid.uuid5(uuid.NAMESPACE_URL, "gac-fleet"), agent="fleet", plan="fleet")
    ms = [
        Measurement(
            id=uuid.uuid5(uuid.NAMESPACE_URL, f"gac-fleet/{i}"),
            op=op,
            dtype=dtype,
            shape=shape,
            sweep_axis=axis,
            median_us=med,
            p10_us=p10,
            p90_us=p90,
            mean_us=med,
            n=n,
            timer="synthetic",
        )  # fmt: skip
        for i, (op, dtype, shape, axis, med, p10, p90, n) in enumerate(rows)
    ]
    batches = [
        Batch(id=uuid.uuid5(uuid.NAMESPACE_URL, f"gac-fleet/batch/{j}"), platform=plat, run=run, measurements=ms[j : j + per_batch])
        for j in range(0, len(ms), per_batch)
    ]
    return plat.fingerprint(), batches
