"""The proof's output: one Table-5-style table per compressor, plus what it was measured under."""

from __future__ import annotations

import dataclasses

from proof.latency import DECODE_PASS_FACTOR
from proof.pipeline import GAC, ORIGINAL, UNALIGNED, VARIANTS, CompressorResult, ProofResult
from proof.stats import LEVEL, N_BOOT


def _row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return [_row(header, widths), _row(["-" * w for w in widths], widths), *(_row(r, widths) for r in rows)]


def compressor_table(r: CompressorResult) -> list[str]:
    lat = r.latency
    qlabels = list(r.variants[ORIGINAL].quality.figures)
    header = ["variant", "%8", "%16", "weight params", "model params", *qlabels]
    header += [f"{s.label} {s.unit} [min-max]" for s in lat.settings]
    header += [f"{s.label} speed-up [95% CI]" for s in lat.settings]
    rows = []
    for name in VARIANTS:
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


def verdict(r: CompressorResult) -> list[str]:
    """The issue's targets, checked on the figures above (nothing else)."""
    lat = r.latency
    out = ["target: GAC-aligned vs unaligned at the same budget; measurably faster = 95% CI lower bound of the speed-up > 1.0"]
    for s in lat.settings:
        sp = lat.speedup(GAC, UNALIGNED, s.label)
        out.append(
            f"  {s.label}: {sp.median:.3f}x, 95% CI [{sp.ci_lo:.3f}-{sp.ci_hi:.3f}], faster in {sp.faster}/{sp.n} rounds"
            f" (range {sp.lo:.3f}-{sp.hi:.3f}): {sp.verdict()}"
        )
    q_un, q_gac = r.variants[UNALIGNED].quality, r.variants[GAC].quality
    rel = q_gac.relative_change(q_un)
    if q_gac.higher_is_better:
        rule = "target: at most 1% lower (higher is better)"
    else:
        rule = "target: at most 1% higher (lower is better)"
    met = "met" if q_gac.no_worse_than(q_un, 0.01) else "NOT met"
    out.append(f"  quality: GAC {q_gac.headline} {q_gac.value:.4f} vs unaligned {q_un.value:.4f} ({rel:+.2%}; {rule}: {met})")
    return out


def render(res: ProofResult) -> str:
    cfg = res.config
    lat = res.results[0].latency if res.results else None
    lines = [
        res.subject_title,
        f"platform: profiled on {res.platform}, timed on {res.timed_on}; torch {res.torch_version};"
        f" batch 1 in {cfg.dtype or 'bfloat16'}, {cfg.threads} thread(s); {res.quality_note}",
    ]
    if res.dtype_note:
        lines.append(res.dtype_note)
    if res.retimed_from:
        lines.append(f"re-timed from {res.retimed_from}: dims and alignments as saved there; quality re-scored, latency re-measured")
    if lat is not None:
        lines.append(
            f"latency: {lat.rounds} interleaved rounds, the order of (variant, setting) shuffled each round (seed {lat.seed});"
            f" per round and pair the median of {lat.passes} passes after one warm-up"
            f"{f' ({lat.passes * DECODE_PASS_FACTOR} single-token steps for decode)' if any(s.kind == 'decode' for s in lat.settings) else ''};"
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
            lines.append(
                f"profile: {p.points} GEMM points from the alignment's missing curves, {p.measured} measured ({p.failures} failed)"
                f" in {p.seconds:.0f} s at M = {r.manifest.workload.tokens}; solver {m.solver.method} {m.solver.seconds * 1e3:.1f} ms,"
                f" cross-check {m.solver.cross_check.method} agrees={m.solver.cross_check.agrees}"
            )
        if m.latency.complete:
            lines.append(
                f"solver's predicted GEMM time (sum over compressed weights, token-weighted): original {m.latency.original_us:.0f} us,"
                f" unaligned {m.latency.unaligned_us:.0f} us, aligned {m.latency.aligned_us:.0f} us"
            )
        lines += [f"warning: {w}" for w in m.warnings]
        lines += [f"note: {n}" for n in r.notes]
        lines.append(f"load average during timing: {r.load_before[0]:.2f} before, {r.load_after[0]:.2f} after")
        lines += compressor_table(r)
        lines += verdict(r)
        lines.append(f"dims: unaligned {_dims(r.variants[UNALIGNED].dims)}")
        lines.append(f"      GAC       {_dims(r.variants[GAC].dims)}")
        lines.append(f"({res.footnote.format(params=r.variants[ORIGINAL].model_params)})")
    return "\n".join(lines)


def _dims(d: dict[str, int]) -> str:
    return " ".join(str(v) for v in d.values())


def to_json(res: ProofResult) -> dict:
    """Everything behind the tables: config, dims, quality, per-round medians, the alignment and the raw profile.

    proof.retime rebuilds and re-times the variants from this."""
    out: dict = {
        "schema": "gac.proof-run/v1",
        "platform": res.platform, "timed_on": res.timed_on, "torch": res.torch_version, "retimed_from": res.retimed_from,
        "spec": res.spec, "config": res.config.to_json(), "results": [],
    }
    for r in res.results:
        lat = r.latency
        out["results"].append({
            "method": r.method,
            "ratio": r.ratio,
            "budget": r.budget,
            "manifest": r.manifest.model_dump(mode="json", by_alias=True),
            "alignment": r.alignment.model_dump(mode="json", by_alias=True),
            "profile_summary": dataclasses.asdict(r.profile) if r.profile is not None else None,
            "profile": [m.model_dump(mode="json") for m in r.measurements],
            "notes": r.notes,
            "load": {"before": r.load_before, "after": r.load_after},
            "latency": {"rounds": lat.rounds, "passes": lat.passes, "threads": lat.threads, "seed": lat.seed,
                        "settings": [dataclasses.asdict(s) for s in lat.settings]},
            "variants": {
                name: {
                    "dims": v.dims, "aligned8": v.aligned8, "aligned16": v.aligned16, "weight_params": v.weight_params,
                    "model_params": v.model_params, "within_budget": v.within_budget,
                    "quality": v.quality.figures, "quality_headline": v.quality.headline,
                    "us_per_round": {s: lat.medians[(name, s)] for s in lat.labels},
                    "preempted_passes_per_round": {s: lat.preempted[(name, s)] for s in lat.labels},
                    "speedup_vs_unaligned": {s: dataclasses.asdict(lat.speedup(name, UNALIGNED, s)) for s in lat.labels},
                }
                for name, v in r.variants.items()
            },
            "seconds": r.seconds,
        })
    return out
