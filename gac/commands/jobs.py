"""`gac jobs list | show | cancel`: the service's profiling queue from a terminal, for the operators
of a fleet (what `GET /v1/jobs` and `DELETE /v1/jobs/{id}` do, through gac.client)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Annotated, cast, get_args

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gac.client import Client, GacApiError, GacClientError
from gac.commands import TOKEN_HINT
from gac.contracts.api import Job, JobStatus

err = Console(stderr=True, soft_wrap=True, highlight=False)
out = Console(soft_wrap=True, highlight=False)
STATUSES = get_args(JobStatus)

ServerOpt = Annotated[str | None, typer.Option("--server", help="the service URL (default: $GAC_SERVER, else http://127.0.0.1:8000)")]
TokenOpt = Annotated[str | None, typer.Option("--token", help="API token (default: $GAC_TOKEN); cancel and requeue need an admin one")]

jobs_app = typer.Typer(no_args_is_help=True, help="The service's profiling-job queue: list, show, cancel, requeue.")


@contextmanager
def _service(server: str | None, token: str | None) -> Iterator[Client]:
    """A client of the service; its refusals and an unreachable service end the command with their
    message (exit 1), not a traceback."""
    try:
        with Client(server, token, token_hint=TOKEN_HINT) as client:
            yield client
    except GacApiError as exc:
        hints = {
            401: " (give a token the service takes: --token or GAC_TOKEN)",
            403: " (cancelling and requeueing need an admin token: --token or GAC_TOKEN)",
        }
        hint = hints.get(exc.status, "")
        err.print(f"[red]{escape(str(exc))}{hint}[/red]")
        raise typer.Exit(1) from None
    except GacClientError as exc:
        err.print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(1) from None


def _statuses(values: list[str] | None) -> list[JobStatus]:
    for value in values or []:
        if value not in STATUSES:
            err.print(f"[red]--status must be one of {', '.join(STATUSES)}, not {escape(repr(value))}[/red]")
            raise typer.Exit(2)
    return [cast(JobStatus, v) for v in values or []]


def _ago(when: datetime | None, now: datetime) -> str:
    """'in 42s' / '3m ago': when a lease runs out, or a job last changed."""
    if when is None:
        return ""
    seconds = (when if when.tzinfo else when.replace(tzinfo=UTC)) - now
    s = abs(seconds.total_seconds())
    span = f"{s:.0f}s" if s < 120 else f"{s / 60:.0f}m" if s < 7200 else f"{s / 3600:.0f}h"
    return f"in {span}" if seconds.total_seconds() >= 0 else f"{span} ago"


def _progress(job: Job) -> str:
    """Points done of the job's points: a running job's as of its agent's last heartbeat; a done job's flagged
    ones said (stored, but no curve or alignment uses them)."""
    flagged = f" ({job.points_flagged} flagged)" if job.points_flagged else ""
    return f"{job.points_done if job.points_done is not None else '-'}/{job.points}{flagged}"


def _table(jobs: list[Job], now: datetime, named: dict[str, str] | None = None) -> Table:
    table = Table(box=None, pad_edge=False)
    for name, justify in (("id", "right"), ("status", "left"), ("points", "right"), ("plan", "left"), ("for", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    table.add_column("prio", justify="right")
    table.add_column("tries", justify="right")
    table.add_column("lease", overflow="fold")
    table.add_column("note", overflow="ellipsis", max_width=48)
    for j in jobs:
        lease = _lease(j, now)
        table.add_row(
            str(j.id),
            j.status,
            _progress(j),
            escape(j.plan_name),
            escape(_for(j, named)),
            str(j.priority),
            f"{j.attempts}/{j.max_attempts}",
            escape(lease),
            escape(_note(j)),
        )
    return table


def _lease(job: Job, now: datetime) -> str:
    """Who holds a leased job and until when: a lease that ran out is the next claim's; one an operator asked back
    (a requeue while its agent reports) says so."""
    if job.status != "leased":
        return ""
    ends = job.lease_expires_at
    if ends is not None and ends <= now:
        return f"{job.lease_owner or '?'}, ran out {_ago(ends, now)}: the next claim takes it"
    asked = f", asked back {_ago(job.requeue_asked_at, now)}" if job.requeue_asked_at else ""
    return f"{job.lease_owner or '?'}{asked}, ends {_ago(ends, now)}"


def _requeued(job: Job) -> str:
    """What a requeue came to: queued again, or its agent (reporting lately) asked for it back."""
    if job.status == "leased" and job.requeue_asked_at is not None:
        return (
            f"job {job.id} (plan {job.plan_name}): asked agent {job.lease_owner} for it back, as it reported within the last "
            f"minute: it stops and gives the job back, or its lease ends {_ago(job.lease_expires_at, datetime.now(UTC))}"
        )
    return f"requeued job {job.id} (plan {job.plan_name}): {job.error or ''}"


def _note(job: Job) -> str:
    """The job's error or reason, first line; on a running job it is an earlier attempt's (why it was queued again)."""
    note = job.error.splitlines()[0] if job.error else ""
    return f"earlier attempt: {note}" if note and job.status == "leased" else note


def _for(job: Job, named: dict[str, str] | None = None) -> str:
    """Which platforms may take the job: a fingerprint's first 12 characters (and the platform it names, where
    known: two thread counts of one CPU are two platforms), a device kind or name, or any."""
    m = job.match
    fp = (
        f"{m.fingerprint[:12]} ({(named or {})[m.fingerprint]})"
        if m.fingerprint and m.fingerprint in (named or {})
        else (m.fingerprint or "")[:16]
    )
    parts = [fp, m.device_kind or "", m.device_name or ""]
    return " ".join(p for p in parts if p) or "any"


def _platform_names(client: Client, jobs: list[Job]) -> dict[str, str]:
    """Each matched fingerprint's device and thread count, as the service knows them (a lookup that fails leaves it out)."""
    named: dict[str, str] = {}
    for fp in {j.match.fingerprint for j in jobs if j.match.fingerprint}:
        try:
            d = client.platform(fp).descriptor
        except (GacApiError, GacClientError):
            continue
        threads = f", {d.threads} thread{'s' if d.threads != 1 else ''}" if d.device_kind == "cpu" and d.threads else ""
        named[fp] = f"{d.device_name}{threads}"
    return named


@jobs_app.command("list")
def list_jobs(
    status: Annotated[
        list[str] | None, typer.Option("--status", metavar="STATE", help=f"only jobs in this state (repeatable): {', '.join(STATUSES)}")
    ] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
    limit: Annotated[int, typer.Option(min=1, help="list at most this many (the oldest first)")] = 200,
    as_json: Annotated[bool, typer.Option("--json", help="print the jobs as JSON lines on stdout")] = False,
) -> None:
    """The queue, oldest job first: state, points done of the job's points, which platforms may take it,
    who holds its lease and when that ends, and why it failed or was given back."""
    states = _statuses(status)
    with _service(server, token) as client:
        listing = client.jobs(states or None, page_size=min(limit, 500))
        jobs = [job for _, job in zip(range(limit), listing, strict=False)]
        total = listing.total
        named = {} if as_json else _platform_names(client, jobs)
    if as_json:
        for job in jobs:
            sys.stdout.write(job.model_dump_json() + "\n")
        return
    which = f" ({', '.join(states)})" if states else ""
    if not jobs:
        out.print(f"no jobs{which} on {escape(client.url)}")
        return
    out.print(_table(jobs, datetime.now(UTC), named))
    more = f"; the first {len(jobs)} shown (--limit)" if total > len(jobs) else ""
    out.print(f"{total} job(s){which} on {escape(client.url)}{more}")


@jobs_app.command("show")
def show_job(
    job_id: Annotated[int, typer.Argument(help="the job's id")],
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """One job as the service holds it, its plan included (JSON)."""
    with _service(server, token) as client:
        job = client.job(job_id)
    out.print_json(json.dumps(job.model_dump(mode="json")))


@jobs_app.command("cancel")
def cancel_jobs(
    job_ids: Annotated[list[int], typer.Argument(metavar="ID...", help="the ids of the jobs to cancel")],
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Cancel queued or leased jobs (admin token). An agent timing a cancelled job stops at its next
    heartbeat; what it measured so far is kept. Exit 1 if any could not be cancelled."""
    _each_job(job_ids, server, token, Client.cancel_job, lambda j: f"cancelled job {j.id} (plan {j.plan_name}, {_progress(j)} points)")


@jobs_app.command("requeue")
def requeue_jobs(
    job_ids: Annotated[list[int], typer.Argument(metavar="ID...", help="the ids of the leased jobs to take back")],
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Put leased jobs back in the queue (admin token), as when their leases run out: for an agent killed or
    stuck mid-job. An agent that reported within the last minute is asked for its job instead: it stops at its
    next heartbeat and gives the job back (else its lease ends 90 s after the ask), so two agents never time it at
    once. The attempt is given back; what was measured is kept, and the next agent skips it. Exit 1 if any
    could not be requeued."""
    _each_job(job_ids, server, token, Client.requeue_job, _requeued)


def _each_job(
    job_ids: list[int], server: str | None, token: str | None, act: Callable[[Client, int], Job], said: Callable[[Job], str]
) -> None:
    """`act` on each job, saying what became of it; one refused is said and the rest go on (exit 1 at the end),
    a token refused stops them all."""
    failed = 0
    with _service(server, token) as client:
        for job_id in job_ids:
            try:
                job = act(client, job_id)
            except GacApiError as exc:
                if exc.status in (401, 403):
                    raise
                err.print(f"[red]job {job_id}: {escape(str(exc))}[/red]")
                failed += 1
                continue
            out.print(escape(said(job)))
    if failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add `gac jobs` to the `gac` application."""
    app.add_typer(jobs_app, name="jobs")
