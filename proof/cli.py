"""`gac proof`: compress a real model, align it against this machine's measured profile (the CPU,
or a CUDA GPU with --device cuda:N), print Table 5."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any

import typer

COMPRESSOR_SETS = {"both": ("asvd", "prune"), "all": ("asvd", "prune", "palu")}  # both: as before palu existed


def config_kwargs(
    model: str,
    compressor: str,
    ratio: float | None,
    seq: list[int] | None,
    decode_context: int | None,
    rounds: int | None,
    passes: int | None,
    window: int,
    rel_tol: float | None,
    threads: int,
    dtype: str | None = None,
    frontier_search: str | None = None,
    device: str | None = None,
    layers: int | None = None,
    retime: bool = False,
    eager: bool = False,
    profile_l2: str | None = None,
    no_slower: bool = False,
    instances: int | None = None,
) -> dict[str, Any]:
    """ProofConfig fields from command-line values (None: the config's default). Shared with benchmarks/proof.py.

    retime: for --retime (the saved run's model decides the lengths it takes, not --model)."""
    from gac.agent.platform import parse_device
    from gac.proof.llama import LLAMA_CONFIGS
    from gac.proof.objectives import SEARCHES
    from gac.proof.pipeline import COMPRESSORS, DECODERS, DTYPES, MODELS, PROFILE_L2, ProofConfig, check_device, check_positions

    if model not in MODELS:
        raise ValueError(f"--model: use {', '.join(MODELS)}")
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"--dtype: use {', '.join(DTYPES)}")
    if frontier_search is not None and frontier_search not in SEARCHES:
        raise ValueError(f"--frontier-search: use {', '.join(SEARCHES)}")
    methods = COMPRESSOR_SETS.get(compressor, (compressor,))
    if any(m not in COMPRESSORS for m in methods):
        raise ValueError(f"--compressor: use {', '.join(COMPRESSORS)}, both (asvd and prune) or all")
    if "palu" in methods and model not in DECODERS:
        raise ValueError(f"--compressor {compressor}: palu compresses a decoder's K/V heads: use --model {' or '.join(DECODERS)}")
    if layers is not None and model not in DECODERS:
        raise ValueError(f"--layers: only for --model {' or '.join(DECODERS)}")
    if device is not None:
        try:
            device = str(parse_device(device))  # "cuda" -> "cuda:0"; anything but cpu/cuda is refused
        except (RuntimeError, ValueError):
            raise ValueError(f"--device {device}: use cpu, cuda or cuda:N") from None
        check_device(device)
    kw: dict[str, Any] = {
        "model": model,
        "compressors": methods,
        "ratio": ratio,
        "window": window,
        "threads": threads,
        "seqs": tuple(seq) if seq else None,
        "decode_context": decode_context,
        "rounds": rounds,
        "passes": passes,
        "rel_tol": rel_tol,
        "dtype": dtype,
        "frontier_search": frontier_search,
        "device": device,
        "instances": instances,
    }
    if eager:
        kw["graphs"] = False
    if no_slower:
        kw["no_slower"] = True
    if profile_l2 is not None:
        if profile_l2 not in PROFILE_L2:
            raise ValueError(f"--profile-l2: use one of {', '.join(PROFILE_L2)}")
        if profile_l2 != "cold" and (device is None or not device.startswith("cuda")):
            raise ValueError(f"--profile-l2 {profile_l2}: only on a CUDA device (--device cuda[:N])")
        kw["profile_l2"] = profile_l2
    if layers is not None:
        kw["llama"] = dataclasses.replace(LLAMA_CONFIGS[model], layers=layers)
    kw = {k: v for k, v in kw.items() if v is not None}
    if not retime:
        check_positions(ProofConfig(**kw))  # lengths past the model's positions: said before anything is built
    return kw


def run(kw: dict[str, Any], quick: bool, save: Path | None, retime_file: Path | None, log: Any) -> str:
    """Run (or re-time) the proof; save the run; return the report."""
    from gac.proof.pipeline import ProofConfig, run_proof
    from gac.proof.report import render
    from gac.proof.retime import default_save_path, retime, save_run

    if retime_file is not None:
        # dtype and the kind of device: only to check they are the saved run's
        keep = ("rounds", "passes", "threads", "seqs", "decode_context", "dtype", "device", "graphs", "instances")
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
        model: Annotated[
            str,
            typer.Option(
                "--model",
                help="minilm (trained encoder) | llama (small random-weight decoder) | llama8b (Llama-3-8B's dims, random weights)",
            ),
        ] = "minilm",
        compressor: Annotated[
            str,
            typer.Option(
                "--compressor",
                help="asvd | prune | palu (decoders: K/V low rank per KV head) | both (asvd, prune) | all",
            ),
        ] = "both",
        ratio: Annotated[
            float | None,
            typer.Option(
                "--ratio",
                min=0.01,
                max=0.9,
                help="Budget ratio rho (default: asvd 0.15, prune 0.25, palu 0.5)",
            ),
        ] = None,
        quick: Annotated[bool, typer.Option("--quick", help="One prefill length, fewer rounds (a few minutes)")] = False,
        seq: Annotated[
            list[int] | None,
            typer.Option(
                "--seq",
                min=8,
                max=8192,
                help="Prefill sequence lengths (repeatable; up to the model's positions: minilm 512)",
            ),
        ] = None,
        decode_context: Annotated[
            int | None,
            typer.Option(
                "--decode-context",
                min=0,
                max=8191,
                help="decoders: decode at this context (0: off; default llama 256, llama8b 1024)",
            ),
        ] = None,
        rounds: Annotated[int | None, typer.Option("--rounds", min=1, max=200, help="Interleaved timing rounds (default 25)")] = None,
        passes: Annotated[int | None, typer.Option("--passes", min=1, max=100, help="Passes per round, median taken (default 5)")] = None,
        window: Annotated[int, typer.Option("--window", min=4, max=256, help="Candidate window +/- dims (what gets profiled)")] = 16,
        rel_tol: Annotated[
            float | None,
            typer.Option(
                "--rel-tol",
                min=0.0,
                max=0.5,
                help="A larger dim within this latency counts as as fast (default 0.02)",
            ),
        ] = None,
        threads: Annotated[int, typer.Option("--threads", min=1, help="CPU threads for profiling and timing alike (CPU only)")] = 1,
        dtype: Annotated[
            str | None,
            typer.Option(
                "--dtype",
                help="float32 | bfloat16 | float16 to compress for, profile and time in "
                "(default: the device's fast dtype, see `gac agent platform`)",
            ),
        ] = None,
        device: Annotated[
            str | None,
            typer.Option(
                "--device",
                help="cpu (default) | cuda | cuda:N | auto: where the models live, the agent profiles and the variants are timed",
            ),
        ] = None,
        eager: Annotated[
            bool,
            typer.Option(
                "--eager",
                help="CUDA: time the host launching every kernel, as eager PyTorch runs (default: replay each call"
                " from a CUDA graph, as serving engines run decode: the GPU's work and one launch per call are timed)",
            ),
        ] = False,
        profile_l2: Annotated[
            str | None,
            typer.Option(
                "--profile-l2",
                help="CUDA: cold (default: the L2 flushed before each sample, as the agent profiles) | warm (no"
                " flush; on an H100 it under-predicted even MiniLM's savings, whose weights fit the L2) | chain"
                " (8 calls back to back per sample, each on a new copy of its weights, as a decode step runs them)",
            ),
        ] = None,
        no_slower: Annotated[
            bool,
            typer.Option(
                "--no-slower",
                help="GAC latency-aware: no timed setting predicted slower than at the compressor's dims (a faster"
                " prefill never bought with a slower decode; the token weights are raised until none is)",
            ),
        ] = False,
        instances: Annotated[
            int | None,
            typer.Option(
                "--instances",
                min=1,
                max=8,
                help="Builds of every model, timed in rotation over the rounds, so that where one build's memory"
                " lands moves the intervals, not the ratios; each build holds the model's memory again"
                " (default: 2 on a GPU, 1 on a CPU; at most --rounds)",
            ),
        ] = None,
        layers: Annotated[
            int | None,
            typer.Option(
                "--layers",
                min=1,
                max=64,
                help="decoders: how many layers (default llama 4, llama8b 2)",
            ),
        ] = None,
        frontier_search: Annotated[
            str | None,
            typer.Option(
                "--frontier-search",
                help="bisect (default) | scan: how the frontier variant's points are scored for quality (at most 6)",
            ),
        ] = None,
        save: Annotated[
            Path | None,
            typer.Option(
                "--save",
                "--json",
                help="Write the run (dims, alignments, profile, timings) here; default benchmarks/out/proof-MODEL.json",
            ),
        ] = None,
        retime_file: Annotated[
            Path | None,
            typer.Option(
                "--retime",
                exists=True,
                dir_okay=False,
                help="Re-time a saved run: rebuild its variants from the saved dims, no profiling",
            ),
        ] = None,
    ) -> None:
        """Compress a model (ASVD, MLP pruning and/or PaLU), align with GAC on the device's measured profile,
        and print aligned share, params, quality and latency per variant."""
        try:
            kw = config_kwargs(
                model,
                compressor,
                ratio,
                seq,
                decode_context,
                rounds,
                passes,
                window,
                rel_tol,
                threads,
                dtype,
                frontier_search,
                device,
                layers,
                retime=retime_file is not None,
                eager=eager,
                profile_l2=profile_l2,
                no_slower=no_slower,
                instances=instances,
            )
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        from gac.proof.retime import BadOverride, DeviceMismatch, DtypeMismatch

        try:
            report = run(kw, quick, save, retime_file, log=lambda msg: typer.echo(msg, err=True))
        except DtypeMismatch as exc:
            raise typer.BadParameter(str(exc), param_hint="--dtype") from None
        except DeviceMismatch as exc:
            raise typer.BadParameter(str(exc), param_hint="--device") from None
        except BadOverride as exc:
            raise typer.BadParameter(str(exc)) from None
        except KeyboardInterrupt:  # its profile and timings are in memory until the run is saved, at its end
            typer.echo("interrupted: nothing saved (a proof saves its run when it ends); run it again to start over", err=True)
            raise typer.Exit(130) from None
        typer.echo(report)
