"""The proof's output: one Table-5-style table per compressor, plus what it was measured under
(the device as the agent's platform records it) and, per compressor, the issue's claims checked
on the figures: smaller is slower, GAC faster than unaligned and at least as fast as round-to-8,
each prediction within 3 % of the measurement."""

from __future__ import annotations

import dataclasses

from gac.proof.latency import DECODE_PASS_FACTOR
from gac.proof.objectives import FRONTIER, IMPORTANCE, LATENCY, QUALITY_TOL
from gac.proof.pipeline import (
    GAC_FRONTIER,
    GAC_IMPORTANCE,
    GAC_LATENCY,
    LEGACY_GAC,
    ORIGINAL,
    ROUND8,
    UNALIGNED,
    UNALIGNED_AGAIN,
    VARIANTS,
    CompressorResult,
    ProofResult,
)
from gac.proof.predict import FLAG, WITHIN, Z
from gac.proof.stats import LEVEL, MIN_ROUNDS, N_BOOT, Speedup


def _row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return [_row(header, widths), _row(["-" * w for w in widths], widths), *(_row(r, widths) for r in rows)]


def variant_names(r: CompressorResult) -> list[str]:
    """The variants this result holds, in table order (a run saved before the objectives has one GAC variant)."""
    return [v for v in VARIANTS if v in r.variants] + [v for v in r.variants if v not in VARIANTS]


def headline_gac(r: CompressorResult) -> str:
    return GAC_LATENCY if GAC_LATENCY in r.variants else LEGACY_GAC


def compressor_table(r: CompressorResult) -> list[str]:
    lat = r.latency
    qlabels = list(r.variants[ORIGINAL].quality.figures)
    header = ["variant", "%8", "%16", "weight params", "model params", *qlabels]
    header += [f"{s.label} {s.unit} [min-max]" for s in lat.settings]
    header += [f"{s.label} speed-up [95% CI]" for s in lat.settings]
    rows = []
    for name in variant_names(r):
        v = r.variants[name]
        budget_note = "" if v.within_budget else " (over budget)"
        cells = [name, f"{v.aligned8:.0%}", f"{v.aligned16:.0%}", f"{v.weight_params:,}{budget_note}", f"{v.model_params:,}"]
        cells += [f"{v.quality.figures[q]:.4f}" for q in qlabels]
        for s in lat.settings:
            st = lat.stat(name, s.label)
            cells.append(f"{st.median / 1e3:.2f} [{st.lo / 1e3:.2f}-{st.hi / 1e3:.2f}]")
        for s in lat.settings:
            if name == UNALIGNED:
                cells.append("1 (baseline)")
                continue
            sp = lat.speedup(name, UNALIGNED, s.label)
            cells.append(f"{sp.median:.3f}x [{sp.ci_lo:.3f}-{sp.ci_hi:.3f}]")
        rows.append(cells)
    return _table(header, rows)


def prediction_table(r: CompressorResult) -> list[str]:
    """Predicted (solver's denoised curves) vs measured speed-up over unaligned, per variant and setting."""
    if not r.predictions:
        return []
    lat = r.latency
    header = ["variant", "kernel pred"]
    for s in lat.settings:
        header += [f"{s.label} pred [{LEVEL:.0%}]", f"{s.label} meas [{LEVEL:.0%} CI]", f"{s.label} diff"]
    rows: list[list[str]] = []
    flags: list[str] = []
    lacking: list[str] = []
    notes: list[str] = []
    for name in variant_names(r):
        vp = r.predictions.get(name)
        if vp is None:
            continue
        if vp.note or vp.missing:
            rows.append([name, *(["-"] * (len(header) - 1))])
            if vp.note:
                notes.append(f"  {name}: {vp.note}")
            else:
                notes.append(f"  {name}: incomplete, {len(vp.missing)} curve points missing (below)")
            lacking += [f"  {name}: {m}" for m in vp.missing[:8]]
            if len(vp.missing) > 8:
                lacking.append(f"  {name}: ... and {len(vp.missing) - 8} more")
            continue
        ks = vp.kernel_speedup
        cells = [name, f"{ks:.3f}x" if ks is not None else "-"]
        for sp in vp.settings:
            m = sp.measured
            cells += [
                f"{sp.speedup:.3f}x [{sp.lo:.3f}-{sp.hi:.3f}]",
                f"{m.median:.3f}x [{m.ci_lo:.3f}-{m.ci_hi:.3f}]",
                f"{sp.diff:+.3f}{' !' if sp.flagged else ''}",
            ]
            if sp.flagged:
                flags.append(f"  {name} {sp.label}: predicted {sp.speedup:.3f}x vs measured {m.median:.3f}x: {sp.misses()}")
        rows.append(cells)
    out = [
        f"predicted vs measured speed-up over unaligned. kernel pred: the compressed weights' kernels at the variant's dims vs"
        f" the unaligned dims, token-weighted as the solver weights them, from the solver's denoised curve estimates (not raw"
        f" medians). S pred: measured unaligned model time minus that setting's predicted kernel saving [+/-{Z} sigma of the"
        f" curve estimates], on a CPU the saving scaled by the unaligned model's compressed modules clocked in place"
        f" against their profile, on a GPU unscaled;"
        f" meas: paired ratio [{LEVEL:.0%} bootstrap CI]; diff = pred - meas, ! when |diff| > {FLAG}",
    ]
    factors = {sp.label: _in_place(sp) for vp in r.predictions.values() for sp in vp.settings if sp.in_place_us is not None}
    if factors:
        out.append("in place: " + ", ".join(f"{label} {said}" for label, said in factors.items()))
    saved = [
        f"{name} {sp.label} {sp.modules_saving_us:+.0f} us (profile {sp.saving_us:+.0f} us)"
        for name, vp in r.predictions.items()
        for sp in vp.settings
        if sp.modules_saving_us is not None
    ]
    if saved:
        out.append("what the compressed modules saved in place, measured (the profile's kernels): " + ", ".join(saved))
    out += _table(header, rows)
    if notes:
        out.append("no prediction:")
        out += notes
    if flags:
        out.append(f"|predicted - measured| > {FLAG}: what the prediction misses")
        out += flags
    if lacking:
        out.append("prediction incomplete: curve points missing")
        out += lacking
    return out


def objectives_lines(r: CompressorResult) -> list[str]:
    """What each objective chose on the same profile, and how the frontier variant was picked."""
    out: list[str] = []
    a = r.alignments
    if a:
        parts = []
        for kind, label in ((IMPORTANCE, "importance-only"), (LATENCY, "latency-aware"), (FRONTIER, "frontier")):
            res = a.get(kind)
            if res is None:
                continue
            p = res.latency
            eps = f" epsilon {res.epsilon}" if res.epsilon is not None and kind != IMPORTANCE else ""
            us = f"{p.aligned_us:.0f} us" if p.aligned_us is not None else "no prediction"
            kept = f", keeps {p.importance_kept:.4f}" if p.importance_kept is not None else ""
            parts.append(f"{label}{eps} ({res.objective_kind}): {us}{kept}")
        out.append("objectives on the same profile (predicted GEMM time, token-weighted): " + "; ".join(parts))
        fr = a.get(FRONTIER)
        if fr is not None and fr.frontier:
            pts = sorted(fr.frontier, key=lambda p: p.latency_us)
            out.append(
                f"frontier: {len(pts)} Pareto points, {pts[0].latency_us:.0f} us (keeps {pts[0].importance_kept:.4f})"
                f" to {pts[-1].latency_us:.0f} us (keeps {pts[-1].importance_kept:.4f})"
            )
    f = r.frontier
    if f is not None:
        out.append(f"{GAC_FRONTIER}: {f.note}")
        for t in sorted(f.tries, key=lambda t: t.rank):
            q = (
                f"quality {t.quality:.4f} {'within' if t.qualifies else 'NOT within'} {QUALITY_TOL:.0%}"
                if t.quality is not None
                else "not scored"
            )
            mark = " <- picked" if f.picked is not None and f.tries[f.picked] is t else ""
            out.append(f"  point {t.rank}: {t.latency_us:.0f} us, keeps {t.importance_kept:.4f}, {t.params:,} params: {q} ({t.note}){mark}")
        if f.skipped:
            out.append(f"  {len(f.skipped)} points skipped: {'; '.join(f.skipped[:3])}{' ...' if len(f.skipped) > 3 else ''}")
    return out


def verdict(r: CompressorResult, model: str = "") -> list[str]:
    """The issue's targets, checked on the figures above (nothing else)."""
    lat = r.latency
    gac = headline_gac(r)
    out = []
    if UNALIGNED_AGAIN in r.variants:
        out.append(f"control: {UNALIGNED_AGAIN} (the same dims, another instance) vs unaligned: what instances of one model differ by")
        for s in lat.settings:
            sp = lat.speedup(UNALIGNED_AGAIN, UNALIGNED, s.label)
            out.append(f"  {s.label}: {sp.median:.3f}x, 95% CI [{sp.ci_lo:.3f}-{sp.ci_hi:.3f}] (range {sp.lo:.3f}-{sp.hi:.3f})")
    out.append(f"target: {gac} vs unaligned at the same budget; measurably faster = 95% CI lower bound of the speed-up > 1.0")
    for s in lat.settings:
        sp = lat.speedup(gac, UNALIGNED, s.label)
        out.append(
            f"  {s.label}: {sp.median:.3f}x, 95% CI [{sp.ci_lo:.3f}-{sp.ci_hi:.3f}], faster in {sp.faster}/{sp.n} rounds"
            f" (range {sp.lo:.3f}-{sp.hi:.3f}): {sp.verdict()}"
        )
    if GAC_IMPORTANCE in r.variants and GAC_LATENCY in r.variants:
        out.append(
            f"target: {GAC_LATENCY} faster than {GAC_IMPORTANCE} (paired ratio importance-only / latency-aware, 95% CI lower bound > 1.0)"
        )
        same = r.variants[GAC_LATENCY].dims == r.variants[GAC_IMPORTANCE].dims
        for s in lat.settings:
            sp = lat.speedup(GAC_LATENCY, GAC_IMPORTANCE, s.label)
            note = " (same dims: any difference is noise)" if same else ""
            out.append(f"  {s.label}: {sp.median:.3f}x, 95% CI [{sp.ci_lo:.3f}-{sp.ci_hi:.3f}]: {sp.verdict()}{note}")
    q_un = r.variants[UNALIGNED].quality
    tol = f"at most {QUALITY_TOL:.0%} {'lower (higher is better)' if q_un.higher_is_better else 'higher (lower is better)'}"
    out.append(f"target: quality within {QUALITY_TOL:.0%} of unaligned ({tol})")
    for name in (GAC_IMPORTANCE, GAC_LATENCY, GAC_FRONTIER, LEGACY_GAC):
        if name not in r.variants:
            continue
        q = r.variants[name].quality
        met = "met" if q.no_worse_than(q_un, QUALITY_TOL) else "NOT met"
        out.append(
            f"  quality: {name.removeprefix('GAC ')} {q.headline} {q.value:.4f} vs unaligned {q_un.value:.4f}"
            f" ({q.relative_change(q_un):+.2%}): {met}"
        )
    if model == "llama" and r.method == "prune":
        un = r.variants[UNALIGNED].dims
        moved = {n: sum(v.dims[k] != d for k, d in un.items()) for n, v in r.variants.items() if n.startswith("GAC")}
        still = all(c == 0 for c in moved.values())
        desc = ", ".join(f"{n.removeprefix('GAC ')} changes {c} of {len(un)} dims" for n, c in moved.items())
        out.append(f"llama prune, 'no change' before: {'still no change' if still else 'CHANGED'} ({desc})")
    return out


def direction(sp: Speedup) -> str:
    """How a paired ratio baseline / variant reads: 'faster' or 'slower' (95 % CI excludes 1.0),
    'same' (it includes 1.0), or 'few' (fewer rounds than a verdict needs)."""
    if sp.n < MIN_ROUNDS:
        return "few"
    return "faster" if sp.measurably_faster else "slower" if sp.measurably_slower else "same"


def _ratio(sp: Speedup) -> str:
    return f"{sp.median:.3f}x [{sp.ci_lo:.3f}-{sp.ci_hi:.3f}]"


def smaller_is_slower(sp: Speedup) -> str:
    """sp: original / unaligned. Is the unaligned compressed model slower than the original?"""
    return {
        "slower": "YES, smaller is slower: the unaligned compressed model is measurably slower than the original",
        "faster": "no: the unaligned compressed model is measurably faster than the original",
        "same": "not measurably: the 95% CI includes 1.0",
        "few": f"no verdict: {sp.n} rounds, the CI needs at least {MIN_ROUNDS}",
    }[direction(sp)]


def faster_than_unaligned(sp: Speedup) -> str:
    """sp: unaligned / GAC."""
    return {
        "faster": "yes, measurably faster",
        "slower": "NO: measurably slower",
        "same": "NOT measurably faster: the 95% CI includes 1.0",
        "few": f"no verdict: {sp.n} rounds, the CI needs at least {MIN_ROUNDS}",
    }[direction(sp)]


def as_fast_as_round8(sp: Speedup, same_dims: bool) -> str:
    """sp: round-to-8 / GAC. At least as fast = not measurably slower."""
    same = " (the same dims)" if same_dims else ""
    return {
        "faster": "yes, measurably faster",
        "same": f"yes, within noise: the 95% CI includes 1.0{same}",
        "slower": f"NO: measurably slower{same}",
        "few": f"no verdict: {sp.n} rounds, the CI needs at least {MIN_ROUNDS}",
    }[direction(sp)]


def claims(r: CompressorResult, where: str) -> list[str]:
    """The issue's claims for one compressor, each from the figures above, with the device they were measured on."""
    lat = r.latency
    gac = headline_gac(r)
    out = [f"claims ({r.method}, measured on {where}; paired ratios [95% CI]):"]
    for s in lat.settings:
        sp = lat.speedup(UNALIGNED, ORIGINAL, s.label)
        out.append(f"  smaller is slower? {s.label}: original / unaligned {_ratio(sp)}: {smaller_is_slower(sp)}")
    for s in lat.settings:
        sp = lat.speedup(gac, UNALIGNED, s.label)
        out.append(f"  {gac} faster than unaligned? {s.label}: {_ratio(sp)}: {faster_than_unaligned(sp)}")
    if ROUND8 in r.variants:
        same = r.variants[ROUND8].dims == r.variants[gac].dims
        for s in lat.settings:
            sp = lat.speedup(gac, ROUND8, s.label)
            out.append(f"  {gac} at least as fast as {ROUND8}? {s.label}: {ROUND8} / GAC {_ratio(sp)}: {as_fast_as_round8(sp, same)}")
    out += prediction_claims(r)
    return out


def prediction_claims(r: CompressorResult) -> list[str]:
    """Whether each model-level prediction is within WITHIN of the measured speed-up."""
    rows = [(name, sp) for name in variant_names(r) if (vp := r.predictions.get(name)) is not None for sp in vp.settings]
    if not rows:
        return [f"  predictions within {WITHIN:.0%} of measured? none to check (no complete prediction)"]
    misses = [(name, sp) for name, sp in rows if not sp.within()]
    out = [
        f"  predictions within {WITHIN:.0%} of measured (|predicted / measured - 1| <= {WITHIN})?"
        f" {len(rows) - len(misses)} of {len(rows)}{'' if misses else ': all'}"
    ]
    out += [
        f"    NOT within: {name} {sp.label}: predicted {sp.speedup:.3f}x, measured {sp.measured.median:.3f}x"
        f" ({sp.speedup / sp.measured.median - 1:+.1%})"
        for name, sp in misses
    ]
    return out


def render(res: ProofResult) -> str:
    cfg = res.config
    lat = res.results[0].latency if res.results else None
    on = f"{cfg.threads} CPU thread(s)" if not res.gpu else f"on {cfg.device}"
    lines = [
        res.subject_title,
        f"platform: profiled on {res.platform}, timed on {res.timed_on}; torch {res.torch_version};"
        f" batch 1 in {cfg.dtype or 'bfloat16'}, {on}; {res.quality_note}",
    ]
    if res.gpu:
        lines.append(f"GPU (the agent's platform): {res.gpu}; dtype {cfg.dtype}; host CPU: {res.cpu}")
    elif res.cpu:
        lines.append(f"CPU (the agent's platform): {res.cpu}; dtype {cfg.dtype or 'bfloat16'}")
    if res.dtype_note:
        lines.append(res.dtype_note)
    if res.retimed_from:
        lines.append(f"re-timed from {res.retimed_from}: dims and alignments as saved there; quality re-scored, latency re-measured")
    if lat is not None:
        decode = any(s.kind == "decode" for s in lat.settings)
        steps = f" ({lat.passes * DECODE_PASS_FACTOR} single-token steps for decode)" if decode else ""
        clock = "perf_counter"
        if lat.device.startswith("cuda"):
            clock = "CUDA events around each pass, read after a synchronize"
            clock += (
                ", each pass a replay of the call's CUDA graph (the GPU's work and the graph's one launch, not a launch per kernel)"
                if lat.graphs
                else ", the host launching every kernel (eager)"
            )
        builds = (
            f"; {lat.instances} builds of every model, built in a shuffled order, round r timing build r mod {lat.instances}"
            if lat.instances > 1
            else ""
        )
        lines.append(
            f"latency: {lat.rounds} interleaved rounds, the order of (variant, setting) shuffled each round (seed {lat.seed}){builds};"
            f" per round and pair the median of {lat.passes} passes after one warm-up{steps}, clocked by {clock};"
            f" ms = median over rounds [min-max over rounds]; speed-up = median over rounds of the paired ratio unaligned / variant"
            f" [{LEVEL:.0%} bootstrap CI over rounds, {N_BOOT:,} resamples]"
        )
    for r in res.results:
        m = r.alignment
        lines += [
            "",
            f"== {r.method.upper()}, rho = {r.ratio:.2f}: budget {r.budget:,} of {r.original_weight_params:,} weight params"
            f" ({len(r.manifest.weights)} weights) ==",
        ]
        p = r.profile
        if p is not None:
            warm = {"warm": ", L2 warm (no flush)", "chain": ", calls chained (new weights each call, no flush)"}.get(p.l2, "")
            lines.append(
                f"profile: {p.points} GEMM points from the alignment's missing curves, {p.measured} measured ({p.failures} failed)"
                f" in {p.seconds:.0f} s at M = {r.manifest.workload.tokens}{warm};"
                f" solver {m.solver.method} {m.solver.seconds * 1e3:.1f} ms,"
                f" cross-check {m.solver.cross_check.method} agrees={m.solver.cross_check.agrees}"
            )
        if m.latency.complete:
            lines.append(
                f"solver's predicted GEMM time (sum over compressed weights, token-weighted): original {m.latency.original_us:.0f} us,"
                f" unaligned {m.latency.unaligned_us:.0f} us, aligned {m.latency.aligned_us:.0f} us"
            )
        lines += objectives_lines(r)
        lines += [f"warning: {w}" for w in m.warnings]
        lines += [f"note: {n}" for n in r.notes]
        lines.append(f"load average during timing: {r.load_before[0]:.2f} before, {r.load_after[0]:.2f} after")
        lines += compressor_table(r)
        lines += prediction_table(r)
        lines += verdict(r, cfg.model)
        lines += claims(r, res.timed_on)
        names = [n for n in variant_names(r) if n == UNALIGNED or n.startswith("GAC")]
        width = max(len(n) for n in names)
        lines += [f"{'dims:' if i == 0 else '':5} {n:{width}}  {_dims(r.variants[n].dims)}" for i, n in enumerate(names)]
        lines.append(f"({res.footnote.format(params=r.variants[ORIGINAL].model_params)})")
    return "\n".join(lines)


def _dims(d: dict[str, int]) -> str:
    return " ".join(str(v) for v in d.values())


def to_json(res: ProofResult) -> dict:
    """Everything behind the tables: config, dims, quality, per-round medians, the alignment and the raw profile.

    gac.proof.retime rebuilds and re-times the variants from this."""
    out: dict = {
        "schema": "gac.proof-run/v1",
        "platform": res.platform,
        "timed_on": res.timed_on,
        "cpu": res.cpu,
        "gpu": res.gpu,
        "torch": res.torch_version,
        "retimed_from": res.retimed_from,
        "spec": res.spec,
        "config": res.config.to_json(),
        "results": [],
    }
    for r in res.results:
        lat = r.latency
        out["results"].append(
            {
                "method": r.method,
                "ratio": r.ratio,
                "budget": r.budget,
                "manifest": r.manifest.model_dump(mode="json", by_alias=True),
                "alignment": r.alignment.model_dump(mode="json", by_alias=True),
                "alignments": {k: a.model_dump(mode="json", by_alias=True) for k, a in r.alignments.items()},
                "frontier_pick": dataclasses.asdict(r.frontier) if r.frontier is not None else None,
                "predictions": {n: _prediction_json(p) for n, p in r.predictions.items()},
                "profile_summary": dataclasses.asdict(r.profile) if r.profile is not None else None,
                "profile": [m.model_dump(mode="json") for m in r.measurements],
                "notes": r.notes,
                "load": {"before": r.load_before, "after": r.load_after},
                "latency": {
                    "rounds": lat.rounds,
                    "passes": lat.passes,
                    "threads": lat.threads,
                    "seed": lat.seed,
                    "device": lat.device,
                    "settings": [dataclasses.asdict(s) for s in lat.settings],
                    "in_place_variant": lat.in_place_variant,
                    "in_place_us_per_round": lat.in_place,
                    "graphs": lat.graphs,
                    "instances": lat.instances,
                    "eager": {f"{v} {label}": why for (v, label), why in lat.eager.items()},
                },
                "variants": {
                    name: {
                        "dims": v.dims,
                        "aligned8": v.aligned8,
                        "aligned16": v.aligned16,
                        "weight_params": v.weight_params,
                        "model_params": v.model_params,
                        "within_budget": v.within_budget,
                        "quality": v.quality.figures,
                        "quality_headline": v.quality.headline,
                        "us_per_round": {s: lat.medians[(name, s)] for s in lat.labels},
                        "preempted_passes_per_round": {s: lat.preempted[(name, s)] for s in lat.labels},
                        "modules_in_place_us_per_round": {s: lat.modules[(name, s)] for s in lat.labels if (name, s) in lat.modules},
                        "speedup_vs_unaligned": {s: dataclasses.asdict(lat.speedup(name, UNALIGNED, s)) for s in lat.labels},
                    }
                    for name, v in r.variants.items()
                },
                "seconds": r.seconds,
            }
        )
    return out


def _in_place(sp) -> str:
    """One setting's in-place figures in words: the unaligned modules against their profile, what the saving is
    scaled by, and the two points' fit where there is one (reported, not applied)."""
    unaligned = f"unaligned modules {sp.in_place_us / sp.kernel_unaligned_us:.2f}x their profile"
    applied = "saving unscaled (a GPU)" if sp.on_gpu else f"saving scaled {sp.in_place_factor:.2f}x"
    if (cal := sp.calibration) is None:
        why = "" if sp.original_in_place_us is None else " (with the original's modules a and c not separable)"
        return f"{unaligned}, {applied}{why}"
    original = f"original's {sp.original_in_place_us / sp.kernel_original_us:.2f}x"
    return f"{unaligned}, {applied} ({original}: in place = {cal[0]:.2f} x profile {cal[1]:+.1f} us per launch, not applied)"


def _prediction_json(p) -> dict:
    return {
        "kernel_us": p.kernel_us,
        "kernel_unaligned_us": p.kernel_unaligned_us,
        "kernel_speedup": p.kernel_speedup,
        "missing": p.missing,
        "note": p.note,
        "settings": {
            s.label: {
                "kernel_unaligned_us": s.kernel_unaligned_us,
                "kernel_us": s.kernel_us,
                "saving_us": s.saving_us,
                "saving_sigma_us": s.saving_sigma_us,
                "measured_unaligned_us": s.measured_unaligned_us,
                "in_place_us": s.in_place_us,
                "in_place_factor": s.in_place_factor,
                "original_in_place_us": s.original_in_place_us,
                "kernel_original_us": s.kernel_original_us,
                "launches": s.launches,
                "launches_original": s.launches_original,
                "calibration": s.calibration,
                "on_gpu": s.on_gpu,
                "modules_us": s.modules_us,
                "modules_saving_us": s.modules_saving_us,
                "predicted": s.speedup,
                "predicted_lo": s.lo,
                "predicted_hi": s.hi,
                "measured": s.measured.median,
                "measured_ci": [s.measured.ci_lo, s.measured.ci_hi],
                "diff": s.diff,
                "flagged": s.flagged,
                "within": s.within(),
            }
            for s in p.settings
        },
    }
