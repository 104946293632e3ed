"""`gac profile`: time a plan on this machine (the agent) and store the results in the local
embedded database (the service), without a server in between.

Rows are committed in small batches as they are measured (gac/commands/local_store.py): Ctrl-C
or SIGTERM keeps every point measured so far, and running the same command again times only
the points the database does not have yet for this platform."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from gac import DISTRIBUTION
from gac.agent.cli import (
    DeviceOpt,
    DtypeOpt,
    PlanOpt,
    ThreadsOpt,
    _load_plan,
    _summary_table,
    console,
    left_to_time,
    open_session,
    out_console,
    run_info,
    run_keeping,
)


def profile(
    plan: PlanOpt = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    threads: ThreadsOpt = None,
    adaptive: Annotated[bool, typer.Option("--adaptive/--exhaustive")] = True,
    quiet: Annotated[bool, typer.Option("--quiet")] = False,
) -> None:
    """Time a plan on this machine and store the results in the local embedded database."""
    try:
        from gac.agent.resume import on_plan
        from gac.service.cli import database_said
        from gac.service.ingest.service import LocalDatabase
    except ImportError as err:
        console.print(f"[red]`gac profile` needs the service extra (pip install '{DISTRIBUTION}\\[service]'): {escape(str(err))}[/red]")
        raise typer.Exit(2) from err
    from gac.agent.steps import CONFIRM_STEPS
    from gac.commands.local_store import LocalStore, stored_points

    session = open_session(device, threads)
    fingerprint = session.platform.fingerprint()
    console.print(f"platform {session.platform.label()}  fingerprint {fingerprint[:16]}")
    p = _load_plan(plan, dtype, session.platform)
    with database_said():
        opened = LocalDatabase()
    with opened as db:
        known = stored_points(db, session.platform, p)
        left = left_to_time(p, known, adaptive)
        if left.plan is None:
            return
        store = LocalStore(db, session.platform, run_info(p.name, session.device))
        result = run_keeping(session, left.plan, store, adaptive, quiet, confirm_steps=CONFIRM_STEPS, stored=left.known)
    out_console.print(_summary_table(result, left.plan, on_plan(known, p)))
    console.print(f"stored {store.inserted} new rows ({store.duplicates} duplicates) for platform {fingerprint[:16]}")


def register(app: typer.Typer) -> None:
    """Add `gac profile` to the `gac` application."""
    app.command("profile")(profile)
