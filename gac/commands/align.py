"""`gac align MANIFEST`: against a server, the local (embedded) database, or a measurements file."""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

console = Console()
err = Console(stderr=True, soft_wrap=True)  # messages name files: never broken mid-line


def _load_manifest(path: Path) -> dict[str, Any]:
    import yaml

    try:
        text = path.read_text()
    except OSError as exc:
        err.print(f"[red]cannot read {path}: {exc.strerror}[/red]")
        raise typer.Exit(2) from exc
    try:
        body = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        err.print(f"[red]{path} is not valid JSON/YAML: {exc}[/red]")
        raise typer.Exit(2) from exc
    if not isinstance(body, dict):
        err.print(f"[red]{path}: a manifest is a JSON/YAML object, not a {type(body).__name__}[/red]")
        raise typer.Exit(2)
    return body


def _validation_exit(exc: Exception) -> typer.Exit:
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        for e in exc.errors():
            err.print(f"[red]{'.'.join(str(p) for p in e['loc'])}[/red]: {e['msg']}")
    else:
        err.print(f"[red]{exc}[/red]")
    return typer.Exit(2)


def _via_server(server: str, token: str | None, body: dict, platform: str | None, enqueue: bool) -> dict:
    from gac.client import Client, GacApiError, GacConnectionError

    try:
        with Client(server, token) as client:
            stored = client.align(body, platform=platform, enqueue_missing=enqueue)
    except GacConnectionError as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(1) from exc
    except GacApiError as exc:
        for e in exc.field_errors:
            err.print(f"[red]{e.field}[/red]: {e.message}")
        if not exc.field_errors:
            err.print(f"[red]{exc.status}: {exc.detail}[/red]")
        raise typer.Exit(2 if exc.status in (400, 422) else 1) from exc
    return stored.model_dump(mode="json", by_alias=True)


def _locally(db: str | None, body: dict, platform: str | None, enqueue: bool, exhaustive: bool = False) -> dict:
    from pydantic import ValidationError

    from gac.contracts.manifest import Manifest
    from service.align import service
    from service.db import make_engine, make_sessionmaker
    from service.errors import GacError
    from service.settings import get_settings
    from service.startup import ensure_schema

    try:
        manifest = Manifest.model_validate(body)
    except ValidationError as exc:
        raise _validation_exit(exc) from exc
    settings = get_settings(db)
    engine = make_engine(settings.url)
    ensure_schema(engine, settings)
    try:
        with make_sessionmaker(engine)() as session:
            target = service.resolve_platform(session, manifest, platform)
            result = service.run_alignment(session, manifest, target, exhaustive=exhaustive)
            jobs = service.enqueue_missing(session, settings, result, target) if enqueue and target else []
            row = service.store(session, manifest, target, result)
            # The stored text as the service serves it: compact above COMPACT_ABOVE_WEIGHTS (a
            # 100,000-weight result holds millions of candidates; as dicts they took gigabytes).
            head = service.to_stored(row, jobs).model_dump(mode="json", by_alias=True, exclude={"result"})
            return {**head, "result": json.loads(row.texts.result)}
    except GacError as exc:
        detail = exc.detail
        for d in detail if isinstance(detail, list) else [{"field": "", "message": detail}]:
            err.print(f"[red]{d['field']}[/red] {d['message']}")
        raise typer.Exit(2) from exc
    finally:
        engine.dispose()


def _from_file(measurements: Path, body: dict, exhaustive: bool = False) -> dict:
    from pydantic import ValidationError

    from gac.contracts.manifest import Manifest
    from solver.align import AlignOptions, BudgetBelowFeasible, align
    from solver.candidates import CandidateOptions
    from solver.lookup import FileLookup

    try:
        manifest = Manifest.model_validate(body)
    except ValidationError as exc:
        raise _validation_exit(exc) from exc
    try:
        lookup = FileLookup.from_csv(measurements) if measurements.suffix == ".csv" else FileLookup.from_jsonl(measurements)
    except OSError as exc:
        err.print(f"[red]cannot read {measurements}: {exc.strerror}[/red]")
        raise typer.Exit(2) from exc
    except ValueError as exc:  # the readers name the file and line
        err.print(str(exc).splitlines()[0], style="red", markup=False)
        raise typer.Exit(2) from exc
    from service.align.limits import COMPACT_ABOVE_WEIGHTS
    from service.align.service import compact_json

    try:
        result = align(manifest, lookup, AlignOptions(candidates=CandidateOptions(sparse=not exhaustive)))  # as the service
    except BudgetBelowFeasible as exc:
        raise _validation_exit(exc) from exc
    large = len(manifest.weights) > COMPACT_ABOVE_WEIGHTS  # compact, as the service answers
    return {"id": None, "jobs": [], "result": json.loads(compact_json(result)) if large else result.model_dump(mode="json", by_alias=True)}


def _short(name: str, width: int) -> str:
    """Shorten from the left, so layer numbers and the weight's own name stay readable."""
    return name if len(name) <= width else "…" + name[-(width - 1):]


SUMMARY_LABEL = 15  # the summary's label column: its texts wrap under themselves, readable at 80 columns


def _say(label: str, text: str) -> None:
    """One summary row: the label, then the text wrapped under itself (a hanging indent)."""
    for i, line in enumerate(Text.from_markup(text).wrap(console, max(20, console.width - SUMMARY_LABEL))):
        head = Text.from_markup(label if i == 0 else "")
        head.set_length(SUMMARY_LABEL)
        line.rstrip()
        console.print(Text.assemble(head, line), soft_wrap=True)


def _summary(res: dict) -> None:
    lat = res.get("latency", {})
    kind = res.get("objective_kind", "importance")
    goal = {"importance": "importance (the paper's objective)",
            "latency": f"latency, keeping at least {1 - (res.get('epsilon') or 0):.1%} of the importance-only optimum's kept importance",
            "frontier": "the speed/importance frontier"}[kind]  # fmt: skip
    if res.get("window") == "paper":
        goal += ", over the paper's window (multiples of 8 within +/- 64)"
    console.print(f"[bold]{res['model']}[/bold] on platform {res['platform'][:16]}")
    _say("optimized for", goal)
    if lat.get("complete") and lat.get("unaligned_us") and lat.get("aligned_us"):
        orig = f"; original {lat['original_us']:,.1f} µs" if lat.get("original_us") else ""
        _say("predicted", f"unaligned {lat['unaligned_us']:,.1f} µs -> GAC {lat['aligned_us']:,.1f} µs "
                          f"([bold]{lat['unaligned_us'] / lat['aligned_us']:.3f}x[/bold]){orig} (the compressed weights' kernels)")
        if lat.get("importance_only_us") and kind != "importance":
            _say("", f"importance-only GAC {lat['importance_only_us']:,.1f} µs ({lat['unaligned_us'] / lat['importance_only_us']:.3f}x); "
                     f"GAC keeps {lat.get('importance_kept', 1):.2%} of the importance it keeps")
    else:
        n = lat.get("missing_points") or sum(len(mc["dims"]) for mc in res.get("missing", []))
        why = "no latency data" if res.get("platform") == "rules only" else "incomplete"
        _say("predicted", f"{why}: {n:,} curve points missing (listed under `missing`; --profile-missing measures them)")
    _say("aligned dims", f"{res['aligned_share_before']:.0%} before -> {res['aligned_share_after']:.0%} after (% {res['align']})")
    _say("budget", f"{res['budget']:,} params; used {res['total_params']:,} ({res['total_params'] / res['budget']:.2%})")


TABLE_ROWS = 50  # weights listed in the table; --out or --json give every one


def _print(stored: dict, wide: bool = False) -> None:
    res = stored["result"]
    _summary(res)
    name_width = 200 if wide else max(12, console.width - 48)
    table = Table(show_lines=False, box=None)
    for col in ("weight", "before", "after", "params", "source", "latency µs"):
        table.add_column(col, justify="left" if col in ("weight", "source") else "right", no_wrap=True)
    for w in res["weights"][:TABLE_ROWS]:
        chosen: dict = next((c for c in w["candidates"] if c["dim"] == w["dim"]), {})
        lat = w.get("latency_us")
        table.add_row(
            _short(w["name"], name_width), f"{w['dim_before']:g}", str(w["dim"]), f"{w['params']:,}", chosen.get("source", "?"),
            f"{lat:,.1f}" if lat is not None else "-",
        )
    console.print(table)
    if len(res["weights"]) > TABLE_ROWS:
        console.print(f"… and {len(res['weights']) - TABLE_ROWS:,} more weights: --out FILE or --json gives every one")
    cc = res["solver"]["cross_check"]
    agree = {True: "agrees", False: "DISAGREES", None: "not proven"}[cc.get("agrees")]
    check = "no cross-check" if cc["method"] == "none" else f"cross-check {cc['method']} {cc['status']} {agree}"
    _say("solver", f"{res['solver']['method']} in {res['solver']['seconds'] * 1000:.1f} ms, objective {res['objective']:,.1f}; {check}")
    if res.get("baselines"):
        table = Table(box=None)
        for col in ("baseline", "params", "budget", "aligned", "speed-up", "gap to optimum"):
            table.add_column(col, justify="left" if col in ("baseline", "budget") else "right", no_wrap=True)
        for b in res["baselines"]:
            table.add_row(
                b["method"], f"{b['total_params']:,}", "within" if b["within_budget"] else "OVER", f"{b['aligned_share']:.0%}",
                f"{b['speedup']:.3f}x" if b.get("speedup") else "-",
                f"{b['gap_to_optimum']:.2e}" if b.get("gap_to_optimum") is not None else "-",
            )
        console.print(table)
    if res.get("frontier"):
        _say("frontier", f"{len(res['frontier'])} Pareto points (--json or the dashboard shows them)")
    if res.get("missing"):
        secs = sum(m.get("estimated_seconds") or 0 for m in res["missing"])
        _say("missing data", f"{len(res['missing'])} curves, about {secs:.0f} s to profile: --profile-missing measures them")
    for w in res.get("warnings", []):
        _say("[yellow]warning[/yellow]", w)
    if stored.get("id"):
        _say("stored as", f"{stored['id']}" + (f"; jobs queued: {stored['jobs']}" if stored.get("jobs") else ""))


def _profile_and_realign(stored: dict, run, server, token, db, device, threads, yes) -> dict:  # noqa: ANN001
    """Measure the missing points here when this machine is the platform, else queue them; align again."""
    from gac.commands import profile_missing as pm

    result = stored["result"]
    session = pm.this_machine(device, threads)
    here = session.platform.fingerprint()
    target = result["platform"]
    if target not in (here, pm.RULES_ONLY):
        if not server:
            err.print(
                f"[red]the alignment's platform {target[:16]} is not this machine ({here[:16]}, {session.platform.label()}): "
                "measure on that machine, or use --server to queue a profiling job for it[/red]"
            )
            raise typer.Exit(2)
        points = len(pm.missing_points(result))
        queued = run(target, True)
        err.print(f"queued {points} points for platform {target[:16]} as job(s) {queued['jobs']}: "
                      "its agents (`gac agent run --jobs`) measure them; align again afterwards")
        return queued
    # What gets measured can ask for more: a first pass's lattice and sample call for the dims their
    # fit cannot rule out (solver.sparse_needs), and a step found in the new points moves the
    # look-ahead past it. A few rounds settle it; each says what it adds.
    for round_ in range(pm.MAX_ROUNDS):
        if round_:
            err.print(f"the new measurements call for {len(pm.missing_points(result))} more points "
                      "(dims their lattice fit cannot rule out, or look-ahead past a step they revealed)")
        pm.measure(result, session, yes or round_ > 0, server, token, db)  # the first round's estimate covered the later ones
        stored = run(here, False)
        result = stored["result"]
        if not result.get("missing"):
            break
    return stored


def align_command(
    manifest: Annotated[Path, typer.Argument(help="a gac.manifest/v1 document (JSON or YAML)")],
    server: Annotated[str | None, typer.Option(help="a GAC service URL; default: the local database")] = None,
    db: Annotated[str | None, typer.Option(help="database URL instead of the embedded default")] = None,
    measurements: Annotated[Path | None, typer.Option(help="align against a measurements file (batch JSONL or CSV) instead")] = None,
    platform: Annotated[str | None, typer.Option(help="platform id or fingerprint; overrides the manifest's target")] = None,
    token: Annotated[str | None, typer.Option(help="API token for --server (default: $GAC_TOKEN)")] = None,
    enqueue_missing: Annotated[bool, typer.Option("--enqueue-missing", help="queue a profiling job for missing curves")] = False,
    objective: Annotated[str | None, typer.Option(
        help="importance | latency | frontier (default: the manifest's, else latency when measured)",
    )] = None,
    epsilon: Annotated[float | None, typer.Option(
        min=0.0, max=0.5, help="latency objective: importance it may give up (default 0.005)",
    )] = None,
    window: Annotated[str | None, typer.Option(
        help="latency objective's candidates: gac (+/- max(16, 5 %) of each dim, not below half of it; default) "
        "or paper (also multiples of 8 within +/- 64)",
    )] = None,
    dtype: Annotated[str | None, typer.Option(help="align for this dtype instead of the manifest's workload dtype")] = None,
    profile_missing: Annotated[bool, typer.Option(
        "--profile-missing", help="measure the missing points on this machine (or queue them for the platform's agents), then align again",
    )] = False,
    yes: Annotated[bool, typer.Option(
        "--yes", "-y", help="with --profile-missing or --enqueue-missing: do not ask, however long it takes",
    )] = False,
    device: Annotated[str, typer.Option(help="with --profile-missing: the device to measure on (cpu, cuda:N)")] = "cpu",
    threads: Annotated[int | None, typer.Option(
        min=1, help="with --profile-missing: CPU timing threads (as the platform was profiled)",
    )] = None,
    exhaustive: Annotated[bool, typer.Option(
        "--exhaustive", help="ask for every dim of each window (default: each window's lattice and a sample first, "
        "then only the dims its fit cannot rule out)",
    )] = False,
    wide: Annotated[bool, typer.Option("--wide", help="full weight names in the table")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print only the gac.alignment/v1 document")] = False,
    out: Annotated[Path | None, typer.Option(help="also write the gac.alignment/v1 document to this file")] = None,
) -> None:
    """Re-select one cliff-free dimension per weight under the manifest's parameter budget."""
    # A large manifest allocates millions of small objects that reference counting frees; the
    # cyclic collector's passes over them cost more than the alignment (a short-lived command).
    gc.disable()
    if sum(x is not None for x in (server, db, measurements)) > 1:
        err.print("[red]give at most one of --server, --db, --measurements[/red]")
        raise typer.Exit(2)
    from profiler_agent.settings import AgentSettings

    token = token or AgentSettings().token
    body = _load_manifest(manifest)
    if objective is not None:
        if objective not in ("importance", "latency", "frontier"):
            err.print(f"[red]--objective must be importance, latency or frontier, not {objective!r}[/red]")
            raise typer.Exit(2)
        body["objective"] = objective
    if epsilon is not None:
        body["epsilon"] = epsilon
    if window is not None:
        if window not in ("gac", "paper"):
            err.print(f"[red]--window must be gac or paper, not {window!r}[/red]")
            raise typer.Exit(2)
        body["window"] = window
    if dtype is not None:
        body.setdefault("workload", {"tokens": [1024]})["dtype"] = dtype
    if exhaustive and server:
        err.print("[red]--exhaustive works with the local database or --measurements: the service's API has no such option[/red]")
        raise typer.Exit(2)
    if profile_missing and measurements:
        err.print("[red]--profile-missing stores what it measures: use it with the local database or --server, not --measurements[/red]")
        raise typer.Exit(2)

    def run(platform: str | None, enqueue: bool) -> dict:
        if server:
            return _via_server(server, token, body, platform, enqueue)
        if measurements:
            return _from_file(measurements, body, exhaustive)
        return _locally(db, body, platform, enqueue, exhaustive)

    stored = run(platform, False)
    if enqueue_missing and not profile_missing and stored["result"].get("missing"):
        # Queue only what the user has seen sized: points and estimated time first, and a
        # question above the threshold (--yes skips it).
        from gac.commands import profile_missing as pm

        res = stored["result"]
        estimated = sum(m.get("estimated_seconds") or 0.0 for m in res["missing"])
        pm.confirm(len(pm.missing_points(res)), len(res["missing"]), estimated, f"as a job for platform {res['platform'][:16]}", yes)
        stored = run(platform, True)
    if profile_missing and stored["result"].get("missing"):
        stored = _profile_and_realign(stored, run, server, token, db, device, threads, yes)
    document = json.dumps(stored["result"], indent=2)
    if out:
        out.write_text(document + "\n")
    if as_json:
        sys.stdout.write(document + "\n")
    else:
        _print(stored, wide)


def register(app: typer.Typer) -> None:
    """Add `gac align` to the `gac` application."""
    app.command("align")(align_command)
