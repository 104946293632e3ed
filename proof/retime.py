"""Save a proof run, and re-time it later without profiling again.

A full run spends most of its time profiling. The saved run (report.to_json)
holds the subject, the config, and per compressor the aligned manifest, the
alignment and every variant's dims. `retime` rebuilds the same subject and
compressor (both are deterministic: shipped sentences or seeded random ids and
weights), builds each variant at the saved dims, re-scores quality and times
again, so the timing can be repeated on a quiet machine.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from gac.contracts.alignment import AlignmentResult
from gac.contracts.manifest import Manifest
from gac.contracts.measurements import Measurement
from gac.proof.objectives import FrontierPick, FrontierTry
from gac.proof.pipeline import (
    ProfileSummary,
    ProofConfig,
    ProofResult,
    compress,
    evaluate,
    prepare,
    profile_lookup,
    proof_result,
    with_dtype,
)
from gac.proof.predict import predict
from gac.proof.report import to_json

SCHEMA = "gac.proof-run/v1"


class DtypeMismatch(ValueError):
    """A re-time asked for another dtype than the saved run was aligned for."""


class DeviceMismatch(ValueError):
    """A re-time asked for another kind of device (CPU, CUDA) than the saved run was profiled on."""


class BadOverride(ValueError):
    """A re-time's settings do not fit together with the saved run's (say, more builds than rounds)."""


def default_save_path(cfg: ProofConfig) -> Path:
    """benchmarks/out/proof-MODEL[-cuda][-quick].json in this checkout (else under the working directory)."""
    repo = Path(__file__).resolve().parents[1]
    root = repo if (repo / "benchmarks").is_dir() else Path.cwd()
    gpu = "-cuda" if torch.device(cfg.device).type == "cuda" else ""
    return root / "benchmarks" / "out" / f"proof-{cfg.model}{gpu}{'-quick' if cfg.quick else ''}.json"


def save_run(res: ProofResult, path: str | Path) -> Path:
    """Write the run whole or not at all (a stop mid-write leaves the file as it was: `--retime F --save F` rewrites F)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.partial")
    tmp.write_text(json.dumps(to_json(res), indent=1))
    os.replace(tmp, p)
    return p


def load_run(path: str | Path) -> dict:
    data = json.loads(Path(path).read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a saved proof run ({SCHEMA}); write one with `gac proof --save FILE`")
    return data


def retime(path: str | Path, log: Callable[[str], None] = print, **overrides: Any) -> ProofResult:
    """Rebuild the saved run's variants at their saved dims; re-score quality and re-time.

    overrides: ProofConfig fields for the timing (rounds, passes, threads, seqs,
    decode_context, seed, device). Prefill lengths other than the saved ones are timed
    too, but the alignment was profiled for the saved ones (the report says at which M).
    The dtype stays the saved run's: its dims were aligned for that dtype's curves; so does
    the kind of device (another GPU index is fine, a CPU run is not re-timed on a GPU)."""
    saved = load_run(path)
    cfg = ProofConfig.from_json(saved["config"])
    asked = overrides.pop("dtype", None)
    if asked is not None and asked != cfg.dtype:
        raise DtypeMismatch(f"{path} was aligned for {cfg.dtype}: re-time it in {cfg.dtype}, or run the proof again with dtype {asked}")
    device = overrides.get("device")
    if device is not None and torch.device(device).type != torch.device(cfg.device).type:
        raise DeviceMismatch(f"{path} was profiled on {cfg.device}: re-time it there, or run the proof again on {device}")
    try:
        cfg = dataclasses.replace(cfg, **{k: v for k, v in overrides.items() if v is not None})
    except ValueError as exc:  # ProofConfig's own checks, on the saved settings and the asked ones together
        raise BadOverride(f"re-timing {path}: {exc}") from None
    subject = prepare(cfg)
    cfg, why = with_dtype(cfg, by="by the saved run")
    log(why)
    results = []
    for r in saved["results"]:
        method = r["method"]
        manifest = Manifest.model_validate(r["manifest"])
        alignment = AlignmentResult.model_validate(r["alignment"])
        dims = {name: {k: int(d) for k, d in v["dims"].items()} for name, v in r["variants"].items()}
        cfg_m = dataclasses.replace(cfg, ratio=r["ratio"])
        comp = compress(method, cfg_m, subject)
        notes = [f"dims and alignment from {path}"]
        if comp.dims != dims["unaligned"]:
            changed = sum(comp.dims[k] != d for k, d in dims["unaligned"].items())
            notes.append(f"the compressor recomputed here differs from the saved dims in {changed} weights: built at the saved dims")
        log(f"[{method}] rebuilt from {path}")
        res = evaluate(method, cfg_m, subject, comp, manifest, alignment, dims, log)
        ps = r.get("profile_summary")
        res.profile = ProfileSummary(**ps) if ps else None
        res.notes = notes + list(r.get("notes", [])) + res.notes
        res.measurements = [Measurement.model_validate(m) for m in r.get("profile", [])]
        res.alignments = {k: AlignmentResult.model_validate(a) for k, a in (r.get("alignments") or {}).items()}
        fp = r.get("frontier_pick")
        if fp:
            res.frontier = FrontierPick(**{**fp, "tries": [FrontierTry(**t) for t in fp.get("tries", [])]})
        # Predictions again from the saved profile (the same denoised estimates) against the new timing.
        lookup = profile_lookup(res.measurements, alignment)
        res.predictions = predict(manifest, lookup, dims, res.latency)
        results.append(res)
    return proof_result(cfg, subject, results, retimed_from=str(path), dtype_note=why)
