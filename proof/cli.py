"""`gac proof`: compress a real model, align it against this CPU's measured profile, print Table 5."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer


def config_kwargs(
    model: str, compressor: str, ratio: float | None, seq: list[int] | None, decode_context: int | None,
    rounds: int | None, passes: int | None, window: int, rel_tol: float | None, threads: int, dtype: str | None = None,
    frontier_search: str | None = None,
) -> dict[str, Any]:
    """ProofConfig fields from command-line values (None: the config's default). Shared with benchmarks/proof.py."""
    from proof.objectives import SEARCHES
    from proof.pipeline import DTYPES

    if model not in ("minilm", "llama"):
        raise ValueError("--model: use minilm or llama")
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"--dtype: use {', '.join(DTYPES)}")
    if frontier_search is not None and frontier_search not in SEARCHES:
        raise ValueError(f"--frontier-search: use {', '.join(SEARCHES)}")
    methods = ("asvd", "prune") if compressor == "both" else (compressor,)
    if any(m not in ("asvd", "prune") for m in methods):
        raise ValueError("--compressor: use asvd, prune or both")
    kw: dict[str, Any] = {"model": model, "compressors": methods, "ratio": ratio, "window": window, "threads": threads,
                          "seqs": tuple(seq) if seq else None, "decode_context": decode_context,
                          "rounds": rounds, "passes": passes, "rel_tol": rel_tol, "dtype": dtype,
                          "frontier_search": frontier_search}
    return {k: v for k, v in kw.items() if v is not None}


def run(kw: dict[str, Any], quick: bool, save: Path | None, retime_file: Path | None, log: Any) -> str:
    """Run (or re-time) the proof; save the run; return the report."""
    from proof.pipeline import ProofConfig, run_proof
    from proof.report import render
    from proof.retime import default_save_path, retime, save_run

    if retime_file is not None:
        keep = ("rounds", "passes", "threads", "seqs", "decode_context", "dtype")  # dtype: only to check it is the saved one
        res = retime(retime_file, log=log, **{k: v for k, v in kw.items() if k in keep})
        if save is not None:
            log(f"saved to {save_run(res, save)}")
        return render(res)
    cfg = ProofConfig.quick_config(**kw) if quick else ProofConfig(**kw)
    res = run_proof(cfg, log=log)
    log(f"saved to {save_run(res, save or default_save_path(cfg))} (re-time with --retime FILE)")
    return render(res)


def register(app: typer.Typer) -> None:
    """Add `gac proof` to the `gac` application."""

    @app.command("proof")
    def proof(
        model: Annotated[str, typer.Option("--model", help="minilm (trained encoder) | llama (random-weight decoder)")] = "minilm",
        compressor: Annotated[str, typer.Option("--compressor", help="asvd | prune | both")] = "both",
        ratio: Annotated[float | None, typer.Option(
            "--ratio", min=0.01, max=0.9, help="Budget ratio rho (default: asvd 0.15, prune 0.25)",
        )] = None,
        quick: Annotated[bool, typer.Option("--quick", help="One prefill length, fewer rounds (a few minutes)")] = False,
        seq: Annotated[list[int] | None, typer.Option("--seq", min=8, max=1024, help="Prefill sequence lengths (repeatable)")] = None,
        decode_context: Annotated[int | None, typer.Option(
            "--decode-context", min=0, max=1000, help="llama: decode at this context (0: off; default 256)",
        )] = None,
        rounds: Annotated[int | None, typer.Option("--rounds", min=1, max=200, help="Interleaved timing rounds (default 25)")] = None,
        passes: Annotated[int | None, typer.Option("--passes", min=1, max=100, help="Passes per round, median taken (default 5)")] = None,
        window: Annotated[int, typer.Option("--window", min=4, max=256, help="Candidate window +/- dims (what gets profiled)")] = 16,
        rel_tol: Annotated[float | None, typer.Option(
            "--rel-tol", min=0.0, max=0.5, help="A larger dim within this latency counts as as fast (default 0.02)",
        )] = None,
        threads: Annotated[int, typer.Option("--threads", min=1, help="CPU threads for profiling and timing alike")] = 1,
        dtype: Annotated[str | None, typer.Option(
            "--dtype", help="float32 | bfloat16 | float16 to compress for, profile and time in "
                            "(default: this CPU's fast dtype, see `gac agent platform`)",
        )] = None,
        frontier_search: Annotated[str | None, typer.Option(
            "--frontier-search", help="bisect (default) | scan: how the frontier variant's points are scored for quality (at most 6)",
        )] = None,
        save: Annotated[Path | None, typer.Option(
            "--save", "--json", help="Write the run (dims, alignments, profile, timings) here; default benchmarks/out/proof-MODEL.json",
        )] = None,
        retime_file: Annotated[Path | None, typer.Option(
            "--retime", exists=True, dir_okay=False, help="Re-time a saved run: rebuild its variants from the saved dims, no profiling",
        )] = None,
    ) -> None:
        """Compress a model (ASVD and/or MLP pruning), align with GAC on this CPU's measured profile,
        and print aligned share, params, quality and latency per variant."""
        try:
            kw = config_kwargs(model, compressor, ratio, seq, decode_context, rounds, passes, window, rel_tol, threads, dtype,
                               frontier_search)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        from proof.retime import DtypeMismatch

        try:
            report = run(kw, quick, save, retime_file, log=lambda msg: typer.echo(msg, err=True))
        except DtypeMismatch as exc:
            raise typer.BadParameter(str(exc), param_hint="--dtype") from None
        typer.echo(report)
