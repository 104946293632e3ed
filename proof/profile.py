"""Align a manifest against this machine's own measured latency curves, in process.

align once with rules only to learn which curves are missing, turn them into a
sweep plan, time it with the profiler agent's runner and timer on the proof's device
(this CPU, or a CUDA GPU: gac.agent.timing.make_timer picks the timer), index
the measurements in a FileLookup and align again with measured candidates.

Which M: the manifest's workload.tokens are the GEMM row counts the model is timed
at (batch 1: each prefill S, and 1 for a decode step), so every curve is profiled
at exactly those M. The manifest allows one dim per weight but several token
counts, and the solver's latency of a dim is the token-weighted sum over them. With
equal weights that sum is in absolute µs, so the largest S dominates it (S = 512
carries 4x the weight of S = 128, and decode at M = 1 next to nothing). After
profiling we therefore weight each token count by 1 / (its measured total latency
of all compressed weights at the compressor's dims): each timed setting then
counts by its relative change, as the per-setting speed-ups report it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from gac.contracts.alignment import AlignmentResult, MissingCurve
from gac.contracts.manifest import Manifest
from gac.contracts.measurements import Measurement, PlatformDescriptor
from gac.contracts.plans import SweepPlan, Timing, plan_for_points
from gac.proof.latency import is_cuda
from gac.solver.align import AlignOptions, align
from gac.solver.candidates import CandidateOptions
from gac.solver.kinds import kernels
from gac.solver.lookup import FileLookup, LatencyLookup

# Short per-point timing: these are µs-scale GEMMs on a quiet core; the noise rule still applies.
PROFILE_TIMING = Timing(min_samples=10, max_samples=400, target_spread=0.05, median_ci=0.01, time_cap_ms=250.0, warmup_ms=10.0)


@dataclass
class MeasuredAlignment:
    rules: AlignmentResult  # the first pass: rule candidates only
    measured: AlignmentResult  # the second pass: candidates from this machine's curves
    manifest: Manifest  # what the second pass aligned: the input with balanced token weights
    plan: SweepPlan
    measurements: list[Measurement]
    failures: int
    platform: PlatformDescriptor
    seconds: float
    notes: list[str]


# A dim is a candidate only if every larger measured dim is more than this much slower:
# keeps a noisy low point inside a flat step from passing for a step edge.
REL_TOL = 0.02


def align_options(window: int, rel_tol: float = REL_TOL, window_rel: float = 0.0, paper_radius: int = 0) -> AlignOptions:
    """Candidates within d* +/- max(window, window_rel * d*), and (latency priced) the paper's window of
    multiples of 8 within +/- paper_radius steps: the windows are what gets profiled."""
    return AlignOptions(candidates=CandidateOptions(window=window, window_rel=window_rel, rel_tol=rel_tol, paper_radius=paper_radius))


def plan_for_missing(name: str, missing: list[MissingCurve], lookahead: int, timing: Timing = PROFILE_TIMING) -> SweepPlan:
    """A plan covering each missing curve's window plus `lookahead` dims above it.

    The lookahead lets the frontier see whether the window's top sits just before a
    step (the solver compares each dim with measured dims above it).
    """
    points = []
    for mc in missing:
        dims = set(mc.dims)
        if dims and lookahead > 0:
            dims |= set(range(max(dims) + 1, max(dims) + lookahead + 1))
        points += [(mc.op, mc.dtype, {**mc.fixed_shape, mc.axis: d}, mc.axis) for d in sorted(dims)]
    return plan_for_points(name, points, timing)


def token_totals(manifest: Manifest, lookup: LatencyLookup) -> dict[int, float] | None:
    """Per token count M: the measured latency (µs) of every weight's kernels at the manifest's dims; None if a point is missing."""
    totals: dict[int, float] = {}
    for m in manifest.workload.tokens:
        total = 0.0
        for w in manifest.weights:
            for k in kernels(w, m):
                point = lookup.curve(k.op, manifest.workload.dtype, k.fixed_shape, k.axis).get(k.scale * round(w.dim))
                if point is None:
                    return None
                total += k.count * point.latency_us
        totals[m] = total
    return totals


def balance_token_weights(manifest: Manifest, lookup: LatencyLookup) -> tuple[Manifest, str]:
    """The manifest with token_weights = 1 / (total latency at each M), largest 1; unchanged if a point is missing."""
    tokens = manifest.workload.tokens
    totals = token_totals(manifest, lookup) if len(tokens) > 1 else None
    if not totals or min(totals.values()) <= 0:
        return manifest, "token weights: as given (one token count, or the profile lacks the compressor's own dims)"
    low = min(totals.values())
    weights = [low / totals[m] for m in tokens]
    data = manifest.model_dump(mode="json", by_alias=True)
    data["workload"]["token_weights"] = weights
    desc = ", ".join(f"M={m}: {w:.3g} ({totals[m] / 1e3:.2f} ms)" for m, w in zip(tokens, weights))
    return Manifest.model_validate(data), f"token weights 1/(measured GEMM total at the compressor's dims): {desc}"


def measured_alignment(
    manifest: Manifest,
    window: int = 16,
    threads: int | None = 1,
    rel_tol: float = REL_TOL,
    window_rel: float = 0.0,
    paper_radius: int = 0,
    timing: Timing = PROFILE_TIMING,
    on_point: Callable[[int, int], None] | None = None,
    balance: bool = True,
    device: str = "cpu",
    profile_l2: str = "cold",
    no_slower: bool = False,
) -> MeasuredAlignment:
    """Profile exactly what the manifest's candidates need on `device`, then align with it.

    threads: the CPU's intra-op threads (CPU only; a CUDA timer takes none). profile_l2 (CUDA only
    unless "cold"): "warm", each sample follows an untimed call instead of an L2 flush, for a model
    whose weights stay in the L2 as it runs; "chain", each sample is calls back to back, each on a
    new copy of its weights (CudaTimer.chained), as a decode step runs its GEMMs. The agent's own
    profiles are always cold. no_slower: no timed token count predicted slower than at the
    compressor's dims (gac.solver.no_slower)."""
    import time

    from gac.agent.platform import detect_platform
    from gac.agent.runner import run_plan
    from gac.agent.timing import CudaTimer, make_timer

    started = time.perf_counter()
    opts = align_options(window, rel_tol, window_rel, paper_radius)
    rules = align(manifest, None, opts)
    # On the CPU the timer sets the thread count, before the platform (which records it) is read.
    timer = make_timer(device) if is_cuda(device) else make_timer(device, threads=threads)
    if profile_l2 != "cold":
        if not isinstance(timer, CudaTimer):
            raise ValueError(f"a {profile_l2} profile needs a CUDA device, not {device}")
        timer = timer.warm() if profile_l2 == "warm" else timer.chained()
    platform = detect_platform(device)
    # `missing` already holds the look-ahead above each window (gac.solver.candidates.needed_points).
    plan = plan_for_missing(f"proof-{manifest.compressor}", rules.missing, lookahead=0, timing=timing)
    progress = (lambda p: on_point(p.done, p.total)) if on_point is not None else None
    run = run_plan(plan, timer, device, on_progress=progress, adaptive=False)
    lookup = FileLookup.from_measurements(run.measurements, platform.fingerprint())
    manifest, measured, notes = align_measured(manifest, lookup, opts, balance, no_slower)
    return MeasuredAlignment(
        rules=rules,
        measured=measured,
        manifest=manifest,
        plan=plan,
        measurements=run.measurements,
        failures=len(run.failures),
        platform=platform,
        seconds=time.perf_counter() - started,
        notes=notes,
    )


def align_measured(
    manifest: Manifest, lookup: LatencyLookup, opts: AlignOptions, balance: bool = True, no_slower: bool = False
) -> tuple[Manifest, AlignmentResult, list[str]]:
    """The second pass, on the profile: the token weights balanced by it (balance), then the alignment,
    with no timed token count predicted slower than at the compressor's dims when no_slower
    (gac.solver.no_slower). Returns the manifest aligned, the alignment and what was noted."""
    notes: list[str] = []
    if balance:
        manifest, note = balance_token_weights(manifest, lookup)
        notes.append(note)
    # When the cliff-free dims of the windows cannot meet the budget, align() lets every
    # measured dim compete and says so in the result's warnings.
    measured = align(manifest, lookup, replace(opts, no_slower=True) if no_slower else opts)
    return manifest, measured, notes


def dims_of(result: AlignmentResult) -> dict[str, int]:
    """Chosen dim per weight (a group's dim applies to each member)."""
    out: dict[str, int] = {}
    for w in result.weights:
        for name in w.members or [w.name]:
            out[name] = w.dim
    return out
