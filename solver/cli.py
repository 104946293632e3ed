"""`gac import asvd|palu|pruner FILE -o manifest.json`: a compressor's output as a gac.manifest/v1.

The manifest is what `gac align` takes. The command says what it assumed (the
model config, uniform importance when no scores are given, the budget taken from
the compressor's own dims, the workload); a file it cannot use gets one line
naming the problem and exit code 2. Solver-only: no web, no DB imports.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from gac.contracts.measurements import Dtype

EXIT_BAD_INPUT = 2


class Compressor(StrEnum):
    asvd = "asvd"  # ASVD / SVD-LLM: config.json with truncation_ranks
    palu = "palu"  # PaLU: config.json with head_wise_ranks
    pruner = "pruner"  # LLM-Pruner / Torch-Pruning: {module: kept width} + --config


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {' '.join(str(message).splitlines())}", err=True)
    return typer.Exit(EXIT_BAD_INPUT)


def import_command(
    compressor: Annotated[
        Compressor,
        typer.Argument(
            help="asvd (config.json with truncation_ranks), palu (config.json with head_wise_ranks), "
            "pruner (LLM-Pruner / Torch-Pruning width map {module: kept width})",
            case_sensitive=False,
            show_default=False,
        ),
    ],
    file: Annotated[
        Path,
        typer.Argument(help="the compressor's output file (JSON; YAML when named .yaml or .yml, as `gac align` reads)", show_default=False),
    ],
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", help="the original model's config.json (shapes); required for pruner, for asvd/palu it replaces FILE's own shapes"
        ),
    ] = None,
    importance: Annotated[
        Path | None, typer.Option("--importance", help="JSON {weight name: score >= 0}; without it every weight scores 1.0")
    ] = None,
    out: Annotated[Path | None, typer.Option("-o", "--out", help="write the manifest here (default: standard output)")] = None,
    model: Annotated[str | None, typer.Option("--model", help="model name (default: the config's _name_or_path)")] = None,
    target: Annotated[str | None, typer.Option("--target", help="platform to align for (its measurements)")] = None,
    tokens: Annotated[
        list[int] | None,
        typer.Option("--tokens", min=1, metavar="M", help="token count M of the workload; repeat for several (default 1024)"),
    ] = None,
    dtype: Annotated[
        str | None,
        typer.Option("--dtype", help="workload dtype: float16, bfloat16 or float32 (default: the config's torch_dtype, else float16)"),
    ] = None,
) -> None:
    """Turn a compressor's output into a gac.manifest/v1 for `gac align`."""
    from gac.contracts.manifest import MANIFEST_SCHEMA
    from gac.solver.importers import ImportErrorDetail, check_importance, import_asvd, import_palu, import_width_map, load_json

    try:
        data = load_json(file, "file")
        if data.get("schema") == MANIFEST_SCHEMA or "weights" in data:
            raise ImportErrorDetail(f"{file} is already a GAC manifest: align it with `gac align {file}`")
        shapes_cfg = load_json(config, "--config") if config is not None else None
        scores = check_importance(load_json(importance, "--importance"), str(importance)) if importance is not None else None
        cfg_for_dtype = shapes_cfg if shapes_cfg is not None else data
        workload, workload_note = _workload(tokens, dtype, cfg_for_dtype)
        common: dict[str, Any] = {"importance": scores, "model": model, "target": target, "workload": workload}
        if compressor is Compressor.asvd:
            got = import_asvd(data, model_config=shapes_cfg, **common)
        elif compressor is Compressor.palu:
            got = import_palu(data, model_config=shapes_cfg, **common)
        else:
            if shapes_cfg is None:
                raise ImportErrorDetail("pruner needs --config: the original (unpruned) model's config.json, for the shapes")
            got = import_width_map(data, shapes_cfg, **common)
    except ImportErrorDetail as exc:
        raise _fail(f"{exc}") from None

    text = json.dumps(got.manifest.model_dump(mode="json", by_alias=True, exclude_none=True), indent=1) + "\n"
    if out is not None and str(out) == "-":  # the usual spelling of standard output
        out = None
    if out is not None:
        try:
            out.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise _fail(f"cannot write {out}: {exc.strerror or exc}") from None
    else:
        typer.echo(text, nl=False)
    report = out is None  # the manifest went to stdout: the report goes to stderr
    m = got.manifest
    where = f"wrote {out}" if out is not None else "manifest"
    say = (lambda s: typer.echo(s, err=True)) if report else typer.echo
    say(f"{where}: {len(m.weights)} weights, {m.compressor}, model {m.model}")
    say("assumed:")
    say(f"  model config: {config if config is not None else file} ({got.shapes.describe() if got.shapes else '?'})")
    if scores is None:
        say(
            "  importance: uniform, every weight 1.0 (no --importance): the solver only trades parameters, and any "
            "choice of the same total is as good, so a dim may move far from the compressor's; --importance keeps what matters"
        )
    else:
        say(f"  importance: {importance} ({len(scores)} scores)")
    for note in got.notes:
        say(f"  {note}")
    say(f"  workload: {workload_note}")
    for warning in got.warnings:
        if scores is None and "importance" in warning:
            continue  # said above
        say(f"warning: {warning}")
    if out is not None:
        say(f"next: gac align {out}")


def _workload(tokens: list[int] | None, dtype: str | None, cfg: dict[str, Any]) -> tuple[dict[str, Any], str]:
    from gac.contracts.manifest import dtype_named
    from gac.solver.importers import ImportErrorDetail

    toks = list(tokens) if tokens else [1024]
    how = "--tokens" if tokens else "default; --tokens to change"
    known = {d.value for d in Dtype}
    if dtype is not None:
        if dtype_named(dtype) not in known:
            raise ImportErrorDetail(f"--dtype {dtype!r}: choose from {', '.join(sorted(known))} (or bf16, fp16, fp32)")
        chosen, why = dtype_named(dtype), "--dtype"
    elif isinstance(cfg.get("torch_dtype"), str) and dtype_named(cfg["torch_dtype"]) in known:
        chosen, why = dtype_named(cfg["torch_dtype"]), "the config's torch_dtype; --dtype to change"
    else:
        chosen, why = Dtype.float16.value, "default; --dtype to change"
    return {"tokens": toks, "dtype": chosen}, f"M = {', '.join(map(str, toks))} tokens ({how}), {chosen} ({why})"


def register(app: typer.Typer) -> None:
    """Add `gac import` to the `gac` application."""
    app.command("import")(import_command)
