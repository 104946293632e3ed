"""The whole proof: compress a model, align it against the measured profile of the device
it runs on (this CPU, or a CUDA GPU with --device cuda:N), build every variant, score
quality and time prefill (and decode) latency.

The device is one setting that flows everywhere: the models, the calibration and evaluation
data and the timed inputs live on it, the agent profiles on it (gac.agent.timing.make_timer
picks its timer), the variants are timed on it (gac.proof.latency picks the pass clock), and the
dtype defaults to its fast dtype (gac.agent.dtypes.choose_dtype). Thread counts apply to
the CPU only.

Variants per compressor: the original, the compressor's own (unaligned) dims,
naive round-to-nearest-8, and GAC's choices from measured candidates under three objectives
(gac.proof.objectives): importance-only (the paper's), latency-aware (epsilon 0.005), and the
fastest frontier point within 1 % of the unaligned quality. gac.proof.predict puts the speed-up the
solver's latency model predicts next to the measured one.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from gac.contracts.alignment import AlignmentResult
from gac.contracts.manifest import Manifest
from gac.contracts.measurements import PlatformDescriptor
from gac.proof.compress import (
    Compression,
    compress_asvd,
    compress_palu,
    compress_prune,
    compressed_modules,
    compressed_params,
    manifest_params,
    original_modules,
)
from gac.proof.latency import LatencyRun, Setting, is_cuda, settings_for, time_rounds
from gac.proof.llama import LLAMA_CONFIGS, LlamaConfig
from gac.proof.objectives import (
    FRONTIER,
    FRONTIER_TRIES,
    IMPORTANCE,
    LATENCY,
    SEARCHES,
    FrontierPick,
    objective_alignments,
    pick_frontier,
)
from gac.proof.predict import VariantPrediction, predict
from gac.proof.profile import REL_TOL, align_options, dims_of, measured_alignment
from gac.proof.quality import Quality
from gac.proof.subjects import Subject, make_subject, max_positions
from gac.solver.align import budget_params
from gac.solver.baselines import round_nearest
from gac.solver.kinds import original_params
from gac.solver.lookup import FileLookup, LatencyLookup

DEFAULT_RATIO = {"asvd": 0.15, "prune": 0.25, "palu": 0.5}  # palu: half the K/V projections' parameters
COMPRESSORS: dict[str, Callable[..., Compression]] = {"asvd": compress_asvd, "prune": compress_prune, "palu": compress_palu}
DECODER_ONLY = ("palu",)  # compressors that need a decoder's KV heads
ORIGINAL, UNALIGNED, ROUND8 = "original", "unaligned", "round-to-8"
# The control: the unaligned dims built a second time. What it measures against unaligned is what two
# instances of one model differ by (memory placement, allocation): a smaller difference is not a speed-up.
UNALIGNED_AGAIN = "unaligned, again"
GAC_IMPORTANCE, GAC_LATENCY, GAC_FRONTIER = "GAC importance-only", "GAC latency-aware", "GAC frontier <=1%"
GAC = GAC_LATENCY  # the headline GAC variant (the solver's default objective with measured data)
LEGACY_GAC = "GAC-aligned"  # runs saved before the objectives: one GAC variant
VARIANTS = (ORIGINAL, UNALIGNED, UNALIGNED_AGAIN, ROUND8, GAC_IMPORTANCE, GAC_LATENCY, GAC_FRONTIER)
OBJECTIVE_VARIANTS = {IMPORTANCE: GAC_IMPORTANCE, LATENCY: GAC_LATENCY, FRONTIER: GAC_FRONTIER}
MODELS = ("minilm", "llama", "llama8b")
DECODERS = ("llama", "llama8b")
DTYPES = ("float32", "bfloat16", "float16")
PROFILE_L2 = ("cold", "warm", "chain")  # ProofConfig.profile_l2
SAVED_BEFORE_DTYPES = "bfloat16"  # what runs saved before ProofConfig had a dtype were made in
DEFAULT_SEQS = {"minilm": (128, 256, 512), "llama": (128, 256, 512), "llama8b": (1024, 2048)}
CUDA_SEQS = {"llama": (1024, 2048), "llama8b": (1024, 2048)}  # the decoders' prefill lengths on a GPU
DEFAULT_DECODE_CONTEXT = {"minilm": None, "llama": 256, "llama8b": 1024}
QUICK_DECODE_CONTEXT = {"llama": 128}


def default_seqs(model: str, device: str = "cpu") -> tuple[int, ...]:
    """The prefill lengths a model is timed at by default on a device."""
    return CUDA_SEQS.get(model, DEFAULT_SEQS[model]) if is_cuda(device) else DEFAULT_SEQS[model]


@dataclass(frozen=True)
class ProofConfig:
    model: str = "minilm"
    compressors: tuple[str, ...] = ("asvd", "prune")
    ratio: float | None = None  # None: DEFAULT_RATIO per compressor
    seqs: tuple[int, ...] | None = None  # prefill lengths; None: DEFAULT_SEQS of the model
    decode_context: int | None = None  # decode step after this many tokens; None: the model's default; 0: off
    rounds: int = 25
    passes: int = 5  # per round and (variant, setting): median of this many passes (decode: 4x)
    window: int = 16  # candidate window (+/- dims around each compressor dim) = what gets profiled
    window_rel: float = 0.0  # or this fraction of each dim, when larger
    rel_tol: float = REL_TOL
    paper_radius: int = 0  # latency priced: also multiples of 8 within this many steps (the paper's window: 8)
    balance_tokens: bool = True  # weight each timed M by 1 / its measured total (gac.proof.profile)
    threads: int = 1  # the CPU's intra-op threads for profiling and timing (CPU runs only)
    seed: int = 0
    quick: bool = False
    llama: LlamaConfig | None = None  # None: the model's (gac.proof.llama.LLAMA_CONFIGS); tests pass a tiny one
    llama_data: tuple[tuple[int, int], tuple[int, int]] = ((8, 128), (4, 128))  # (calibration, evaluation) random ids
    # The dtype compressed for, profiled and timed in; None: the device's fast dtype (settled by with_dtype).
    dtype: str | None = None
    frontier_search: str = "bisect"  # how the frontier variant's points are scored (gac.proof.objectives.pick_frontier)
    frontier_tries: int = FRONTIER_TRIES  # at most this many frontier points scored for quality
    device: str = "cpu"  # where models live, the agent profiles and the variants are timed: "cpu" or "cuda:N"
    graphs: bool = True  # on CUDA, time each pass as a CUDA graph's replay (False: the host launches every kernel)
    # On CUDA, how the profile's samples find the L2 (PROFILE_L2): "cold" (flushed), "warm" (for a model that
    # lives in it), "chain" (calls back to back, each on a new copy of its weights, as a decode step runs them).
    profile_l2: str = "cold"
    no_slower: bool = False  # GAC latency-aware: no timed setting predicted slower than the compressor's dims
    # Builds of every model, timed in rotation over the rounds (gac.proof.latency.time_rounds); None: 2 on
    # a GPU, where two builds of one small model differed by up to 6 %, 1 on a CPU, where they did not.
    instances: int | None = None

    def __post_init__(self) -> None:
        if self.dtype is not None and self.dtype not in DTYPES:
            raise ValueError(f"dtype {self.dtype!r}: use one of {DTYPES}")
        if self.profile_l2 not in PROFILE_L2:
            raise ValueError(f"profile_l2 {self.profile_l2!r}: use one of {', '.join(PROFILE_L2)}")
        if self.instances is not None and not 1 <= self.instances <= self.rounds:
            raise ValueError(f"instances {self.instances}: at least 1, and at most the rounds ({self.rounds})")
        if self.frontier_search not in SEARCHES:
            raise ValueError(f"frontier_search {self.frontier_search!r}: use one of {SEARCHES}")
        try:
            kind = torch.device(self.device).type
        except RuntimeError:
            kind = self.device
        if kind not in ("cpu", "cuda"):
            raise ValueError(f"device {self.device!r}: use cpu or cuda[:N]")
        bad = [c for c in self.compressors if c not in COMPRESSORS]
        if bad:
            raise ValueError(f"compressor {bad[0]!r}: use one of {tuple(COMPRESSORS)}")
        if self.model not in DECODERS and any(c in DECODER_ONLY for c in self.compressors):
            raise ValueError(f"palu compresses a decoder's K/V projections per KV head: use it with {' or '.join(DECODERS)}")

    @classmethod
    def quick_config(cls, **kw: Any) -> ProofConfig:
        model = kw.get("model") or "minilm"
        base: dict[str, Any] = {
            "seqs": default_seqs(model, kw.get("device") or "cpu")[:1],
            "rounds": 10,
            "passes": 3,
            "window": 16,
            "quick": True,
        }
        if model in QUICK_DECODE_CONTEXT:
            base["decode_context"] = QUICK_DECODE_CONTEXT[model]
        base.update({k: v for k, v in kw.items() if v is not None})
        return cls(**base)

    def ratio_for(self, method: str) -> float:
        return self.ratio if self.ratio is not None else DEFAULT_RATIO[method]

    @property
    def prefill_seqs(self) -> tuple[int, ...]:
        return self.seqs if self.seqs is not None else default_seqs(self.model, self.device)

    @property
    def llama_config(self) -> LlamaConfig:
        return self.llama if self.llama is not None else LLAMA_CONFIGS[self.model]

    @property
    def context(self) -> int | None:
        c = self.decode_context if self.decode_context is not None else DEFAULT_DECODE_CONTEXT[self.model]
        return c or None

    @property
    def settings(self) -> list[Setting]:
        return settings_for(self.prefill_seqs, self.context)

    def gemm_tokens(self) -> list[int]:
        """The M of every timed setting, for the manifest's workload (deduplicated, in order)."""
        return list(dict.fromkeys(s.gemm_m for s in self.settings))

    def subject_spec(self) -> dict:
        if self.model == "minilm":
            return {"model": "minilm"}
        return {
            "model": "llama",
            "config": self.llama_config.to_dict(),
            "seed": self.seed,
            "calib": list(self.llama_data[0]),
            "evaluation": list(self.llama_data[1]),
        }

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> ProofConfig:
        kw = dict(d)
        for k in ("compressors", "seqs"):
            if kw.get(k) is not None:
                kw[k] = tuple(kw[k])
        if kw.get("llama") is not None:
            kw["llama"] = LlamaConfig(**kw["llama"])
        if "llama_data" in kw:
            kw["llama_data"] = tuple(tuple(x) for x in kw["llama_data"])
        kw.setdefault("dtype", SAVED_BEFORE_DTYPES)  # an older saved run: keep the dtype it was made in
        return cls(**kw)

    def settled_dtype(self) -> str:
        if self.dtype is None:
            raise ValueError("ProofConfig.dtype is not settled yet: call with_dtype(cfg) first")
        return self.dtype

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.settled_dtype())

    @property
    def timed_instances(self) -> int:
        """How many builds of every model are timed in rotation (the field, else the device's default)."""
        if self.instances is not None:
            return self.instances
        return min(2, self.rounds) if torch.device(self.device).type == "cuda" else 1


def with_dtype(cfg: ProofConfig, by: str = "with --dtype") -> tuple[ProofConfig, str]:
    """cfg with its dtype settled (None: the device's fast dtype, as the agent's platform says: on CUDA
    bfloat16 from sm_80, float16 from sm_70), and one line saying which dtype and why."""
    from gac.agent.dtypes import choose_dtype
    from gac.agent.platform import detect_platform

    dtype, why = choose_dtype(detect_platform(cfg.device), cfg.dtype, by)
    return dataclasses.replace(cfg, dtype=dtype), why


@dataclass
class VariantResult:
    name: str
    dims: dict[str, int]
    aligned8: float
    aligned16: float
    weight_params: int  # the manifest's weights at these dims
    model_params: int  # every parameter of the built model (embeddings, norms, biases included)
    quality: Quality
    within_budget: bool


@dataclass
class ProfileSummary:
    points: int
    measured: int
    failures: int
    seconds: float
    platform: str
    l2: str = "cold"  # CUDA: each sample after an L2 flush (cold), after an untimed call (warm), or chained


@dataclass
class CompressorResult:
    method: str
    ratio: float
    manifest: Manifest  # as aligned (token weights set)
    budget: int
    original_weight_params: int
    alignment: AlignmentResult
    profile: ProfileSummary | None  # None: alignment not profiled in this run (re-timed, or rules only)
    variants: dict[str, VariantResult]
    latency: LatencyRun
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    notes: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    measurements: list = field(default_factory=list)  # the raw profile, for the saved run
    # objective ("importance", "latency", "frontier") -> its alignment on the same profile
    alignments: dict[str, AlignmentResult] = field(default_factory=dict)
    frontier: FrontierPick | None = None  # how the frontier variant was picked
    predictions: dict[str, VariantPrediction] = field(default_factory=dict)  # per variant but the unaligned


@dataclass
class ProofResult:
    config: ProofConfig
    platform: str
    torch_version: str
    subject_title: str
    quality_note: str
    footnote: str
    spec: dict
    results: list[CompressorResult]
    timed_on: str = ""  # the device the variants were timed on: name (fingerprint)
    cpu: str = ""  # the agent's platform of this machine's CPU: name and ISA (on a CUDA run: the host)
    gpu: str = ""  # on a CUDA run, the agent's platform of the GPU: name, compute capability, driver, CUDA, cuBLAS
    retimed_from: str | None = None
    dtype_note: str = ""  # which dtype the run used and why (gac.agent.dtypes.choose_dtype)


# An aligner: manifest -> (manifest as aligned, alignment, profile summary, notes, raw measurements).
Aligner = Callable[[Manifest], tuple[Manifest, AlignmentResult, ProfileSummary | None, list[str], list]]


def share(dims: Sequence[int], align: int) -> float:
    return sum(1 for d in dims if d % align == 0) / len(dims) if dims else 0.0


def original_dims(manifest: Manifest) -> dict[str, int]:
    """The uncompressed model's dims: a dense weight counts as its full size."""
    return {w.name: w.max_dim for w in manifest.weights}


def round8_dims(manifest: Manifest) -> dict[str, int]:
    return {w.name: round_nearest(w.dim, 8, w.max_dim) for w in manifest.weights}


def variant_dims(
    comp: Compression, manifest: Manifest, alignments: dict[str, AlignmentResult], frontier: FrontierPick | None = None
) -> dict[str, dict[str, int]]:
    """name -> dims for every variant (the frontier variant: the pick's dims, else the latency-aware ones)."""
    latency = dims_of(alignments[LATENCY])
    return {
        ORIGINAL: original_dims(manifest),
        UNALIGNED: dict(comp.dims),
        UNALIGNED_AGAIN: dict(comp.dims),
        ROUND8: round8_dims(manifest),
        GAC_IMPORTANCE: dims_of(alignments[IMPORTANCE]),
        GAC_LATENCY: latency,
        GAC_FRONTIER: dict(frontier.dims) if frontier is not None else latency,
    }


def profile_lookup(measurements: Sequence[Any], alignment: AlignmentResult) -> LatencyLookup | None:
    """The profile the alignment was made from, as a lookup (None: no measurements, rules only)."""
    if not measurements:
        return None
    return FileLookup.from_measurements(measurements, alignment.platform)


def gac_variants(
    method: str,
    cfg: ProofConfig,
    subject: Subject,
    comp: Compression,
    manifest: Manifest,
    alignment: AlignmentResult,
    lookup: LatencyLookup | None,
    log: Callable[[str], None] = print,
) -> tuple[dict[str, AlignmentResult], FrontierPick]:
    """The three objectives' alignments on one profile, and the frontier point within 1 % of unaligned quality."""
    opts = align_options(cfg.window, cfg.rel_tol, cfg.window_rel, cfg.paper_radius)
    alignments = objective_alignments(manifest, lookup, opts, have=alignment)
    for kind, res in alignments.items():
        log(f"[{method}] {kind}: dims {sorted(dims_of(res).values())}")
    baseline = subject.judge(comp.build(comp.dims))
    pick = pick_frontier(
        manifest,
        lookup,
        opts,
        alignments[FRONTIER],
        dims_of(alignments[LATENCY]),
        lambda dims: subject.judge(comp.build(dict(dims))),
        baseline,
        tries=cfg.frontier_tries,
        search=cfg.frontier_search,
    )
    log(f"[{method}] frontier: {pick.note}")
    return alignments, pick


def profiled_aligner(cfg: ProofConfig, log: Callable[[str], None], method: str) -> Aligner:
    """Profile the missing curves on the proof's device with the agent, then align (gac.proof.profile)."""

    def run(manifest: Manifest) -> tuple[Manifest, AlignmentResult, ProfileSummary | None, list[str], list]:
        last = [0.0]

        def progress(done: int, total: int) -> None:
            if time.perf_counter() - last[0] > 15 or done == total:
                last[0] = time.perf_counter()
                log(f"[{method}] profiling: {done}/{total} points")

        ma = measured_alignment(
            manifest,
            window=cfg.window,
            window_rel=cfg.window_rel,
            rel_tol=cfg.rel_tol,
            paper_radius=cfg.paper_radius,
            threads=cfg.threads,
            on_point=progress,
            balance=cfg.balance_tokens,
            device=cfg.device,
            profile_l2=cfg.profile_l2,
            no_slower=cfg.no_slower,
        )
        name = f"{ma.platform.device_name} ({ma.platform.fingerprint()[:12]})"
        summary = ProfileSummary(ma.plan.n_points(), len(ma.measurements), ma.failures, ma.seconds, name, cfg.profile_l2)
        return ma.manifest, ma.measured, summary, ma.notes, ma.measurements

    return run


def compress(method: str, cfg: ProofConfig, subject: Subject) -> Compression:
    """The compressor's decision; its manifest's workload is in cfg's dtype, so that is what gets profiled."""
    return COMPRESSORS[method](
        subject.model,
        subject.calibration,
        cfg.ratio_for(method),
        cfg.gemm_tokens(),
        cfg.settled_dtype(),
        model_name=subject.manifest_model,
    )


def run_compressor(
    method: str, cfg: ProofConfig, subject: Subject, log: Callable[[str], None] = print, aligner: Aligner | None = None
) -> CompressorResult:
    t: dict[str, float] = {}
    if cfg.dtype is None:
        cfg, why = with_dtype(cfg)
        log(why)
    t0 = time.perf_counter()
    comp = compress(method, cfg, subject)
    t["compress"] = time.perf_counter() - t0
    log(f"[{method}] compressed: dims {sorted(comp.dims.values())}")
    t0 = time.perf_counter()
    manifest, alignment, profile, notes, raw = (aligner or profiled_aligner(cfg, log, method))(comp.manifest)
    t["profile+align"] = time.perf_counter() - t0
    log(f"[{method}] aligned dims {sorted(dims_of(alignment).values())}")
    lookup = profile_lookup(raw, alignment)
    t0 = time.perf_counter()
    alignments, pick = gac_variants(method, cfg, subject, comp, manifest, alignment, lookup, log)
    t["objectives+frontier"] = time.perf_counter() - t0
    res = evaluate(method, cfg, subject, comp, manifest, alignments[LATENCY], variant_dims(comp, manifest, alignments, pick), log)
    res.profile, res.notes, res.measurements = profile, notes + res.notes, raw
    res.alignments, res.frontier = alignments, pick
    res.predictions = predict(manifest, lookup, {n: v.dims for n, v in res.variants.items()}, res.latency)
    res.seconds = t | res.seconds
    return res


def evaluate(
    method: str,
    cfg: ProofConfig,
    subject: Subject,
    comp: Compression,
    manifest: Manifest,
    alignment: AlignmentResult,
    dims_by_variant: dict[str, dict[str, int]],
    log: Callable[[str], None] = print,
) -> CompressorResult:
    """Build each variant at its dims, check its parameter count, score quality and time it."""
    t: dict[str, float] = {}
    budget = budget_params(manifest)
    models = {name: subject.model if name == ORIGINAL else comp.build(dims) for name, dims in dims_by_variant.items()}
    variants: dict[str, VariantResult] = {}
    t0 = time.perf_counter()
    for name, dims in dims_by_variant.items():
        m, ds = models[name], list(dims.values())
        # The original holds dense weights (a low-rank pair at full rank would hold more).
        wp = sum(original_params(w) for w in manifest.weights) if name == ORIGINAL else manifest_params(manifest, dims)
        if name != ORIGINAL:
            built_wp = compressed_params(m, manifest)
            if built_wp != wp:  # the builder must realise exactly the dims asked for
                raise AssertionError(f"{method}/{name}: built model holds {built_wp} weight params, manifest says {wp}")
        variants[name] = VariantResult(
            name=name,
            dims=dims,
            aligned8=share(ds, 8),
            aligned16=share(ds, 16),
            weight_params=wp,
            model_params=m.param_count(),
            quality=subject.judge(m),
            within_budget=name == ORIGINAL or wp <= budget,
        )
    t["quality"] = time.perf_counter() - t0

    settings = cfg.settings
    load_before = os.getloadavg()
    log(f"[{method}] timing {[s.label for s in settings]} x {len(models)} variants x {cfg.rounds} rounds (load {load_before[0]:.2f})")
    t0 = time.perf_counter()

    def make_fn(model: torch.nn.Module, s: Setting) -> Callable[[], object]:
        timed = subject.prefill if s.kind == "prefill" else subject.decode
        if timed is None:
            raise ValueError(f"{subject.key} has no {s.kind}")
        return timed(model, s.tokens, cfg.seed)

    lat = time_rounds(
        models,
        settings,
        make_fn,
        rounds=cfg.rounds,
        passes=cfg.passes,
        threads=cfg.threads,
        dtype=cfg.torch_dtype,
        seed=cfg.seed,
        on_round=lambda r: log(f"[{method}] timing round {r}/{cfg.rounds} done"),
        in_place=(UNALIGNED, lambda m: compressed_modules(m, manifest)) if UNALIGNED in models else None,
        clock_also=[name for name in models if name not in (ORIGINAL, UNALIGNED)],
        clock_original=(ORIGINAL, lambda m: original_modules(m, manifest)),
        device=cfg.device,
        graphs=cfg.graphs,
        instances=cfg.timed_instances,
    )
    t["latency"] = time.perf_counter() - t0
    return CompressorResult(
        method=method,
        ratio=cfg.ratio_for(method),
        manifest=manifest,
        budget=budget,
        original_weight_params=sum(original_params(w) for w in manifest.weights),
        alignment=alignment,
        profile=None,
        variants=variants,
        latency=lat,
        load_before=load_before,
        load_after=os.getloadavg(),
        seconds=t,
    )


def check_device(device: str) -> None:
    if is_cuda(device) and not torch.cuda.is_available():
        raise ValueError(f"device {device}: this torch ({torch.__version__}) has no CUDA, or no GPU is visible")


def check_positions(cfg: ProofConfig) -> None:
    """Fail before building, compressing and profiling when a timed length is past the model's positions."""
    limit = max_positions(cfg.subject_spec())
    if max(cfg.prefill_seqs) > limit or (cfg.context or 0) + 1 > limit:
        why = " (BERT's learned position embeddings end there)" if cfg.model == "minilm" else ""
        raise ValueError(
            f"{cfg.model} takes at most {limit} positions{why}: asked prefill {list(cfg.prefill_seqs)},"
            f" decode after {cfg.context or 0} tokens"
        )


def prepare(cfg: ProofConfig) -> Subject:
    """The subject on cfg's device, once the device and the lengths are known to work."""
    if cfg.model not in MODELS:
        raise ValueError(f"unknown model {cfg.model!r}: use one of {MODELS}")
    check_device(cfg.device)
    check_positions(cfg)
    torch.manual_seed(cfg.seed)
    if not is_cuda(cfg.device):
        torch.set_num_threads(cfg.threads)
    return make_subject(cfg.subject_spec(), cfg.device)


def describe_gpu(p: PlatformDescriptor) -> str:
    """The GPU as the agent's platform descriptor records it (unknown fields say so)."""

    def known(v: object) -> str:
        return str(v) if v else "unknown"

    return (
        f"{p.device_name}, compute capability {known(p.compute_capability)}, driver {known(p.driver_version)},"
        f" CUDA {known(p.cuda_runtime)}, cuBLAS {known(p.cublas_version)}"
    )


def proof_result(
    cfg: ProofConfig, subject: Subject, results: list[CompressorResult], retimed_from: str | None = None, dtype_note: str = ""
) -> ProofResult:
    from gac.agent.platform import detect_platform

    p = detect_platform(cfg.device, dtypes=False)  # the name and fingerprint only
    host = p if not is_cuda(cfg.device) else detect_platform("cpu", dtypes=False)
    here = f"{p.device_name} ({p.fingerprint()[:12]})"
    profiled = next((r.profile.platform for r in results if r.profile is not None), here)
    return ProofResult(
        config=cfg,
        platform=profiled,
        torch_version=torch.__version__,
        subject_title=subject.title,
        quality_note=subject.quality_note,
        footnote=subject.footnote,
        spec=subject.spec,
        results=results,
        timed_on=here,
        retimed_from=retimed_from,
        dtype_note=dtype_note,
        cpu=f"{host.device_name}, ISA {host.isa or 'unknown'}",
        gpu=describe_gpu(p) if is_cuda(cfg.device) else "",
    )


def run_proof(cfg: ProofConfig, log: Callable[[str], None] = print, aligner: Aligner | None = None) -> ProofResult:
    subject = prepare(cfg)  # sets the CPU's thread count first
    cfg, why = with_dtype(cfg)
    log(why)
    results = [run_compressor(m, cfg, subject, log, aligner) for m in cfg.compressors]
    return proof_result(cfg, subject, results, dtype_note=why)
