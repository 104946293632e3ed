"""`gac align MANIFEST`: against a server, the local (embedded) database, or a measurements file."""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from gac.contracts.goal import EPSILON_MAX, EPSILON_MIN, Objective, Window

if TYPE_CHECKING:
    from gac.contracts.alignment import AlignmentResult, MissingCurve
    from gac.contracts.manifest import Manifest
    from gac.solver.align import AlignOptions

# Off a terminal (a pipe, a file) rich would cut the tables to 80 columns; COLUMNS still decides where set.
console = Console(width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 200)
err = Console(stderr=True, soft_wrap=True)  # messages name files: never broken mid-line


def _load_manifest(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        err.print(f"[red]cannot read {escape(str(path))}: {escape(str(exc.strerror))}[/red]")
        raise typer.Exit(2) from exc
    except UnicodeDecodeError as exc:
        err.print(
            f"{path} is not a manifest: it is not UTF-8 text (a manifest is a JSON or YAML document)",
            style="red",
            markup=False,
            highlight=False,
        )
        raise typer.Exit(2) from exc
    from gac.solver.importers import ImportErrorDetail, parse_document

    try:  # as `gac import` reads its files: a key given twice is an error, not the last one winning
        return parse_document(text, str(path), as_yaml=path.suffix != ".json")
    except ImportErrorDetail as exc:
        err.print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(2) from exc


@dataclass(frozen=True)
class _Names:
    """How the user gave each input: the manifest file's entries, and the flags that set some of them.
    The service names a bad input by its HTTP path (body.budget, query.platform); a command-line
    user wrote neither, so messages name what they did write."""

    manifest: Path
    flags: dict[str, str] = field(default_factory=dict)  # a manifest entry ("workload.dtype") -> the flag that set it

    def of(self, path: str | Sequence[object]) -> str:
        parts = [str(p) for p in (path.split(".") if isinstance(path, str) else path) if str(p) != ""]
        if parts and parts[0] == "query":
            return "--" + "-".join(parts[1:]).replace("_", "-")
        if parts and parts[0] == "body":
            parts = parts[1:]
        for n in (2, 1):
            if len(parts) >= n and ".".join(parts[:n]) in self.flags:
                return self.flags[".".join(parts[:n])]
        entry = "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in parts).lstrip(".")
        return f"{self.manifest}: {entry}" if entry else str(self.manifest)


def _validation_exit(exc: Exception, names: _Names) -> typer.Exit:
    from pydantic import ValidationError

    from gac.solver.align import BudgetBelowFeasible

    if isinstance(exc, ValidationError):
        from gac.contracts.manifest import explained

        for e in exc.errors():
            err.print(f"[red]{escape(names.of(e['loc']))}[/red]: {escape(explained(e))}", highlight=False)
    elif isinstance(exc, BudgetBelowFeasible):
        err.print(f"[red]{escape(names.of('body.budget'))}[/red]: {escape(str(exc))}", highlight=False)
    else:
        err.print(f"[red]{escape(str(exc))}[/red]")
    return typer.Exit(2)


@dataclass(frozen=True)
class _Stored:
    """An alignment as this command got it: the typed result it renders, the gac.alignment/v1 document
    that --json and --out print (as the service serves it: compact above COMPACT_ABOVE_WEIGHTS), and
    where it was stored (id None: not stored) with the profiling jobs queued for it."""

    result: AlignmentResult
    document: dict[str, Any]
    id: str | None = None
    jobs: list[int] = field(default_factory=list)


def _manifest(body: dict, names: _Names) -> Manifest:
    """The manifest file's document, validated (its mistakes named as the file's entries)."""
    from pydantic import ValidationError

    if isinstance(body, dict) and "schema" not in body and "weights" not in body:
        # Not a manifest at all (a compressor's config.json, say): one line, not one per unknown key.
        known = {"truncation_ranks": "asvd", "head_wise_ranks": "palu"}
        hint = next((f"`gac import {c} {names.manifest}`" for key, c in known.items() if key in body), "`gac import --help`")
        err.print(
            f'[red]{escape(str(names.manifest))}[/red]: not a GAC manifest (no "schema": "gac.manifest/v1", no weights); '
            f"a compressor's output becomes one with {escape(hint)}",
            highlight=False,
        )
        raise typer.Exit(2)

    from gac.contracts.manifest import Manifest

    try:
        return Manifest.model_validate(body)
    except ValidationError as exc:
        raise _validation_exit(exc, names) from exc


def _via_server(server: str, token: str | None, manifest: Manifest, platform: str | None, enqueue: bool, names: _Names) -> _Stored:
    from gac.client import Client, GacApiError, GacConnectionError
    from gac.commands import TOKEN_HINT

    try:
        with Client(server, token, token_hint=TOKEN_HINT) as client:
            stored = client.align(manifest, platform=platform, enqueue_missing=enqueue)
    except GacConnectionError as exc:
        err.print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(1) from exc
    except GacApiError as exc:
        for e in exc.field_errors:
            err.print(f"[red]{escape(names.of(e.field))}[/red]: {escape(e.message)}", highlight=False)
        if not exc.field_errors:
            err.print(f"[red]{exc.status}: {escape(str(exc.detail))}[/red]")
        if exc.status in (401, 403):  # what to change on this side
            need = (
                "aligning needs any token, queueing jobs (--enqueue-missing) an ingest or admin one"
                if enqueue
                else ("aligning on a service needs any token (read scope or above)")
            )
            err.print(
                f"{'no token was sent' if not token else 'check the token'}: {need}, given with "
                f"--token or GAC_TOKEN (its admin makes one: `gac token create --name NAME --scope {'ingest' if enqueue else 'read'}`)",
                highlight=False,
            )
        raise typer.Exit(2 if exc.status in (400, 422) else 1) from exc
    return _Stored(stored.result, stored.result.model_dump(mode="json", by_alias=True), str(stored.id), stored.jobs)


def _locally(db: str | None, manifest: Manifest, platform: str | None, enqueue: bool, names: _Names, exhaustive: bool = False) -> _Stored:
    from gac.service.align import service
    from gac.service.cli import database_said
    from gac.service.db import engine_for, make_sessionmaker
    from gac.service.errors import GacError
    from gac.service.settings import get_settings
    from gac.service.startup import ensure_schema

    with database_said(db):
        settings = get_settings(db)
        engine = engine_for(settings)
        ensure_schema(engine, settings)
    try:
        with make_sessionmaker(engine)() as session:
            local = f"in the local database {engine.url.render_as_string(hide_password=True)} (--server aligns on a service)"
            target = service.resolve_platform(session, manifest, platform, where=local)
            result = service.run_alignment(session, manifest, target, exhaustive=exhaustive)
            jobs = service.enqueue_missing(session, settings, result, target) if enqueue and target else []
            row = service.store(session, manifest, target, result)
            # The stored text as the service serves it: compact above COMPACT_ABOVE_WEIGHTS (a
            # 100,000-weight result holds millions of candidates; as dicts they took gigabytes).
            stored = service.to_stored(row, jobs)
            return _Stored(stored.result, json.loads(row.texts.result), str(stored.id), stored.jobs)
    except GacError as exc:
        detail = exc.detail
        for d in detail if isinstance(detail, list) else [{"field": "", "message": detail}]:
            where = f"[red]{escape(names.of(d['field']))}[/red]: " if d["field"] else ""
            err.print(f"{where}{escape(str(d['message']))}", highlight=False)
        raise typer.Exit(2) from exc
    finally:
        engine.dispose()


def _from_file(
    measurements: Path, manifest: Manifest, options: AlignOptions, names: _Names, exhaustive: bool = False, platform: str | None = None
) -> _Stored:
    from dataclasses import replace

    from gac.solver.align import BudgetBelowFeasible, align
    from gac.solver.candidates import CandidateOptions
    from gac.solver.lookup import FileLookup

    try:
        read = FileLookup.from_csv if measurements.suffix == ".csv" else FileLookup.from_jsonl
        lookup = read(measurements, platform)
    except OSError as exc:
        err.print(f"[red]cannot read {escape(str(measurements))}: {escape(str(exc.strerror))}[/red]")
        raise typer.Exit(2) from exc
    except UnicodeDecodeError as exc:
        err.print(
            f"{measurements} is not a measurements file: it is not UTF-8 text (batch JSONL or CSV)",
            style="red",
            markup=False,
            highlight=False,
        )
        raise typer.Exit(2) from exc
    except ValueError as exc:  # the readers name the file and line
        err.print(str(exc).splitlines()[0], style="red", markup=False)
        raise typer.Exit(2) from exc
    if lookup.dtypes and str(manifest.workload.dtype) not in lookup.dtypes:
        err.print(
            f"[yellow]{escape(str(measurements))} holds curves in {', '.join(lookup.dtypes)}, "
            f"{names.flags.get('workload.dtype', 'the manifest')} asks for "
            f"{manifest.workload.dtype}: --dtype {lookup.dtypes[0]} aligns in what it measured[/yellow]",
            highlight=False,
        )
    from gac.service.align.limits import COMPACT_ABOVE_WEIGHTS
    from gac.service.align.service import compact_json

    try:
        result = align(manifest, lookup, replace(options, candidates=CandidateOptions(sparse=not exhaustive)))  # as the service
    except BudgetBelowFeasible as exc:
        raise _validation_exit(exc, names) from exc
    large = len(manifest.weights) > COMPACT_ABOVE_WEIGHTS  # compact, as the service answers
    return _Stored(result, json.loads(compact_json(result)) if large else result.model_dump(mode="json", by_alias=True))


def _short(name: str, width: int) -> str:
    """Shorten from the left, so layer numbers and the weight's own name stay readable."""
    return name if len(name) <= width else "…" + name[-(width - 1) :]


SUMMARY_LABEL = 15  # the summary's label column: its texts wrap under themselves, readable at 80 columns


def _say(label: str, text: str) -> None:
    """One summary row: the label, then the text wrapped under itself (a hanging indent)."""
    for i, line in enumerate(Text.from_markup(text).wrap(console, max(20, console.width - SUMMARY_LABEL))):
        head = Text.from_markup(label if i == 0 else "")
        head.set_length(SUMMARY_LABEL)
        line.rstrip()
        console.print(Text.assemble(head, line), soft_wrap=True)


def _summary(res: AlignmentResult) -> None:
    lat = res.latency
    kind = res.objective_kind
    goal = {Objective.IMPORTANCE: "importance (the paper's objective)",
            Objective.LATENCY: f"latency, keeping at least {1 - (res.epsilon or 0):.1%} of the importance-only optimum's kept importance",
            Objective.FRONTIER: "the speed/importance frontier"}[kind]  # fmt: skip
    if res.window == Window.PAPER:
        goal += ", over the paper's window (multiples of 8 within +/- 64)"
    if res.no_slower:
        from gac.solver.no_slower import STILL_SLOWER

        held = not any(w.startswith(STILL_SLOWER) for w in res.warnings)
        goal += "; no token count predicted slower than at the compressor's dims" if held else "; --no-slower did not hold (warning below)"
    console.print(f"[bold]{escape(res.model)}[/bold] on platform {res.platform[:16]}")
    _say("optimized for", goal)
    if lat.complete and lat.unaligned_us and lat.aligned_us:
        orig = f"; before compression {lat.original_us:,.1f} µs" if lat.original_us else ""
        _say(
            "predicted",
            f"unaligned {lat.unaligned_us:,.1f} µs -> GAC {lat.aligned_us:,.1f} µs "
            f"([bold]{lat.unaligned_us / lat.aligned_us:.3f}x[/bold]){orig} (the compressed weights' kernels)",
        )
        if lat.aligned_us > lat.unaligned_us and not res.no_slower:
            _say(
                "[yellow]slower[/yellow]",
                "GAC's dims are predicted slower than the compressor's: it keeps more importance with them; "
                "--objective latency with a larger --epsilon gives up more of it for speed (when the speed is 2 % or more)"
                + (", and --no-slower holds every token count to the compressor's dims" if len(lat.by_tokens or {}) > 1 else ""),
            )
        if lat.importance_only_us and kind != Objective.IMPORTANCE:
            _say(
                "",
                f"importance-only GAC {lat.importance_only_us:,.1f} µs ({lat.unaligned_us / lat.importance_only_us:.3f}x); "
                f"GAC keeps {lat.importance_kept:.2%} of the importance that importance-only GAC keeps"
                + (MORE_KEPT if (lat.importance_kept or 0) > 1 else ""),
            )
        if lat.by_tokens:
            each = ", ".join(
                f"M={t.tokens}: {t.unaligned_us / t.aligned_us:.3f}x" + (" [red]slower[/red]" if t.aligned_us > t.unaligned_us else "")
                for t in lat.by_tokens
            )
            slower = any(t.aligned_us > t.unaligned_us for t in lat.by_tokens)
            _say("", f"per token count: {each}" + (" (--no-slower: none slower)" if slower and not res.no_slower else ""))
    else:
        n = lat.missing_points or sum(len(mc.dims) for mc in res.missing)  # an older service counted rules-only as 0
        # A platform that measured none of these kernels (another dtype, say) has no latency data for them either.
        why = "no latency data" if res.platform == "rules only" or len(res.rule_items) == len(res.weights) else "incomplete"
        _say("predicted", f"{why}: {n:,} curve points missing (listed under `missing`; --profile-missing measures them)")
    _say("aligned dims", f"{res.aligned_share_before:.0%} before -> {res.aligned_share_after:.0%} after (% {res.align})")
    _say("budget", f"{res.budget:,} params; used {res.total_params:,} ({res.total_params / res.budget:.2%})")


TABLE_ROWS = 50  # weights listed in the table; --out or --json give every one


def _print(stored: _Stored, wide: bool = False) -> None:
    res = stored.result
    _summary(res)
    heads = ("before", "after", "params", "source", "µs before", "µs after")
    rows = []
    for w in res.weights[:TABLE_ROWS]:
        chosen = next((c for c in w.candidates if c.dim == w.dim), None)
        source = chosen.source if chosen is not None else "?"
        lats = [f"{x:,.1f}" if x is not None else "-" for x in (w.latency_before_us, w.latency_us)]
        rows.append((w.name, f"{w.dim_before:g}", str(w.dim), f"{w.params:,}", source, *lats))
    # The numbers keep their width; the names take what is left of the line, shortened from the left.
    numbers = sum(max(len(h), *(len(r[i + 1]) for r in rows)) + 2 for i, h in enumerate(heads)) if rows else 0
    name_width = 200 if wide else max(12, console.width - numbers - 2)
    table = Table(show_lines=False, box=None)
    for col in ("weight", *heads):
        table.add_column(col, justify="left" if col in ("weight", "source") else "right", no_wrap=True)
    for name, *cells in rows:
        table.add_row(escape(_short(name, name_width)), *cells)  # a weight's name is text
    console.print(table)
    if len(res.weights) > TABLE_ROWS:
        console.print(f"… and {len(res.weights) - TABLE_ROWS:,} more weights: --out FILE or --json gives every one")
    cc = res.solver.cross_check
    agree = {True: "agrees", False: "DISAGREES", None: "not proven"}[cc.agrees]
    check = "no cross-check" if cc.method == "none" else f"cross-check {cc.method} {cc.status} {agree}"
    _say("solver", f"{res.solver.method} in {res.solver.seconds * 1000:.1f} ms, objective {res.objective:,.1f}; {check}")
    if res.baselines:
        table = Table(box=None)
        # "kept" is the summary's measure: the importance kept as a share of what importance-only GAC keeps
        # (the objective is a gain over the compressor's dims: a difference, whose ratios mislead), shown only
        # for a baseline within the budget.
        for col in ("baseline", "params", "budget", "aligned", "speed-up", "objective", "kept"):
            table.add_column(col, justify="left" if col in ("baseline", "budget") else "right", no_wrap=True)
        for b in res.baselines:
            table.add_row(
                b.method,
                f"{b.total_params:,}",
                "within" if b.within_budget else "OVER",
                f"{b.aligned_share:.0%}",
                f"{b.speedup:.3f}x" if b.speedup else "-",
                f"{b.objective:,.1f}",
                f"{b.importance_kept:.2%}" if b.importance_kept is not None else "-",
            )
        console.print(table)
        # The table's own legend: a reader sees a sum of signed scores, not a share of anything.
        _say(
            "",
            "objective: the solver's (above), the sum over weights of importance x parameters gained (negative: given up) "
            "against the compressor's dims; higher keeps more. kept: the importance kept, as a share of what importance-only "
            "GAC keeps ("
            + ("GAC is importance-only here: 100 %" if res.objective_kind == Objective.IMPORTANCE else "GAC's own share is in the summary")
            + ")"
            + ("; OVER the budget: not compared" if any(not b.within_budget for b in res.baselines) else ""),
        )
    if res.frontier and res.objective_kind == Objective.FRONTIER:
        _frontier_table(res)
    elif res.frontier:
        _say("frontier", f"{len(res.frontier)} Pareto point{'s' if len(res.frontier) != 1 else ''} (--json or the dashboard shows them)")
    if res.missing:
        _say("missing data", _missing_line(res.missing))
    for warning in res.warnings:
        _say("[yellow]warning[/yellow]", warning)
    if stored.id:
        _say("stored as", f"{stored.id}" + (f"; jobs queued: {stored.jobs}" if stored.jobs else ""))


# Why a share can pass 100 %: importance-only GAC chooses among cliff-free dims, latency-aware GAC among every measured one.
MORE_KEPT = " (above 100 %: any measured dim may be chosen, where importance-only GAC takes cliff-free dims only)"
FRONTIER_ROWS = 15  # frontier points the table lists (the ends, the chosen one, and evenly between); --json gives all


def _frontier_table(res: AlignmentResult) -> None:
    """The trade-off the frontier objective was asked for: predicted latency against importance kept."""
    points = res.frontier
    keep = {0, len(points) - 1, *(i for i, p in enumerate(points) if p.chosen)}
    keep |= (
        {round(i * (len(points) - 1) / (FRONTIER_ROWS - 1)) for i in range(FRONTIER_ROWS)}
        if len(points) > FRONTIER_ROWS
        else set(range(len(points)))
    )
    table = Table(box=None)
    for col in ("frontier", "latency µs", "speed-up", "kept", "params"):
        table.add_column(col, justify="right", no_wrap=True)
    unaligned = res.latency.unaligned_us
    for i in sorted(keep):
        p = points[i]
        table.add_row(
            "chosen" if p.chosen else "",
            f"{p.latency_us:,.1f}",
            f"{unaligned / p.latency_us:.3f}x" if unaligned and p.latency_us else "-",
            f"{p.importance_kept:.2%}",
            f"{p.params:,}",
        )
    console.print(table)
    shown = f"{len(keep)} of {len(points)} Pareto points" if len(keep) < len(points) else f"{len(points)} Pareto points"
    more = MORE_KEPT if any(p.importance_kept > 1 for p in points) else ""
    _say("", f"{shown}: each is the fastest keeping its share of importance-only GAC's importance{more}; --json lists all")


def _missing_line(missing: list[MissingCurve]) -> str:
    """What profiling the missing points should take, said as what it is: an estimate from the platform's
    measured points, or a bound where nothing near them is measured (each point to its time cap)."""
    from gac.commands.profile_missing import duration

    secs = sum(m.estimated_seconds or 0 for m in missing)
    points = sum(len(m.dims) for m in missing)
    capped = sum(m.capped_dims or 0 for m in missing)
    later = sum(m.later_dims or 0 for m in missing)
    said = f"{points:,} points on {len(missing)} curves"
    # The figure counts the points a first pass calls for next: said as part of it, not on top of it.
    then = f", with the up to {later:,} more of their windows that a first pass may call for next" if later else ""
    if capped and capped == points:
        said += (
            f": at most about {duration(secs)} to profile{then} (nothing measured near them: each point to its time cap); "
            "--profile-missing times a few first and says this machine's rate (--enqueue-missing queues them for its agents)"
        )
    else:
        said += f": about {duration(secs)} to profile{then}" + (f" ({capped:,} of the points at their time cap: a bound)" if capped else "")
        said += "; --profile-missing measures them here, --enqueue-missing queues them for the platform's agents"
    return said


def _profile_and_realign(stored: _Stored, run, server, token, db, device, threads, yes, wait=False) -> _Stored:  # noqa: ANN001
    """Measure the missing points here when this machine is the platform, else queue them (and with
    wait, follow the jobs, align again and queue what the new points call for); align again."""
    from gac.commands import profile_missing as pm

    result = stored.document  # what profile_missing reads: the document as served
    target = stored.result.platform
    pinned = None
    if threads is None and target != pm.RULES_ONLY:
        # The thread count is part of a CPU's platform: measure at the count the alignment's platform was
        # timed with (said when not torch's default), whatever the load would choose for a new profile.
        looked = pm.this_machine(device, None, timing=False).platform
        if looked.device_kind == "cpu" and looked.fingerprint() == target:
            threads = looked.threads
        elif (same := looked.threads_for(target, os.cpu_count())) is not None:
            err.print(f"the alignment's platform is this machine timed with {same} thread(s): measuring with --threads {same}")
            threads = same
        pinned = "the platform being measured was timed with it" if threads is not None else None
    session = pm.this_machine(device, threads, pinned=pinned)
    here = session.platform.fingerprint()
    if target not in (here, pm.RULES_ONLY):
        if (same := session.platform.threads_for(target, os.cpu_count())) is not None:  # --threads chose another count
            err.print(
                f"[red]the alignment's platform {target[:16]} is this machine timed with {same} thread(s), not {threads}: "
                f"pass --threads {same} (or leave --threads out) to measure what it lacks[/red]"
            )
            raise typer.Exit(2)
        if not server:
            err.print(
                f"[red]the alignment's platform {target[:16]} is not this machine's {escape(session.device)} "
                f"({here[:16]}, {escape(session.platform.label())}): measure on that machine (or on another --device here), "
                "or use --server to queue a profiling job for it[/red]"
            )
            raise typer.Exit(2)
        points = len(pm.missing_points(result))
        queued = run(target, True)
        err.print(
            f"queued {points} points for platform {target[:16]} as job(s) {queued.jobs}: "
            "its agents (`gac agent run --jobs`) measure them; "
            + ("waiting for them" if wait else "align again afterwards (--wait follows them)")
        )
        return _follow_jobs(queued, run, target, server, token) if wait else queued
    # What gets measured can ask for more: a first pass's lattice and sample call for the dims their
    # fit cannot rule out (gac.solver.sparse_needs), and a step found in the new points moves the
    # look-ahead past it. A few rounds settle it; each says what it adds.
    kept = 0  # what the earlier rounds measured: a stop in a later one says the command's total
    failed: frozenset = frozenset()  # points this machine could not time: another round would only fail them again
    rounds: list[pm.Measured] = []
    for round_ in range(pm.MAX_ROUNDS):
        if round_:
            asked = pm.missing_points(result)
            new = [p for p in asked if pm.point_key(*p[:3]) not in failed]
            if not new:
                err.print(
                    f"[red]the {len(asked)} points still missing could not be timed on {escape(session.platform.label())} "
                    "(above): not timed again[/red]"
                )
                break
            err.print(
                f"the new measurements call for {len(new)} more points "
                "(dims their lattice fit cannot rule out, or look-ahead past a step they revealed)"
                + (f"; {len(asked) - len(new)} that could not be timed are left out" if len(new) < len(asked) else "")
            )
        # The first round's estimate covered the later ones: they neither ask nor probe.
        done = pm.measure(result, session, yes or round_ > 0, server, token, db, probe=round_ == 0, kept_before=kept, skip=failed)
        kept, failed = kept + done.points, failed | done.failed
        rounds.append(done)
        stored = run(here, False)
        result = stored.document
        if not stored.result.missing:
            break
    if len(rounds) > 1:  # the first round's estimate counted the later ones: the whole against it
        err.print(
            f"in all: measured {kept} points in {pm.duration(sum(r.seconds for r in rounds))} over {len(rounds)} rounds "
            f"(estimated {pm.duration(rounds[0].estimated_total)} before the first)"
        )
    return stored


def _follow_jobs(queued: _Stored, run, target: str, server: str, token: str | None) -> _Stored:  # noqa: ANN001
    """Wait for the queued jobs, align again, and queue what the new points call for (a first pass's
    lattice and sample ask for the dims their fit cannot rule out), as --profile-missing does here.
    A job that failed or was cancelled stops it: queueing its points again would only repeat that."""
    from gac.commands import profile_missing as pm

    stored = queued
    for _ in range(pm.MAX_ROUNDS):
        ended = _wait_for(stored.jobs, server, token, platform=target)
        given_up = [(j, state) for j in ended if (state := _job_state(j)) in ("failed", "cancelled")]
        for j, state in given_up:
            why = j.error or ("cancelled" if state == "cancelled" else "its lease expired on its last attempt")
            err.print(f"[red]job {j.id} {state} after {j.attempts} of {j.max_attempts} attempts: {escape(why)}[/red]", highlight=False)
        if given_up:
            err.print("[red]not queued again: fix what stopped it, then run the same command again (what was measured is kept)[/red]")
            raise typer.Exit(1)
        for j in ended:  # done, but the agent could not time some of its points (their error names the device and kernels)
            if _job_state(j) == "done" and j.error:
                err.print(f"[yellow]job {j.id} done, some of its points not: {escape(j.error)}[/yellow]", highlight=False)
        # Jobs that timed none of their points would only fail them again: align without queueing them anew.
        timed_none = bool(ended) and all(_job_state(j) == "done" and j.error and not j.points_done for j in ended)
        stored = run(target, not timed_none)
        if not stored.result.missing:
            break
        if timed_none:
            err.print(f"[red]the agents could not time these points on platform {target[:16]} (above): not queued again[/red]")
            break
        if not stored.jobs:  # what is missing is queued already, or could not be: nothing to wait for
            err.print(f"{len(pm.missing_points(stored.document))} points are still missing and no new job was queued for them")
            break
        err.print(f"the new measurements call for {len(pm.missing_points(stored.document))} more points: job(s) {stored.jobs}")
    return stored


UNCLAIMED_HINT_S = 60.0  # queued this long with none claimed: say what takes them
MAX_WAIT_RETRY_S = 30.0  # the longest pause between reads while the service cannot be read


def _job_state(job, now: datetime | None = None) -> str:  # noqa: ANN001 - a gac.contracts.api.Job
    """The job's status as a waiter should read it: a lease that ran out (its agent stopped reporting)
    is 'expired' while attempts remain (the next claim takes the job) and 'failed' after the last one
    (the service marks it so at its next claim)."""
    now = now or datetime.now(UTC)
    if job.status == "leased" and job.lease_expires_at is not None and job.lease_expires_at < now:
        return "failed" if job.attempts >= job.max_attempts else "expired"
    return job.status


def _wait_for(
    jobs: list[int],
    server: str,
    token: str | None,
    *,
    platform: str,
    every_s: float = 2.0,
    hint_after_s: float = UNCLAIMED_HINT_S,
) -> list:
    """Until every job has ended (done, failed or cancelled), saying each change of their counts, and
    once, if none was held by an agent for hint_after_s, what would claim them. A service that cannot
    be read for a while (restarting, busy) is waited for too; a refusal ends the wait. Returns the jobs."""
    from gac.agent.http_client import StopSafeClient
    from gac.agent.interrupt import stop_signals
    from gac.client import Client, GacApiError, GacConnectionError
    from gac.commands import TOKEN_HINT

    said, waiting_since, hinted, failures = None, time.monotonic(), False, 0
    ended, states = [], []
    # Ctrl-C or SIGTERM anywhere in the wait (a read of the jobs under way is answered first: a stop cut inside httpx
    # can leave its pool's lock taken, and closing the client would hang) says which jobs stay queued.
    with stop_signals() as stop, StopSafeClient() as http, Client(server, token, http=http, token_hint=TOKEN_HINT) as client:
        try:
            while True:
                try:
                    ended = [client.job(j) for j in jobs]
                except (GacConnectionError, GacApiError) as exc:
                    if isinstance(exc, GacApiError) and not exc.transient:
                        err.print(f"[red]while waiting for jobs {jobs}: {escape(str(exc))}[/red]")
                        raise typer.Exit(1) from exc
                    if not failures:
                        err.print(f"[yellow]cannot read jobs {jobs} now ({escape(str(exc))}): trying again; Ctrl-C stops waiting[/yellow]")
                    failures += 1
                    time.sleep(min(MAX_WAIT_RETRY_S, every_s * 2 ** min(failures, 16)))
                    continue
                if failures:
                    err.print("reached the service again")
                    failures = 0
                states = [_job_state(j) for j in ended]
                kinds = ("queued", "expired", "leased", "done", "failed", "cancelled")
                counts = ", ".join(f"{states.count(s)} {'lease expired' if s == 'expired' else s}" for s in kinds if s in states)
                # Points as the agents' last heartbeats said: a job measured for minutes shows it moving.
                counts += f"; {sum(j.points_done or 0 for j in ended):,}/{sum(j.points for j in ended):,} points"
                if counts != said:
                    err.print(f"jobs {jobs}: {counts}")
                    said = counts
                if "leased" in states:
                    waiting_since = time.monotonic()
                if not hinted and time.monotonic() - waiting_since >= hint_after_s and set(states) <= {"queued", "expired", "done"}:
                    err.print(
                        f"no agent has claimed them in {hint_after_s:.0f} s: an agent of platform {platform[:16]} takes them "
                        f"(`gac agent run --server {server} --token T --jobs --follow` on such a machine); Ctrl-C stops waiting, "
                        "the jobs stay queued"
                    )
                    hinted = True
                if all(s in ("done", "failed", "cancelled") for s in states):
                    return ended
                time.sleep(every_s)
        except KeyboardInterrupt:
            # The jobs not seen ended when last read (all of them, stopped before the first read).
            left = [j.id for j, s in zip(ended, states) if s not in ("done", "failed", "cancelled")] if states else jobs
            err.print(
                f"stopped waiting: job(s) {left} stay on the service for its agents (`gac jobs list`); "
                "this alignment again, once they are done, uses what they measured"
            )
            raise typer.Exit(stop.exit_code) from None


def _this_machine(
    server: str | None,
    token: str | None,
    db: str | None,
    device: str | None,
    threads: int | None,
) -> tuple[str, str, list[str]] | None:
    """This machine's stored platform, for an alignment that names none: (fingerprint, name, the
    dtypes its curves were measured in), or None (nothing stored for it, or no agent installed to
    tell what this machine is). A profile timed with another thread count is this machine's too."""
    try:
        from gac.agent.cli import device_setting
        from gac.agent.platform import detect_platform
    except ImportError:  # a solver-only install cannot tell what this machine is
        return None
    from gac.client import Client, GacClientError, profiled_first, same_machine
    from gac.commands import TOKEN_HINT

    def detect():  # noqa: ANN202 - a PlatformDescriptor; --device and --threads name what was profiled
        machine = detect_platform(device_setting(device, threads), dtypes=False)
        return machine.model_copy(update={"threads": threads}) if threads and machine.device_kind == "cpu" else machine

    if server:
        try:
            with Client(server, token, token_hint=TOKEN_HINT) as client:
                if not client.platforms(page_size=1).total:
                    return None
                found = client.platform_of(detect())
        except (GacClientError, ValueError, RuntimeError):
            return None  # not stored there (or unreachable, or no such device: the alignment itself says so)
        return found.fingerprint, found.label, found.dtypes
    from pydantic import ValidationError
    from sqlalchemy import func, select
    from sqlalchemy.exc import SQLAlchemyError

    from gac.service.db import engine_for, make_sessionmaker
    from gac.service.models import Platform
    from gac.service.platforms import repository as platforms
    from gac.service.platforms.service import describe
    from gac.service.settings import get_settings
    from gac.service.startup import SchemaOutOfDate, ensure_schema

    try:
        settings = get_settings(db)
        engine = engine_for(settings)
    except (ValidationError, OSError):
        return None  # the alignment says what is wrong with the database
    try:
        ensure_schema(engine, settings)
        with make_sessionmaker(engine)() as session:
            if not session.scalar(select(func.count()).select_from(Platform)):
                return None  # nothing profiled: no need to look at this machine (importing torch takes a while)
            machine = detect()
            exact = platforms.find(session, machine.fingerprint())
            listed = platforms.page(session, device_kind=machine.device_kind, name=machine.device_name, offset=0, limit=100).rows
            others = [p for p in listed if p.fingerprint != machine.fingerprint() and same_machine(describe(p), machine)]
            kin = [*([exact] if exact else []), *others]
            counts = platforms.counts(session, [p.id for p in kin])
            row = profiled_first(kin, lambda p: counts[p.id][0] > 0)
            if row is None:
                return None
            return row.fingerprint, describe(row).label(), counts[row.id][3]
    except (SQLAlchemyError, SchemaOutOfDate, ValueError, RuntimeError):
        return None  # the alignment reports the database's (or the device's) trouble itself
    finally:
        engine.dispose()


def _say_this_machine(found: tuple[str, str, list[str]], manifest: Manifest, asker: str = "the manifest") -> None:
    """Say which platform an alignment that named none uses, and whether its dtype was profiled there."""
    fingerprint, name, dtypes = found
    err.print(f"platform: this machine, {escape(name)} ({fingerprint[:16]}), as profiled here; --platform chooses another", highlight=False)
    wanted = str(manifest.workload.dtype)
    if dtypes and wanted not in dtypes:
        err.print(
            f"[yellow]this machine was profiled in {', '.join(dtypes)}, {asker} asks for {wanted}: "
            f"--dtype {dtypes[0]} aligns in what it measured, --profile-missing measures {wanted}[/yellow]",
            highlight=False,
        )


def _profiled_in(server: str | None, token: str | None, db: str | None, ref: str) -> tuple[list[str], dict[str, float]]:
    """The dtypes a platform's curves were measured in, and its agents' measured GEMM time of each dtype
    against float32's, on the service or in the local database (empty when unknown)."""
    if server:
        from gac.client import Client, GacClientError
        from gac.commands import TOKEN_HINT

        try:
            with Client(server, token, token_hint=TOKEN_HINT) as client:
                found = client.platform(ref)
                return found.dtypes, {str(d): r for d, r in (found.descriptor.dtype_speed or {}).items()}
        except GacClientError:
            return [], {}
    from pydantic import ValidationError
    from sqlalchemy.exc import SQLAlchemyError

    from gac.service.db import engine_for, make_sessionmaker
    from gac.service.platforms import repository as platforms
    from gac.service.settings import get_settings

    try:
        engine = engine_for(get_settings(db))
    except (ValidationError, OSError):
        return [], {}
    try:
        with make_sessionmaker(engine)() as session:
            row = platforms.find(session, ref)
            if row is None:
                return [], {}
            return platforms.counts(session, [row.id])[row.id][3], dict(row.dtype_speed or {})
    except SQLAlchemyError:
        return [], {}
    finally:
        engine.dispose()


def _say_profiled_in(profiled: tuple[list[str], dict[str, float]], platform: str, wanted: str, asker: str = "the manifest") -> None:
    """Before points are queued in a dtype the platform was never profiled in: an agent profiles in its
    platform's fast dtype unless told otherwise, so the others may run far slower there (bfloat16 emulated
    on a CPU without it), and the job times what nobody would serve in. By how much, where its agents measured it."""
    dtypes, speed = profiled
    if not dtypes or wanted in dtypes:
        return
    have = dtypes[0]
    how = f"which may run far slower than {have} (an agent profiles in its fast dtype)"
    if wanted in speed and have in speed and speed[have] > 0:
        ratio = speed[wanted] / speed[have]
        how = f"whose GEMMs its agent measured at {ratio:.3g}x the time of {have}'s" + (" (far slower)" if ratio >= 2 else "")
    err.print(
        f"[yellow]platform {platform[:16]} was profiled in {', '.join(dtypes)}, {asker} asks for {wanted}: the job times "
        f"{wanted} kernels there, {how}; --dtype {have} aligns in what it measured[/yellow]",
        highlight=False,
    )


def _say_what_was_not_solved(result: AlignmentResult, asked: Objective | None) -> None:
    """A latency or frontier objective asked for without latency data is solved for importance
    only: say so on the terminal, where --json leaves the stdout to the document."""
    if (
        asked not in (Objective.LATENCY, Objective.FRONTIER)
        or result.objective_kind == asked
        and (asked != Objective.FRONTIER or result.frontier)
    ):
        return
    n = sum(len(m.dims) for m in result.missing)
    why = "no latency data (rules only)" if result.platform == "rules only" else f"{n:,} curve points missing"
    err.print(
        f"[yellow]objective {asked}: not computed, {why}; the answer is importance-only "
        "(--platform names a profiled platform, --profile-missing measures what it lacks)[/yellow]",
        highlight=False,
    )


W = TypeVar("W", bound=Enum)


def _word(kind: type[W], flag: str) -> Callable[[str], W]:
    """A flag's parser into its enum: a word it does not know is named with the words it does."""

    def parse(value: str) -> W:
        try:
            return kind(value)
        except ValueError:
            words = [str(m.value) for m in kind]
            err.print(f"[red]{flag} must be {', '.join(words[:-1])} or {words[-1]}, not {escape(repr(value))}[/red]")
            raise typer.Exit(2) from None

    return parse


def align_command(
    manifest: Annotated[Path, typer.Argument(help="a gac.manifest/v1 document (JSON or YAML)")],
    server: Annotated[str | None, typer.Option(help="a GAC service URL; default: the local database")] = None,
    db: Annotated[str | None, typer.Option(help="database URL instead of the embedded default")] = None,
    measurements: Annotated[Path | None, typer.Option(help="align against a measurements file (batch JSONL or CSV) instead")] = None,
    platform: Annotated[str | None, typer.Option(help="platform id or fingerprint; overrides the manifest's target")] = None,
    token: Annotated[str | None, typer.Option(help="API token for --server (default: $GAC_TOKEN)")] = None,
    enqueue_missing: Annotated[bool, typer.Option("--enqueue-missing", help="queue a profiling job for missing curves")] = False,
    objective: Annotated[
        Objective | None,
        typer.Option(
            help="importance | latency | frontier (default: the manifest's, else latency when measured)",
            metavar="<str>",
            parser=_word(Objective, "--objective"),
        ),
    ] = None,
    epsilon: Annotated[
        float | None,
        typer.Option(
            min=float(EPSILON_MIN),
            max=EPSILON_MAX,
            help="latency objective: importance it may give up (default 0.005)",
        ),
    ] = None,
    min_gain: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            max=0.99,
            help="latency objective: the least share of predicted time it must save to give up importance "
            "(default: the manifest's min_gain, else 0.02, about timing noise; 0: any gain)",
        ),
    ] = None,
    window: Annotated[
        Window | None,
        typer.Option(
            metavar="<str>",
            parser=_word(Window, "--window"),
            help="latency objective's candidates: gac (+/- max(16, 5 %) of each dim, not below half of it; default) "
            "or paper (also multiples of 8 within +/- 64)",
        ),
    ] = None,
    no_slower: Annotated[
        bool | None,
        typer.Option(
            "--no-slower/--slower-allowed",
            help="latency objective over several token counts: none predicted slower than at the compressor's dims "
            "(default: the manifest's no_slower, else a faster total may make one slower)",
            show_default=False,
        ),
    ] = None,
    dtype: Annotated[str | None, typer.Option(help="align for this dtype instead of the manifest's workload dtype")] = None,
    profile_missing: Annotated[
        bool,
        typer.Option(
            "--profile-missing",
            help="measure the missing points on this machine (or queue them for the platform's agents), then align again",
        ),
    ] = False,
    yes: Annotated[
        bool,
        typer.Option(
            "--yes",
            "-y",
            help="with --profile-missing or --enqueue-missing: do not ask, however long it takes",
        ),
    ] = False,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="with --server and --enqueue-missing (or --profile-missing for another machine's platform): wait for "
            "the platform's agents to measure the queued points, align again, and queue what the new points call for",
        ),
    ] = False,
    device: Annotated[
        str | None,
        typer.Option(help="this machine's device: cpu, cuda:N or auto, its first GPU, else the CPU (default: $GAC_DEVICE, else auto)"),
    ] = None,
    threads: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="with --profile-missing: CPU timing threads (as the platform was profiled)",
        ),
    ] = None,
    exhaustive: Annotated[
        bool,
        typer.Option(
            "--exhaustive",
            help="ask for every dim of each window (default: each window's lattice and a sample first, "
            "then only the dims its fit cannot rule out)",
        ),
    ] = False,
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
    from gac.agent.settings import AgentSettings
    from gac.solver.align import AlignOptions, with_goal

    token = token or AgentSettings().token
    body = _load_manifest(manifest)
    names = _Names(manifest)
    if dtype is not None:
        names.flags["workload.dtype"] = "--dtype"
        body.setdefault("workload", {"tokens": [1024]})["dtype"] = dtype
    if wait and not (server and (profile_missing or enqueue_missing)):
        err.print("[red]--wait follows the jobs a service queues: give --server with --enqueue-missing or --profile-missing[/red]")
        raise typer.Exit(2)
    if exhaustive and server:
        err.print("[red]--exhaustive works with the local database or --measurements: the service's API has no such option[/red]")
        raise typer.Exit(2)
    if profile_missing and measurements:
        err.print("[red]--profile-missing stores what it measures: use it with the local database or --server, not --measurements[/red]")
        raise typer.Exit(2)
    if out is not None and not out.parent.is_dir():  # before the work, not after it
        err.print(f"[red]--out {escape(str(out))}: no such directory {escape(str(out.parent))}[/red]")
        raise typer.Exit(2)
    if device is not None:  # checked when given, whether or not this run comes to time anything on it
        from gac.agent.platform import present_device

        try:
            present_device(device)
        except ValueError as bad:
            err.print(f"[red]--device: {escape(str(bad))}[/red]")
            raise typer.Exit(2) from None
    # The flags, typed, go to the solver as its options; a service takes a manifest, so it gets the
    # manifest with the flags in place of its own entries (with_goal: where the two meet).
    options = AlignOptions(objective=objective, epsilon=epsilon, window=window, no_slower=no_slower, min_gain=min_gain)
    document = _manifest(body, names)
    asked = with_goal(document, options)

    def run(platform: str | None, enqueue: bool) -> _Stored:
        if server:
            return _via_server(server, token, asked, platform, enqueue, names)
        if measurements:  # a file of several platforms' rows: --platform picks one
            return _from_file(measurements, document, options, names, exhaustive, platform)
        return _locally(db, asked, platform, enqueue, names, exhaustive)

    if platform is None and not measurements and not (document.target and document.target.platform):
        # Right after `gac profile` (or an agent's run) on this machine, this machine is the platform meant.
        here = _this_machine(server, token, db, device, threads)
        if here is not None:
            platform = here[0]
            _say_this_machine(here, document, names.flags.get("workload.dtype", "the manifest"))
    stored = run(platform, False)
    if enqueue_missing and not profile_missing and stored.result.missing:
        # Queue only what the user has seen sized: points and estimated time first, and a
        # question above the threshold (--yes skips it).
        from gac.commands import profile_missing as pm
        from gac.solver.sparse_needs import FIRST_PASS

        res = stored.result
        if res.platform == pm.RULES_ONLY:  # a job is for one platform's agents: there is none to name
            if server:
                run(platform, True)  # the service's word on the token comes first
            err.print(
                "[red]--enqueue-missing: no platform to queue the missing points for (nothing is profiled here): "
                "name one with --platform or the manifest's target.platform, or measure on this machine with --profile-missing[/red]"
            )
            raise typer.Exit(2)
        asker = names.flags.get("workload.dtype", "the manifest")  # --dtype, when it set the dtype
        _say_profiled_in(_profiled_in(server, token, db, res.platform), res.platform, str(asked.workload.dtype), asker)
        estimated = sum(m.estimated_seconds or 0.0 for m in res.missing)
        where = f"as a job for platform {res.platform[:16]}"
        pm.confirm(len(pm.missing_points(stored.document)), len(res.missing), estimated, where, yes, queue=True)
        if any(FIRST_PASS in m.reasons for m in res.missing):
            pm.say_first_pass()
        stored = run(platform, True)
        if wait and server:
            err.print(f"queued as job(s) {stored.jobs}: waiting for the platform's agents (`gac agent run --jobs --follow`)")
            stored = _follow_jobs(stored, run, res.platform, server, token)
    if profile_missing and stored.result.missing:
        stored = _profile_and_realign(stored, run, server, token, db, device, threads, yes, wait)
    if as_json:
        _say_what_was_not_solved(stored.result, asked.objective)
    text = json.dumps(stored.document, indent=2)
    if out:
        try:
            out.write_text(text + "\n")
        except OSError as bad:
            kept = f" (the alignment is stored as {stored.id})" if stored.id else ""
            err.print(f"[red]--out {escape(str(out))}: {escape(bad.strerror or str(bad))}{kept}[/red]")
            raise typer.Exit(1) from None
    if as_json:
        sys.stdout.write(text + "\n")
    else:
        _print(stored, wide)


def register(app: typer.Typer) -> None:
    """Add `gac align` to the `gac` application."""
    app.command("align")(align_command)
