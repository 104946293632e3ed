"""`gac profile`: time a plan on this machine (the agent) and store the results in the local
embedded database (the service), without a server in between."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from gac import DISTRIBUTION
from profiler_agent.cli import (
    DeviceOpt,
    DtypeOpt,
    PlanOpt,
    ThreadsOpt,
    _load_plan,
    _print_failures,
    _summary_table,
    console,
    open_session,
    out_console,
    run_info,
    run_with_progress,
)

if TYPE_CHECKING:
    from gac.contracts.measurements import Measurement


def profile(
    plan: PlanOpt = None,
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = None,
    threads: ThreadsOpt = None,
    adaptive: Annotated[bool, typer.Option("--adaptive/--exhaustive")] = True,
    quiet: Annotated[bool, typer.Option("--quiet")] = False,
) -> None:
    """Time a plan on this machine and store the results in the local embedded database."""
    try:
        from service.ingest.service import ingest_local
    except ImportError as err:
        console.print(f"[red]`gac profile` needs the service extra (pip install '{DISTRIBUTION}[service]'): {err}[/red]")
        raise typer.Exit(2) from err
    from profiler_agent.delivery import make_batches

    session = open_session(device, threads)
    console.print(f"platform {session.platform.label()}  fingerprint {session.platform.fingerprint()[:16]}")
    p = _load_plan(plan, dtype, session.platform)
    rows: list[Measurement] = []
    result = run_with_progress(session, p, rows.append, adaptive, quiet)
    inserted = dup = 0
    for batch in make_batches(session.platform, run_info(p.name), rows):
        receipt = ingest_local(batch)
        inserted += receipt.inserted
        dup += receipt.duplicates
    out_console.print(_summary_table(result, p))
    _print_failures(result)
    console.print(f"stored {inserted} new rows ({dup} duplicates) for platform {session.platform.fingerprint()[:16]}")


def register(app: typer.Typer) -> None:
    """Add `gac profile` to the `gac` application."""
    app.command("profile")(profile)
