"""`gac agent run|flush|platform|selftest` and `gac ingest`: the agent's commands.

torch is imported inside the commands that time kernels, so each machine needs
only what it runs. `gac profile` (agent timing stored into the local database)
joins the agent and the service: it lives in gac/commands/profile.py.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Protocol

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gac import DISTRIBUTION

if TYPE_CHECKING:
    import uuid

    import httpx

    from gac.agent.cpu_load import Busy
    from gac.agent.delivery import BatchFileWriter, Deliverer, DeliveryStats, Spool
    from gac.agent.interrupt import StopSignals
    from gac.agent.jobs import Job, JobClient, Poll, ProgressLine
    from gac.agent.resume import Known, Remaining
    from gac.agent.runner import PointOutcome, RunResult
    from gac.agent.timing import Timer, TimingResult
    from gac.contracts.measurements import Batch, Measurement, PlatformDescriptor, RunInfo
    from gac.contracts.plans import SweepPlan

console = Console(stderr=True, soft_wrap=True)  # messages name files: never broken mid-line
# Off a terminal (a pipe, a file) rich would cut the tables to 80 columns; COLUMNS still decides where set.
out_console = Console(width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 200)

# Defaults come from gac.agent.settings.AgentSettings (GAC_SERVER, GAC_TOKEN, GAC_DATA_DIR, ...).
ServerOpt = Annotated[str | None, typer.Option("--server", help="Service URL, e.g. http://host:8000 (default: $GAC_SERVER)")]
TokenOpt = Annotated[str | None, typer.Option("--token", help="Ingest token (Bearer) (default: $GAC_TOKEN)")]
SpoolOpt = Annotated[
    Path | None,
    typer.Option("--spool-dir", help="Where undelivered batches wait (default: $GAC_AGENT_SPOOL_DIR, else $GAC_DATA_DIR/spool)"),
]
PlanOpt = Annotated[str | None, typer.Option("--plan", help="quick | paper | path to a YAML/JSON plan")]
DeviceOpt = Annotated[
    str | None, typer.Option("--device", help="cpu, cuda:N or auto, the first GPU, else the CPU (default: $GAC_DEVICE, else auto)")
]


def _known_dtypes(values: list[str] | None) -> list[str] | None:
    """--dtype checked before anything is detected or timed."""
    from gac.contracts.manifest import dtype_named
    from gac.contracts.plans import Dtype

    known = [d.value for d in Dtype]
    named = [dtype_named(v) for v in values or []]  # bf16, fp16, half, fp32 as a manifest reads them
    for v, name in zip(values or [], named):
        if name not in known:
            raise typer.BadParameter(f"{v!r} is not a dtype GAC times: choose from {', '.join(known)}")
    return named if values is not None else None


DtypeOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--dtype",
        callback=_known_dtypes,
        help="float16, bfloat16 or float32 (repeatable): the quick plan's dtypes (default: this platform's fast dtype; it "
        "adds a float32 N sweep as the contrast, unless float32 is one); other plans keep only these",
    ),
]
RetriesOpt = Annotated[int, typer.Option("--retries", min=0, max=20, help="Retries per batch (exponential backoff + jitter)")]
ThreadsOpt = Annotated[
    int | None, typer.Option("--threads", min=1, help="CPU intra-op threads (fixed for the whole run; default: torch's)")
]


def device_setting(device: str | None, threads: int | None = None) -> str:
    """--device, else GAC_DEVICE, else auto: the first GPU torch sees, else the CPU; with --threads
    (a CPU's setting), the CPU. A bad GAC_DEVICE is named as such."""
    from gac.agent.platform import parse_device
    from gac.agent.settings import AgentSettings

    if device is not None:
        return device
    chosen = AgentSettings().device
    if chosen == "auto" and threads is not None:
        return "cpu"
    try:
        parse_device(chosen)
    except ValueError as err:
        raise ValueError(f"GAC_DEVICE={chosen}: {err}") from None
    return chosen


def client_settings(server: str | None, token: str | None) -> tuple[str | None, str | None]:
    """--server and --token, else GAC_SERVER and GAC_TOKEN (read through the agent's settings class)."""
    from gac.agent.settings import AgentSettings

    cfg = AgentSettings()
    return server or cfg.server, token or cfg.token


def check_server(
    server: str, token: str, client: httpx.Client, need_server: bool, offline_ok: bool = False, wait: Poll | None = None
) -> None:
    """Before any timing: a token the service refuses fails now, not after the profile.

    An unreachable service stops the run before it times anything (a mistyped --server would
    otherwise cost a whole profile), unless the user asked to profile offline (`offline_ok`: --out
    or --spool); --jobs always needs the queue. With `wait` (--follow: an agent started with its
    machine, perhaps before the service) it is asked again until it answers, as `wait` paces."""
    import httpx

    if "://" not in server:
        console.print(f"[red]--server {escape(server)}: give the URL with its scheme, e.g. http://{escape(server)}[/red]")
        raise typer.Exit(2)
    said = False
    while True:
        try:
            r = client.get(f"{server.rstrip('/')}/v1/auth/token", headers={"Authorization": f"Bearer {token}"}, timeout=10)
            break
        except httpx.TransportError as err:
            if wait is None:
                _unreachable(server, err, need_server, offline_ok)
                return
            if not said:
                console.print(
                    f"cannot reach {server} ({type(err).__name__}): waiting for it (--follow; waits double from {wait.every_s:g} s "
                    f"up to {wait.max_s:g} s); Ctrl-C or SIGTERM stops",
                    markup=False,
                    highlight=False,
                )
                said = True
            time.sleep(wait.next_wait(failed=True))
    if said:
        console.print(f"reached {server}", markup=False, highlight=False)
    if r.status_code == 404:
        # Every GAC service answers this path: a 404 is a wrong path in --server (".../v1") or another server.
        console.print(
            f"[red]{escape(server)} is not a GAC service's root: GET /v1/auth/token there answers 404. "
            "--server is the address `gac serve` listens on, e.g. http://host:8000, with no path[/red]"
        )
        raise typer.Exit(2)
    if r.status_code == 401:
        console.print(f"[red]{escape(server)} refuses this token (unknown, malformed or revoked): check --token / GAC_TOKEN[/red]")
        raise typer.Exit(2)
    if r.status_code == 200 and r.json().get("scope") not in ("ingest", "admin"):
        name, scope = (escape(repr(r.json().get(k))) for k in ("name", "scope"))
        console.print(f"[red]token {name} has scope {scope}: delivering results needs ingest[/red]")
        raise typer.Exit(2)


def _unreachable(server: str, err: Exception, need_server: bool, offline_ok: bool) -> None:
    """The service did not answer at start: stop (exit 1) unless the user asked to profile offline."""
    if need_server:
        console.print(f"[red]cannot reach {escape(server)} ({type(err).__name__}): --jobs needs the service (--follow waits for it)[/red]")
        raise typer.Exit(1) from err
    if not offline_ok:
        console.print(
            f"cannot reach {server} ({type(err).__name__}): nothing timed. Check --server (or GAC_SERVER); "
            "to profile offline on purpose add --spool (results wait in the spool for `gac agent flush`) "
            "or --out FILE (for `gac ingest`)",
            style="red",
            markup=False,
            highlight=False,
        )
        raise typer.Exit(1) from err
    console.print(f"[yellow]cannot reach {escape(server)} now ({type(err).__name__}): results will be spooled and sent later[/yellow]")


def _agent_name(device: str | None = None) -> str:
    """GAC_AGENT_NAME, else the host, and the GPU when it times one: a host with several GPUs runs an
    agent per GPU, and the runs each sent should not read as one agent's."""
    from gac.agent.settings import AgentSettings

    named = (AgentSettings().agent_name or "").strip()
    if named:
        return named[:200]
    host = socket.gethostname()[:180] or "agent"
    if not device or not device.startswith("cuda"):
        return host
    # cuda:0 of an agent started with CUDA_VISIBLE_DEVICES=3 is the host's GPU 3 (an index, or a GPU-... UUID).
    index = int(device.partition(":")[2] or 0)
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    gpu = f"cuda:{visible[index]}" if index < len(visible) else device
    return f"{host}/{gpu}"[:200]


def _lease_name() -> str:
    """Who holds a job's lease: the host and this process, so that two agents on one host (one GPU
    each) never report on each other's jobs; not GAC_AGENT_NAME, which replicas may share."""
    return f"{socket.gethostname()[:190] or 'agent'}:{os.getpid()}"


def _agent_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None


def _load_plan(plan: str | None, dtypes: list[str] | None, platform: PlatformDescriptor) -> SweepPlan:
    """The plan; the quick plan in the platform's fast dtype unless --dtype says otherwise. Says which dtype and why."""
    from gac.agent.dtypes import choose_dtype
    from gac.agent.plan_library import resolve_plan
    from gac.contracts.plans import PlanError

    name = plan or "quick"
    try:
        if name == "quick" and not dtypes:
            fast, line = choose_dtype(platform)
            p = resolve_plan(name, [fast])
            lines = [line]
        else:
            p = resolve_plan(name, dtypes)
            used = dict.fromkeys(d.value for s in p.sweeps for d in s.dtypes)
            # A dtype --dtype did not name is the plan's own (the quick plan's float32 contrast sweep).
            lines = [choose_dtype(platform, d, "with --dtype" if dtypes and d in dtypes else f"by plan {p.name}")[1] for d in used]
    except (PlanError, FileNotFoundError, ValueError) as err:
        console.print(f"[red]plan error:[/red] {escape(str(err))}")
        raise typer.Exit(2) from err
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    return p


@dataclass
class _Session:
    """What one agent process sets up once: device, timer, platform."""

    device: str
    timer: Timer
    platform: PlatformDescriptor


FLEET_THREADS = "the jobs this agent takes are queued for this machine's platform at its thread count"


def open_session(device: str | None, threads: int | None, timing: bool = True, pinned: str | None = None) -> _Session:
    """Device, timer and platform; `timing` False for commands that time nothing (no load warning);
    `pinned`: why the thread count is not the agent's to choose (a platform being extended was timed
    with it; a fleet's jobs are queued for it), or None."""
    from gac.agent.platform import detect_platform, parse_device
    from gac.agent.timing import make_timer

    try:
        dev = parse_device(device_setting(device, threads))
        if timing and dev.type == "cpu" and threads is None and pinned is None:
            threads = _threads_for_load()
        timer = make_timer(dev, threads)  # sets the thread count before the platform reads it
        platform = detect_platform(dev)
    except (RuntimeError, ValueError) as err:
        console.print(f"[red]device error:[/red] {escape(str(err))}")
        raise typer.Exit(2) from err
    if timing:
        _warn_if_busy(platform, pinned)
    return _Session(str(dev), timer, platform)


def _threads_for_load(busy: Callable[[], Busy | None] | None = None) -> int | None:
    """No --threads on a CPU that other work already uses: time with one thread, and say so. Several
    intra-op threads stall at every barrier when one of them is descheduled (whole scheduler ticks,
    milliseconds: a 91 us GEMM read 24 ms), while one thread waits on no other and its preempted
    samples are recognised and dropped. None (torch's default) on a quiet machine."""
    import torch

    from gac.agent.cpu_load import busy_now, contention_warning

    cores, default = os.cpu_count() or 1, torch.get_num_threads()
    if default <= 1:
        return None
    now = (busy or busy_now)()
    if contention_warning(now, cores, default) is None:
        return None
    assert now is not None
    console.print(
        f"{now.how} on {cores} cores: timing with --threads 1 instead of {default} (threads that wait on "
        "descheduled threads stall; one thread does not); pass --threads to choose",
        markup=False,
        highlight=False,
    )
    return 1


def _warn_if_busy(platform: PlatformDescriptor, pinned: str | None = None, busy: Callable[[], Busy | None] | None = None) -> None:
    """On a CPU that other work already uses, intra-op threads stall at every barrier
    (whole scheduler ticks, milliseconds): say so before the figures go wrong. Points timed
    while it was busy are re-timed or sent flagged (gac.agent.quality). A pinned count cannot
    drop to one thread: that would be another platform."""
    from gac.agent.cpu_load import QUIET_OR_ONE_THREAD, busy_now, contention_warning

    if platform.device_kind != "cpu" or not platform.cores or not platform.threads or platform.threads <= 1:
        return  # one timing thread waits on no other: no need to sample the load
    advice = (
        f"{pinned}, so the count stays at {platform.threads} (fewer would be another platform): a quieter machine gives trustworthy figures"
        if pinned
        else QUIET_OR_ONE_THREAD
    )
    warning = contention_warning((busy or busy_now)(), platform.cores, platform.threads, advice)
    if warning:
        console.print(f"[yellow]warning: {warning}; points timed while it is busy are re-timed or flagged[/yellow]")


def first_round(plan: SweepPlan, adaptive: bool, per_round: int) -> int:
    """How many points the run times together first, paying the one-time costs: adaptive sweeps go
    first, a point at a time; otherwise the timer's round (`per_round` points per host round trip)."""
    if adaptive and any(sw.adaptive is not None for sw in plan.sweeps):
        return 1
    return max(1, per_round)


def run_with_progress(
    session: _Session,
    plan: SweepPlan,
    sink: Callable[[Measurement], None],
    adaptive: bool,
    quiet: bool = False,
    line: ProgressLine | None = None,
    confirm_steps: int = 0,
    stored: Known | None = None,
) -> RunResult:
    """Run a plan showing one progress line, '<label>: done/total points, ETA ...' (`line`, else
    'plan NAME: ...'), then the last point timed as far as the width allows; the line's final
    state stays on screen (and is written once to a log that is not a terminal). confirm_steps:
    each curve's largest steps timed again before the summary shows one (gac.agent.steps). stored:
    the medians the plan's adaptive sweeps continue from (gac.agent.resume.Remaining.known)."""
    from rich.progress import Progress, ProgressColumn, Task
    from rich.text import Text

    from gac.agent.jobs import ProgressLine
    from gac.agent.resume import planned_points
    from gac.agent.runner import PlanRunner
    from gac.agent.runner import Progress as RunProgress

    line = line or ProgressLine(f"plan {plan.name}")
    per_round = int(getattr(session.timer, "points_per_round", 1))
    line.first_round, line.per_round = first_round(plan, adaptive, per_round), max(1, per_round)
    line.total = planned_points(plan, adaptive, stored)
    line.refining = adaptive and any(s.adaptive for s in plan.sweeps)  # the runner times adaptive sweeps first
    state: tuple[int, int, str] = (0, line.total, "")  # done, total, the last point timed

    def text(done: int, total: int, last: str = "") -> str:
        head = line.line(done, total)
        room = console.width - len(head) - 3
        return f"{head} | {last[:room]}" if last and room >= 20 else head

    class LineColumn(ProgressColumn):
        """The line made at each refresh, not at each point: its ETA counts down while a point runs."""

        def render(self, task: Task) -> Text:
            return Text(text(*state), no_wrap=True, overflow="ellipsis")

    with Progress(LineColumn(), console=console, disable=quiet, transient=False) as bar:
        task = bar.add_task("", total=state[1])

        def on_progress(p: RunProgress) -> None:
            nonlocal state
            last = p.error or (
                f"{p.point.op.value} {p.point.dtype.value} {p.point.axis}={p.point.shape[p.point.axis]}: {p.result.median_us:.1f} us"
                if p.result
                else ""
            )
            state = (p.done, p.total, last)
            line.total = max(line.total, p.total)
            line.refining = line.refining and plan.sweeps[p.point.sweep].adaptive is not None  # past them: none can refine more
            line.reached(p.done)  # the countdown starts when the point finished, not at the next refresh
            bar.update(task, completed=p.done, total=p.total)

        runner = PlanRunner(
            session.timer,
            session.device,
            on_progress=on_progress,
            on_measurement=sink,
            adaptive=adaptive,
            confirm_steps=confirm_steps,
            stored=stored,
        )
        result = runner.run(plan)
        state = (len(result.outcomes), len(result.outcomes), "")  # the final state, without the last point
        bar.refresh()
        return result


class KeepingSink(Protocol):
    """Where run_keeping puts each measured row: committed as it goes, the rest on close()."""

    @property
    def committed(self) -> int: ...  # rows made durable so far

    @property
    def committed_points(self) -> int: ...  # distinct points among them

    def add(self, m: Measurement) -> None: ...

    def close(self) -> None: ...

    def kept_where(self) -> str: ...  # "stored", "sent to URL", ...


def run_keeping(
    session: _Session,
    plan: SweepPlan,
    sink: KeepingSink,
    adaptive: bool,
    quiet: bool = False,
    line: ProgressLine | None = None,
    on_stop: Callable[[StopSignals], None] | None = None,
    kept_before: int = 0,
    confirm_steps: int = 0,
    left_after: int = 0,
    first_pass: bool = False,
    stored: Known | None = None,
) -> RunResult:
    """run_with_progress into a sink that commits as it goes. Stopped by Ctrl-C or SIGTERM, it commits
    what was measured, calls on_stop (a job is given back), says how many points it kept (with
    `kept_before`, those an earlier run of the same command kept) and how many it did not measure (with
    `left_after`, those the command would time after this plan; `first_pass`: more may follow them), and exits
    130 (SIGINT) or 143 (SIGTERM). Run to the end, it names each point that could not be timed. stored: as
    run_with_progress's."""
    from gac.agent.interrupt import FIRST_PASS_MORE, REFINING_MORE, interrupted_line, stop_signals
    from gac.agent.jobs import ProgressLine

    line = line or ProgressLine(f"plan {plan.name}")
    with stop_signals() as stop:
        try:
            result = run_with_progress(session, plan, sink.add, adaptive, quiet, line=line, confirm_steps=confirm_steps, stored=stored)
            sink.close()
        except KeyboardInterrupt:
            try:
                sink.close()  # a second signal now waits for each commit, then stops the command as it stands
                if on_stop is not None:
                    on_stop(stop)
            except KeyboardInterrupt:  # that second signal: the way out ends here, and the line below still says what was kept
                console.print(f"[yellow]{stop.name} again: stopping without waiting for the rest of the way out[/yellow]")
            # In points, not rows: a point the quality gate timed again has a row per run. The total is the
            # run's own, which adaptive sweeps' refinement grew; an adaptive sweep not done may refine more.
            left = max(0, line.total - sink.committed_points) + left_after
            more = FIRST_PASS_MORE if first_pass else REFINING_MORE if adaptive and line.refining else ""
            said = interrupted_line(kept_before + sink.committed_points, left, sink.kept_where(), more)
            console.print(said, style="yellow", markup=False, highlight=False)
            raise typer.Exit(stop.exit_code) from None
    _print_failures(result, session)  # whichever command ran the plan
    return result


def left_to_time(plan: SweepPlan, known: Known, adaptive: bool, stored: str = "already stored for this platform") -> Remaining:
    """The plan without the points already stored; says how many it skips (`stored`: where they are)."""
    from gac.agent.resume import remaining

    left = remaining(plan, known, adaptive)
    said = left.skip_line(stored)
    if said:
        console.print(said, markup=False, highlight=False)
    if left.plan is None:
        console.print(f"nothing left to time in plan {plan.name}", markup=False, highlight=False)  # the skip line said where they are
    return left


_SHORT = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}


def _summary_table(result: RunResult, plan: SweepPlan, stored: Known | None = None) -> Table:
    """Per sweep and dtype: points, latency range, and the biggest step along the axis (the one that
    repeated when timed again, where the run did that: RunResult.steps). stored: the points an earlier run
    stored on these curves (left out of this one): counted, and said not to be in the ranges and steps."""
    from gac.agent.resume import sweep_curve
    from gac.contracts.measurements import Dtype, shape_key

    t = Table(title=f"plan {escape(plan.name)}: {len(result.measurements)} points in {result.seconds:.1f} s")  # a name is text
    t.add_column("sweep", overflow="fold", min_width=20)  # on 80 columns (a log file's) the step's text wraps, not the sweep's
    t.add_column("pts", justify="right")
    t.add_column("median us", justify="right", no_wrap=True)
    t.add_column("largest step", overflow="fold")
    t.add_column("fail", justify="right")
    t.add_column("flagged", justify="right")
    groups: dict[tuple[int, str], list] = {}
    for o in result.outcomes:
        groups.setdefault((o.point.sweep, o.point.dtype.value), []).append(o)
    for (i, dtype), outs in sorted(groups.items()):
        sweep = plan.sweeps[i]
        # A flagged point (gac.agent.quality) is no evidence of a step: left out of the range and steps.
        ok = sorted(
            (
                (o.point.shape[sweep.axis], o.result)
                for o in outs
                if o.result is not None and o.measurement is not None and o.measurement.quality is None
            ),
            key=lambda p: p[0],
        )
        flagged = sum(1 for o in outs if o.measurement is not None and o.measurement.quality is not None)
        failed = sum(1 for o in outs if o.error)
        rng, step = "-", "-"
        if ok:
            meds = [r.median_us for _, r in ok]
            rng = f"{min(meds):.1f}..{max(meds):.1f}"
            check = result.steps.get((i, dtype))
            step = check.describe(sweep.axis) if check is not None else _largest_step(ok, sweep.axis)
        name = f"{sweep.op.value} {_SHORT.get(dtype, dtype)} {sweep.axis} | {shape_key(sweep.fixed)}"
        earlier = len((stored or {}).get(sweep_curve(sweep, Dtype(dtype)), {}))
        pts = f"{len(ok)} (+{earlier} stored)" if earlier else str(len(ok))
        if earlier and ok:
            step += " among these"  # a step between stored points is not seen here
        t.add_row(name, pts, rng, step, str(failed) if failed else "", str(flagged) if flagged else "")
    if any(stored.values() if stored else ()):
        t.caption = "points stored by earlier runs are counted, not in the ranges or steps (they are judged where they were timed)"
    return t


def _confirm_steps() -> int:
    from gac.agent.steps import CONFIRM_STEPS

    return CONFIRM_STEPS


def _largest_step(curve: list[tuple[int, TimingResult]], axis: str) -> str:
    """Not timed again: the largest step between neighbours whose p10..p90 ranges do not overlap (a
    step inside the points' own noise would not come back in the next run, and is not shown)."""
    from gac.agent.steps import steps_beyond_noise

    steps = steps_beyond_noise(curve)
    if not steps:
        return "none beyond noise" if len(curve) > 1 else "-"
    return f"{steps[0].first:+.0%} {axis}={steps[0].lo}->{steps[0].hi} (not re-timed)"


def _print_failures(result: RunResult, session: _Session) -> None:
    """Each point that could not be timed (the first ten), naming the device and the kernel:
    'failed on cpu (AMD EPYC): gemm float32 m=1048576,n=1048576,k=1048576: RuntimeError: ... can't allocate memory'."""
    where = escape(_device_named(session))
    for o in result.failures[:10]:
        console.print(f"[yellow]failed on {where}:[/yellow] {escape(_failed_kernel(o))}")
    if len(result.failures) > 10:
        console.print(f"[yellow]... and {len(result.failures) - 10} more failures on {where}[/yellow]")


def failures_note(result: RunResult, session: _Session, shown: int = 3) -> str | None:
    """What of a run could not be timed, in one line for a job's record (None when every point was):
    '2 points could not be timed on cpu (AMD EPYC): gemm float32 m=...: RuntimeError: ...; ...'."""
    if not result.failures:
        return None
    n, kernels = len(result.failures), "; ".join(_failed_kernel(o) for o in result.failures[:shown])
    more = f"; and {n - shown} more" if n > shown else ""
    return f"{n} point{'s' if n != 1 else ''} could not be timed on {_device_named(session)}: {kernels}{more}"


def _device_named(session: _Session) -> str:
    return f"{session.device} ({session.platform.device_name})"


def _failed_kernel(o: PointOutcome) -> str:
    """'gemm float32 m=8,n=4096,k=4096: RuntimeError: ...', on one line (an error may span several)."""
    shape = ",".join(f"{k}={v}" for k, v in o.point.shape.items())
    return f"{o.point.op.value} {o.point.dtype.value} {shape}: {' '.join((o.error or 'unknown error').split())}"


def _delivery_line(s: DeliveryStats) -> str:
    parts = [f"sent {s.sent_batches} batch(es): {s.inserted} new, {s.duplicates} duplicate"]
    if s.drained_batches:
        parts.append(f"drained {s.drained_batches} from spool")
    if s.spooled_batches:
        left = f"{s.waiting_rows} rows still there (`gac agent flush` sends them)" if s.waiting else "all sent since"
        parts.append(f"[yellow]spooled {s.spooled_rows} rows in {s.spooled_batches} batch(es): {left}[/yellow]")
    if s.rejected_batches:
        parts.append(f"[red]rejected {s.rejected_rows} rows[/red]")
    return "; ".join(parts)


def run_info(plan_name: str, device: str | None = None, run_id: uuid.UUID | None = None) -> RunInfo:
    """A new run of `plan_name` by this agent timing on `device` (names it: _agent_name)."""
    from gac.contracts.ids import new_id
    from gac.contracts.measurements import RunInfo

    return RunInfo(id=run_id or new_id(), agent=_agent_name(device), plan=plan_name[:200], agent_version=_agent_version())


# ---------------------------------------------------------------- gac agent run


@dataclass(frozen=True)
class AgentRunOptions:
    """What `gac agent run` was asked to do, --server, --token and --device filled in from the settings."""

    server: str | None = None
    token: str | None = None
    plan: str | None = None
    device: str | None = None  # None: GAC_DEVICE, else auto (open_session)
    dtypes: list[str] | None = None
    jobs: bool = False
    out: Path | None = None
    threads: int | None = None
    spool_dir: Path | None = None
    spool: bool = False  # time even when --server cannot be reached now: results wait in the spool
    adaptive: bool = True
    max_jobs: int | None = None
    follow: bool = False  # with jobs: wait for more when the queue is empty, until stopped
    poll_s: float = 5.0
    lease_seconds: int = 600
    batch_size: int = 1000
    quiet: bool = False
    retries: int = 4

    def usage_error(self) -> str | None:
        """Why these options cannot make a run whose results go somewhere, or None."""
        if self.server is None and self.out is None:
            return "give --server URL --token T, or --out FILE (offline), or both"
        if self.server is not None and not self.token:
            return "--token (or GAC_TOKEN) is required with --server"
        if self.jobs and self.server is None:
            return "--jobs needs --server"
        if self.follow and not self.jobs:
            return "--follow waits for jobs: give --jobs too"
        if self.spool and self.server is None:
            return "--spool keeps what --server cannot take now: give --server too (or --out FILE alone, offline)"
        return None


@dataclass(frozen=True)
class _Agent:
    """One `gac agent run` once set up: its options, session, spool and HTTP client."""

    opts: AgentRunOptions
    session: _Session
    spool: Spool
    client: httpx.Client


class LeaseLost(Exception):
    """The job being timed is no longer this agent's (a heartbeat was refused): stop timing it."""


@dataclass
class _Sinks:
    """Where one run's measurements go: the service (spooling what it cannot take now), a results file, or both.
    Both commit as they go (gac.agent.interrupt.commit_every_s), so a stopped run keeps what it measured.
    `lost`, for a job: why its lease is gone (None while held); the next point raises LeaseLost."""

    deliverer: Deliverer | None
    writer: BatchFileWriter | None
    lost: Callable[[], str | None] | None = None

    @classmethod
    def open(cls, agent: _Agent, run: RunInfo) -> _Sinks:
        from gac.agent.delivery import BatchFileWriter, Deliverer
        from gac.agent.interrupt import commit_every_s

        o, platform, every = agent.opts, agent.session.platform, commit_every_s()
        deliverer = None
        if o.server is not None and o.token is not None:
            deliverer = Deliverer(
                o.server,
                o.token,
                platform,
                run,
                spool=agent.spool,
                batch_size=o.batch_size,
                client=agent.client,
                retries=o.retries,
                log=lambda msg: console.print(f"[yellow]{escape(msg)}[/yellow]"),
                commit_every_s=every,
            )
        writer = BatchFileWriter(o.out, platform, run, batch_size=o.batch_size, commit_every_s=every) if o.out is not None else None
        return cls(deliverer, writer)

    def add(self, m: Measurement) -> None:
        if self.deliverer is not None:
            self.deliverer.add(m)
        if self.writer is not None:
            self.writer.add(m)
        if self.lost is not None and (why := self.lost()):
            raise LeaseLost(why)

    def close(self) -> None:
        if self.writer is not None:  # first: it never waits on a service, so a second stop during the send leaves it whole
            self.writer.close()
        if self.deliverer is not None:
            self.deliverer.close()

    @property
    def committed(self) -> int:
        return min(s.committed for s in (self.deliverer, self.writer) if s is not None)

    @property
    def committed_points(self) -> int:
        return min(s.committed_points for s in (self.deliverer, self.writer) if s is not None)

    def kept_where(self) -> str:
        return "; ".join(s.kept_where() for s in (self.deliverer, self.writer) if s is not None)

    def report(self) -> None:
        if self.deliverer is not None:
            console.print(_delivery_line(self.deliverer.stats))
            for e in self.deliverer.stats.errors[:5]:
                console.print(f"[yellow]{escape(str(e))}[/yellow]")
        if self.writer is not None:
            console.print(f"wrote {self.writer.rows} rows in {self.writer.batches} batch(es) to {self.writer.path}")

    def undelivered(self) -> str | None:
        """What the service did not get ('N rows spooled, M rejected'), or None when it got everything (or there is none)."""
        st = self.deliverer.stats if self.deliverer is not None else None
        if st is None or not (st.waiting or st.rejected_batches):
            return None
        return f"{st.waiting_rows} rows spooled, {st.rejected_rows} rejected"

    def token_refused(self) -> str | None:
        """The service's word when it stopped taking this agent's token mid-run; None while it takes it."""
        return self.deliverer.token_refused if self.deliverer is not None else None

    def rejected(self) -> str | None:
        """'M rows rejected' when the service refused any, else None."""
        st = self.deliverer.stats if self.deliverer is not None else None
        return f"{st.rejected_rows} rows rejected" if st is not None and st.rejected_batches else None


def run_agent(opts: AgentRunOptions) -> int:
    """`gac agent run` once its options are valid: the plan (unless only --jobs), then the queue; the exit code."""
    from gac.agent.delivery import Spool
    from gac.agent.http_client import StopSafeClient
    from gac.agent.interrupt import stop_signals
    from gac.agent.jobs import Poll

    # Outside the timing (waiting for the service, claiming, reporting on a job) a stop signal ends the run between steps.
    with StopSafeClient(timeout=30.0) as client, stop_signals() as stop:
        try:
            if opts.server is not None and opts.token is not None:
                wait = Poll(opts.poll_s) if opts.follow else None  # an agent started with its machine may be up before the service
                offline_ok = opts.spool or opts.out is not None
                check_server(opts.server, opts.token, client, need_server=opts.jobs, offline_ok=offline_ok, wait=wait)
            # A fleet's jobs are queued for the machine's platform at its usual thread count: an agent that
            # dropped to one thread on a busy moment would be another platform and never claim them.
            session = open_session(opts.device, opts.threads, pinned=FLEET_THREADS if opts.jobs else None)
            console.print(f"platform {session.platform.label()}  fingerprint {session.platform.fingerprint()[:16]}")
            plan = None if (opts.jobs and opts.plan is None) else _load_plan(opts.plan, opts.dtypes, session.platform)
            agent = _Agent(opts, session, Spool(opts.spool_dir), client)
            exit_code = _run_plan(agent, plan) if plan is not None else 0
            if opts.jobs:
                exit_code = max(exit_code, _run_jobs(agent))
        except KeyboardInterrupt:
            console.print(f"[yellow]interrupted by {stop.name} between steps: nothing measured was left behind[/yellow]")
            return stop.exit_code
    return exit_code


def _known_to_service(agent: _Agent, plan: SweepPlan) -> Known:
    """The plan's points the service has stored for this platform, and those waiting in the local spool
    for it; nothing without --server."""
    from gac.agent.resume import known_in_spool, known_on_server, merge, plan_curves

    o, fingerprint = agent.opts, agent.session.platform.fingerprint()
    if o.server is None or o.token is None:
        return {}
    stored = known_on_server(agent.client, o.server, o.token, fingerprint, plan_curves(plan))
    if stored is None:
        where = escape(o.server)
        console.print(f"[yellow]cannot ask {where} which points it has stored: skipping only those waiting in the spool[/yellow]")
    return merge(stored or {}, known_in_spool(agent.spool, o.server, fingerprint))


def _known_before(agent: _Agent, plan: SweepPlan) -> tuple[Known, str]:
    """What an earlier run kept of the plan: in the service or the spool (with --server), and in the
    --out file (an interrupted offline run is continued by the same command); and where, for the skip line."""
    from gac.agent.resume import known_in_file, merge

    known, where = _known_to_service(agent, plan), "already stored for this platform"
    out = agent.opts.out
    if out is not None:
        known = merge(known, known_in_file(out, agent.session.platform.fingerprint()))
        where = f"already in {out}" + (" or stored for this platform" if agent.opts.server else "")
    return known, where


def _run_plan(agent: _Agent, plan: SweepPlan) -> int:
    from gac.agent.resume import on_plan

    sinks = _Sinks.open(agent, run_info(plan.name, agent.session.device))
    if sinks.deliverer is not None:
        sinks.deliverer.drain()  # what an earlier run could not send goes first
    known, where = _known_before(agent, plan)
    left = left_to_time(plan, known, agent.opts.adaptive, where)
    if left.plan is None:
        sinks.close()
        return 0
    result = run_keeping(
        agent.session,
        left.plan,
        sinks,
        agent.opts.adaptive,
        agent.opts.quiet,
        on_stop=lambda _: sinks.report(),
        confirm_steps=_confirm_steps(),
        stored=left.known,
    )
    out_console.print(_summary_table(result, left.plan, on_plan(known, plan)))
    sinks.report()
    return 1 if sinks.undelivered() else 0


def _drain_spool(agent: _Agent) -> None:
    """Send what the spool holds for this agent's service (a job's run drains it first anyway): an agent
    that finds no job would otherwise keep an earlier run's points from the service until it gets one."""
    from gac.agent.delivery import BatchSender, DeliveryStats, RetryPolicy

    o = agent.opts
    if o.server is None or o.token is None or not agent.spool.records():
        return
    stats = DeliveryStats()
    try:
        # One quick try per batch: an idle agent polls often, and the next job's run drains (and says) the rest.
        with BatchSender(o.server, o.token, RetryPolicy(0), client=agent.client) as sender:
            agent.spool.drain(sender.send_document, sender.server, stats)
    except Exception:  # noqa: BLE001 - an answer that is no receipt, a spool it cannot rewrite: it stays for the next try
        return
    if stats.drained_batches or stats.rejected_batches:
        console.print(f"spooled earlier: {_delivery_line(stats)}")


def _run_jobs(agent: _Agent) -> int:
    """Claim jobs until the queue has none for this platform (with --follow: until stopped, waiting
    for more, and through a service that cannot be reached for a while); returns an exit code."""
    from gac.agent.jobs import JobClient, Poll, retryable

    o, platform = agent.opts, agent.session.platform
    assert o.server is not None and o.token is not None  # usage_error() says --jobs needs both
    jc = JobClient(o.server, o.token, agent=_lease_name(), client=agent.client)
    poll = Poll(o.poll_s) if o.follow else None
    code, k, said = 0, 0, ""
    skip: list[int | str] = []  # jobs this agent cannot time whole: passed over, left in the queue for others
    while o.max_jobs is None or k < o.max_jobs:
        job, failure = _claim(jc, platform, o.lease_seconds, skip)
        if failure is not None and (poll is None or not retryable(failure)):
            console.print(f"[red]cannot claim a job: {escape(str(failure))}[/red]")
            return 1
        if job is None:
            if failure is None:
                _drain_spool(agent)  # the service answers and there is no job: what an earlier run spooled goes now
            if poll is None:
                console.print("no (more) jobs for this platform")
                _say_other_threads(jc, platform)
                return code
            # Said once per change (an idle agent prints nothing more), the service's error each time it changes.
            if failure:
                why = f"cannot claim a job ({failure}): trying again (waits double from {poll.every_s:g} s up to {poll.max_s:g} s)"
            else:
                why = f"no jobs for this platform now: waiting for more (about every {poll.every_s:g} s)"
            if why != said:
                console.print(f"{why}; Ctrl-C or SIGTERM stops", markup=False, highlight=False)
                if not failure:
                    _say_other_threads(jc, platform)
                said = why
            time.sleep(poll.next_wait(failed=failure is not None))
            continue
        left_out = _left_out(job.plan, o.dtypes)
        if left_out:  # timed in part it would be reported done: given back whole (no attempt used) instead
            skip.append(job.id)
            reason = f"agent {jc.agent} leaves out {', '.join(left_out)} (--dtype)"
            console.print(
                f"passed over job {job.id} (plan {job.plan.name}): it needs {', '.join(left_out)}, which --dtype leaves out; "
                "left queued for another agent",
                markup=False,
                highlight=False,
            )
            _safe(jc.release, job.id, reason)
            continue
        said, k = "", k + 1
        with _given_back_if_stopped(jc, job):
            # n: this job and those before it, plus the queued jobs this platform could claim next
            # (what the service lists), up to --max-jobs; unknown if the queue cannot be read.
            limit = 1000 if o.max_jobs is None else o.max_jobs - k
            queued = jc.queued_for(platform, limit=limit) if limit > 0 else 0
        n = k + queued if queued is not None else None
        code = max(code, _run_job(agent, jc, job, k, n, skip))
    return code


def _say_other_threads(jc: JobClient, platform: PlatformDescriptor) -> None:
    """Jobs queued for this very CPU at another thread count are another platform's: say which
    --threads would take them, since an idle agent beside them looks broken."""
    for threads, n in sorted(jc.queued_at_other_threads(platform, os.cpu_count()).items()):
        console.print(
            f"[yellow]{n} queued job(s) are for this machine timed with {threads} thread(s); this agent times with "
            f"{platform.threads} (another platform): run an agent with --threads {threads} to take them[/yellow]"
        )


def _claim(
    jc: JobClient, platform: PlatformDescriptor, lease_seconds: int | None, skip: list[int | str]
) -> tuple[Job | None, Exception | None]:
    """The next job (None: none now) or why it could not be claimed. A stop signal during the claim
    waits for its answer, and a job that answer brings is given back at once, not left leased to no one."""
    import httpx

    from gac.agent.jobs import JobError

    job = None
    with _given_back_if_stopped(jc, lambda: job):
        try:
            job = jc.claim(platform, lease_seconds, skip=skip[-1000:])  # the most a claim names (the latest, for a long --follow)
        except (httpx.HTTPError, JobError) as err:
            return None, err
    return job, None


@contextmanager
def _given_back_if_stopped(jc: JobClient, job: Job | Callable[[], Job | None]) -> Iterator[None]:
    """A stop signal inside the block waits for its end (an HTTP call to the service is not cut
    short), then the job is given back before the run stops. The block only reads or claims: a
    second stop does not wait (a claim it cuts leaves that job to its lease)."""
    from gac.agent.interrupt import shielded

    try:
        with shielded(breakable=True):
            yield
    except KeyboardInterrupt:
        held = job() if callable(job) else job
        if held is not None:
            _give_back(jc, held.id)
        raise


def _left_out(plan: SweepPlan, dtypes: list[str] | None) -> list[str]:
    """The dtypes a job's plan needs that --dtype leaves out (none: this agent can time it whole)."""
    from gac.contracts.plans import Dtype

    if not dtypes:
        return []
    allowed = {Dtype(d) for d in dtypes}
    return sorted({d.value for s in plan.sweeps for d in s.dtypes if d not in allowed})


def _run_job(agent: _Agent, jc: JobClient, job: Job, k: int, n: int | None, skip: list[int | str]) -> int:
    """Time one claimed job and deliver its points; complete it, or fail it so that it is queued again. 1 if not all arrived.
    Stopped by Ctrl-C or SIGTERM while timing, it delivers what it measured and gives the job back to the
    queue; stopped while reporting, it reports first. A job an operator asked back (a requeue) joins `skip`."""
    from gac.agent.interrupt import shielded
    from gac.agent.jobs import Heartbeat, ProgressLine, heartbeat_every_s, job_label, job_run_id

    o, p = agent.opts, job.plan
    # A job is timed whole, whatever this platform has stored: it may have been queued to measure those
    # points again. Only what its own earlier attempts stored (one run per job and platform) is left out.
    run_id = job_run_id(jc.server, job.id, agent.session.platform.fingerprint())
    run = run_info(f"job:{job.id}:{p.name}", agent.session.device, run_id)
    line = ProgressLine(job_label(k, n), f"(id {job.id}, plan {p.name})")
    try:
        try:
            with shielded(breakable=True):  # a few HTTP reads before anything is timed; a stop meanwhile gives the job back
                left = _left_of_job(agent, p, run.id)
        except KeyboardInterrupt:
            with shielded():
                _give_back(jc, job.id)
            raise
        if o.quiet or not console.is_terminal:  # no live line: say which job it took, or a long job shows nothing until it ends
            todo = left.plan.n_points() if left.plan is not None else 0
            console.print(f"{line.label}: claimed, {todo} points to time {line.about}", markup=False, highlight=False)
        sinks = _Sinks.open(agent, run)
        if left.plan is None:  # an earlier attempt stored every point and was stopped before it reported
            with shielded():
                sinks.close()  # what of it waits in this spool is sent first
                sinks.report()
                return _report_through_outage(agent, jc, job, sinks, run.id, _at_most_planned(job, left.skipped))

        def stopped(_: StopSignals) -> None:
            sinks.report()
            _give_back(jc, job.id, progress())  # at once, not after its lease, with what was measured delivered first

        # What the queue shows while the job runs, and once it is given back (the point under way is committed by then).
        # At most the plan's points as the service counts them (it refuses more): an agent of another version may count otherwise.
        progress = lambda: _at_most_planned(job, left.skipped + max(line.done, sinks.committed_points))  # noqa: E731
        with Heartbeat(jc, job.id, heartbeat_every_s(o.lease_seconds), o.lease_seconds, progress) as beat:
            # Stop at the next point when the job is no longer this agent's (another may be timing it, or an operator asked
            # for it back), or the service no longer takes its token (nothing it times could complete the job).
            sinks.lost = lambda: beat.lost or sinks.token_refused()
            try:
                # No step check here: a job is fleet work, and a stop during the check would give back a job already done.
                result = run_keeping(agent.session, left.plan, sinks, o.adaptive, o.quiet, line=line, on_stop=stopped, stored=left.known)
            except LeaseLost as lost:
                with shielded():
                    sinks.close()  # what it measured is delivered all the same
                    sinks.report()
                    return _say_lease_lost(jc, line, job, str(lost), sinks, progress(), skip)
            with shielded():  # from here a stop waits until the job is reported (done, failed or lost)
                if o.quiet:  # no live line: its final state, once
                    console.print(line.line(len(result.outcomes), len(result.outcomes)), markup=False, highlight=False)
                out_console.print(_summary_table(result, left.plan))
                sinks.report()
                # Asked back with its last point timed, the job is still this agent's: it is reported done.
                if beat.lost and (beat.revoked or sinks.token_refused() or not _still_ours(jc, job)):
                    return _say_lease_lost(jc, line, job, beat.lost, sinks, progress(), skip)
                points = _at_most_planned(job, left.skipped + len(result.measurements))
                return _report_through_outage(agent, jc, job, sinks, run.id, points, failures_note(result, agent.session))
    except typer.Exit:
        raise
    except Exception as err:  # report the job as failed, then stop
        _safe(jc.fail, job.id, f"{type(err).__name__}: {err}")
        raise


def _at_most_planned(job: Job, points: int) -> int:
    return points if job.points is None else min(points, job.points)


def _left_of_job(agent: _Agent, plan: SweepPlan, run: uuid.UUID) -> Remaining:
    """The job's plan without the points its earlier attempts stored (in the service or this spool)."""
    from gac.agent.resume import known_in_run, known_in_spool, merge

    o = agent.opts
    assert o.server is not None and o.token is not None
    stored = known_in_run(agent.client, o.server, o.token, run)
    if stored is None:
        console.print(f"[yellow]cannot ask {escape(o.server)} what this job's earlier attempts stored: timing it whole[/yellow]")
    spooled = known_in_spool(agent.spool, o.server, agent.session.platform.fingerprint(), run)
    return left_to_time(plan, merge(stored or {}, spooled), o.adaptive, "this job's earlier attempts stored")


def _undelivered(agent: _Agent, sinks: _Sinks, run: uuid.UUID) -> str | None:
    """What of the job the service does not have: this attempt's rows not delivered, or an earlier attempt's
    still waiting in this spool (the drain on close could not send them); None when it has everything."""
    assert agent.opts.server is not None
    # The spool says what waits (another agent on this machine may have sent what this one spooled), the stats what was refused.
    return sinks.rejected() or job_waiting_in_spool(agent.spool, agent.opts.server, agent.session.platform.fingerprint(), run)


def job_waiting_in_spool(spool: Spool, server: str, fingerprint: str, run: uuid.UUID) -> str | None:
    """'3 points of this job wait in the spool' for a job's run, or None when none do."""
    from gac.agent.resume import known_in_spool

    waiting = sum(len(x) for x in known_in_spool(spool, server, fingerprint, run).values())
    return f"{waiting} points of this job wait in the spool" if waiting else None


def _still_ours(jc: JobClient, job: Job) -> bool:
    """Whether the job is still leased to this agent (an operator asked for it back, and its lease holds)."""
    try:
        now = jc.job(job.id)
    except Exception:  # noqa: BLE001 - unknown: the refused beat is taken at its word
        return False
    return now.get("status") == "leased" and now.get("lease_owner") == jc.agent


def _say_lease_lost(jc: JobClient, line: ProgressLine, job: Job, why: str, sinks: _Sinks, points: int, skip: list[int | str]) -> int:
    """The job stopped being this agent's while it ran: say why and what became of it; exit code 1.

    A refused token reports nothing more (the job stays leased until its lease ends). Otherwise the job is given
    back if the lease is still this agent's (an operator asked for it: a requeue; this agent claims it no more,
    or a stuck agent would take it straight back), else neither completed nor failed: another agent may hold it now."""
    if refused := sinks.token_refused():
        console.print(
            f"[yellow]{line.label} (id {job.id}): stopped, the service no longer takes this agent's token ({escape(refused)}). "
            f"The job stays leased to this agent until its lease runs out; `gac jobs requeue {job.id}` with an admin token "
            "frees it within 90 s. What was measured waits in the spool: `gac agent flush` with an ingest token sends it[/yellow]"
        )
    elif _give_back(jc, job.id, points, asked=True):
        skip.append(job.id)
        console.print(
            f"[yellow]{line.label} (id {job.id}): an operator requeued it ({escape(why)}): stopped and gave it back "
            f"({points} of its points measured), with what it measured delivered as said above; left to other agents[/yellow]"
        )
    else:
        console.print(
            f"[yellow]{line.label} (id {job.id}): its lease was lost while it ran ({escape(why)}); what it measured is "
            "delivered where the service took it (as said above), the job is left to whoever holds it now[/yellow]"
        )
    return 1


def _report_through_outage(
    agent: _Agent, jc: JobClient, job: Job, sinks: _Sinks, run: uuid.UUID, points: int, failures: str | None = None
) -> int:
    """Report the job (_report_job). A following agent that cannot reach the service waits for it, up to
    the job's lease, sends what the spool holds, and reports then: else the job would stay leased to an
    agent that is alive and idle. A stop signal ends the wait; the lease's end gives the job to another."""
    from gac.agent.delivery import BatchSender, DeliveryStats, RetryPolicy
    from gac.agent.interrupt import stop_pending
    from gac.agent.jobs import Poll, retryable

    o = agent.opts
    assert o.server is not None and o.token is not None
    poll = Poll(o.poll_s) if o.follow else None
    until = time.monotonic() + (o.lease_seconds or 600)
    waited = False
    while True:
        missing = _undelivered(agent, sinks, run)
        try:
            return _report_job(jc, job, missing, points, str(run), failures, quiet=True)
        except Exception as err:  # noqa: BLE001 - a failed report is said, never raised: the lease's end is the fallback
            status = getattr(err, "status", None)
            if waited and status == 409 and (took := _report_took(jc, job, failed=bool(missing))) is not None:
                return took  # an earlier try was stored, its answer lost on the way back
            if not retryable(err):  # refused (the lease lost, the job cancelled): asking again changes nothing
                console.print(f"[yellow]could not report job {job.id}: {escape(str(err))}[/yellow]")
                return 1
            if poll is None or time.monotonic() > until or stop_pending():
                console.print(
                    f"[yellow]could not report job {job.id} ({escape(str(err))}): it stays leased to this agent until its "
                    "lease ends, then the queue gives it to another, which skips what the service stored[/yellow]"
                )
                return 1
        if not waited:
            console.print(
                f"the service cannot be reached to report job {job.id}: waiting for it (up to the job's lease, "
                f"{o.lease_seconds or 600} s; Ctrl-C or SIGTERM stops), then sending the spool first",
                markup=False,
                highlight=False,
            )
            waited = True
        while True:  # until the service takes the spool: only then is the job's report true
            end = time.monotonic() + poll.next_wait(failed=True)
            while time.monotonic() < end and not stop_pending():
                time.sleep(0.2)
            if time.monotonic() > until or stop_pending():
                break  # the report above says why it ends here
            # Counted in the job's own delivery stats: what they say is still waiting is what the report reads.
            stats = sinks.deliverer.stats if sinks.deliverer is not None else DeliveryStats()
            errors, drained = len(stats.errors), stats.drained_batches
            try:
                with BatchSender(o.server, o.token, RetryPolicy(0)) as sender:
                    agent.spool.drain(sender.send_document, sender.server, stats)
            except Exception as err:  # noqa: BLE001 - an answer that is no receipt (a proxy's page): not drained, wait on
                stats.errors.append(str(err))
            if stats.drained_batches > drained:
                console.print(_delivery_line(stats))
            if len(stats.errors) == errors:
                break


def _report_took(jc: JobClient, job: Job, failed: bool) -> int | None:
    """After a 409 to a report tried again: whether an earlier try was stored (its answer lost): the exit code it
    stands for (0 done by this agent, 1 failed back to the queue), else None."""
    try:
        now = jc.job(job.id)
    except Exception:  # noqa: BLE001 - unknown: the 409 is said as it is
        return None
    if not failed and now.get("status") == "done" and now.get("lease_owner") == jc.agent:
        return 0
    if failed and now.get("status") in ("queued", "failed") and now.get("lease_owner") != jc.agent:
        return 1
    return None


def _report_job(
    jc: JobClient, job: Job, missing: str | None, points: int, run_id: str, failures: str | None = None, quiet: bool = False
) -> int:
    """Complete the job, or fail it (queued again) when rows did not reach the service; the exit code: 1 unless completed.
    `failures`: the points that could not be timed, kept with the done job (timing it again here would fail them again)."""
    report = (lambda: jc.fail(job.id, missing)) if missing else (lambda: jc.complete(job.id, points, run_id, failures))
    if quiet:  # the caller says what it could not report
        report()
    else:
        _safe(report)
    return 1 if missing else 0


def _give_back(jc: JobClient, job_id: int | str, points: int | None = None, asked: bool = False) -> bool:
    """Release the lease: the job is queued again without using up an attempt, showing `points` (the job's points
    measured so far) done. A service without /release has it failed instead (queued again while attempts remain).
    True when the service took it back. asked: an operator asked for it (a requeue), not a stop signal; a refusal
    (the lease is not this agent's any more) is then not said."""
    from gac.agent.interrupt import received_name
    from gac.agent.jobs import JobError

    reason = None if asked else f"interrupted by {received_name()} on agent {_agent_name()}"
    try:
        jc.release(job_id, reason, points)
        return True
    except JobError as err:
        if err.status not in (404, 405):
            if not asked:
                console.print(f"[yellow]{escape(str(err))}[/yellow]")
            return False
        _safe(jc.fail, job_id, reason or "given back")
        return True
    except Exception as err:  # noqa: BLE001 - best effort: the lease expiry is the fallback
        console.print(
            f"[yellow]could not give job {job_id} back ({escape(str(err))}): it stays leased to this agent until its lease "
            "ends, then the queue gives it to another (`gac jobs requeue` with an admin token takes it back sooner)[/yellow]"
        )
        return False


def _safe(fn: Callable[..., object], *args: object) -> None:
    try:
        fn(*args)
    except Exception as err:  # noqa: BLE001 - best effort: the lease expiry is the fallback
        console.print(f"[yellow]{escape(str(err))}[/yellow]")


# ---------------------------------------------------------------- the commands


def agent_run(
    server: ServerOpt = None,
    token: TokenOpt = None,
    plan: PlanOpt = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    jobs: Annotated[bool, typer.Option("--jobs", help="Also claim and run jobs from the service's queue")] = False,
    out: Annotated[Path | None, typer.Option("--out", help="Also append result batches to this JSONL file")] = None,
    threads: ThreadsOpt = None,
    spool_dir: SpoolOpt = None,
    spool: Annotated[
        bool,
        typer.Option(
            "--spool",
            help="Profile even if --server cannot be reached now: results wait in the spool (`gac agent flush` sends them)",
        ),
    ] = False,
    adaptive: Annotated[bool, typer.Option("--adaptive/--exhaustive", help="Refine adaptive sweeps only around steps")] = True,
    max_jobs: Annotated[int | None, typer.Option("--max-jobs", min=1, help="Stop after this many jobs (default: no limit)")] = None,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            help="with --jobs: when the queue is empty, wait for more jobs instead of stopping, and wait for a service that "
            "cannot be reached (at start too: an agent may boot before its service); Ctrl-C or SIGTERM stops it",
        ),
    ] = False,
    poll_s: Annotated[float, typer.Option("--poll-s", min=0.1, help="with --follow: seconds between claims while idle")] = 5.0,
    lease_seconds: Annotated[
        int,
        typer.Option(
            "--lease-seconds",
            min=10,
            help="with --jobs: how long a claimed job stays this agent's without a heartbeat (it beats every third of it, "
            "at most every 30 s); a killed agent's job returns to the queue after it",
        ),
    ] = 600,
    batch_size: Annotated[
        int,
        typer.Option(
            "--batch-size",
            min=1,
            max=5000,
            help="rows per upload; the service takes up to GAC_MAX_BATCH_ROWS (5,000 unless set lower)",
        ),
    ] = 1000,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar")] = False,
    retries: RetriesOpt = 4,
) -> None:
    """Time a plan (and/or queued jobs) and deliver the results."""
    server, token = client_settings(server, token)
    opts = AgentRunOptions(
        server=server,
        token=token,
        plan=plan,
        device=device,
        dtypes=dtype,
        jobs=jobs,
        out=out,
        threads=threads,
        spool_dir=spool_dir,
        spool=spool,
        adaptive=adaptive,
        max_jobs=max_jobs,
        follow=follow,
        poll_s=poll_s,
        lease_seconds=lease_seconds,
        batch_size=batch_size,
        quiet=quiet,
        retries=retries,
    )
    error = opts.usage_error()
    if error is not None:
        console.print(f"[red]{escape(error)}[/red]")
        raise typer.Exit(2)
    raise typer.Exit(run_agent(opts))


def agent_flush(
    server: ServerOpt = None,
    token: TokenOpt = None,
    spool_dir: SpoolOpt = None,
    all_servers: Annotated[
        bool,
        typer.Option(
            "--all-servers",
            help="Send every spooled batch to --server, whatever server it was meant for",
        ),
    ] = False,
    retries: RetriesOpt = 4,
) -> None:
    """Send the batches a previous run could not deliver."""
    from gac.agent.delivery import BatchSender, DeliveryStats, RetryPolicy, Spool
    from gac.agent.delivery.spool import norm_server

    server, token = client_settings(server, token)
    spool = Spool(spool_dir)
    records = spool.records()
    if not records:
        console.print(f"spool {spool.path} is empty")
        raise typer.Exit(0)
    if server is None or not token:
        servers = sorted({r.get("server", "?") for r in records})
        console.print(f"[red]{len(records)} spooled batch(es) for {escape(str(servers))}: give --server and --token[/red]")
        raise typer.Exit(2)
    stats = DeliveryStats()
    with _stopped_between_sends(f"{spool.path} keeps what was not sent: `gac agent flush` again sends it"):
        with BatchSender(server, token, RetryPolicy(retries)) as sender:
            spool.drain(sender.send_document, sender.server, stats, all_servers=all_servers)
    left = spool.records()
    console.print(_delivery_line(stats).replace("sent", "flushed", 1) + f"; {len(left)} batch(es) left in {spool.path}")
    for e in stats.errors[:5]:
        console.print(f"[yellow]{escape(str(e))}[/yellow]")
    elsewhere: dict[str, int] = {}  # batches spooled for another service: not sent here unless asked
    for rec in left if not all_servers else ():
        if (meant := norm_server(rec.get("server", ""))) != norm_server(server):
            elsewhere[meant] = elsewhere.get(meant, 0) + 1
    for meant, n in sorted(elsewhere.items()):
        console.print(
            f"[yellow]{n} batch(es) are for {escape(meant)}, not {escape(norm_server(server))}: `gac agent flush --server {escape(meant)}` "
            "sends them there, --all-servers sends them here[/yellow]",
            highlight=False,
        )
    if stats.rejected_batches:
        console.print(
            f"rejected batches are kept in {spool.rejected_path}: once the cause is fixed, "
            f"`gac ingest {spool.rejected_path} --server {server}` sends them",
            markup=False,
            highlight=False,
        )
    raise typer.Exit(0 if not left and not stats.rejected_batches else 1)


@contextmanager
def _stopped_between_sends(rest: str) -> Iterator[None]:
    """Ctrl-C or SIGTERM ends an upload once the batch under way is answered (never inside a call to the
    service: StopSafeClient), says `rest` (what happens to what was not sent) and exits 130 or 143."""
    from gac.agent.interrupt import stop_signals

    with stop_signals() as stop:
        try:
            yield
        except KeyboardInterrupt:
            console.print(f"interrupted by {stop.name}: {rest}", style="yellow", markup=False, highlight=False)
            raise typer.Exit(stop.exit_code) from None


def agent_platform(device: DeviceOpt = None, threads: ThreadsOpt = None) -> None:
    """Print the detected platform and its fingerprint (JSON); its fast dtype and why on stderr."""
    import json

    from gac.agent.dtypes import choose_dtype

    session = open_session(device, threads, timing=False)
    doc = session.platform.model_dump(mode="json", exclude_none=True)
    doc["fingerprint"] = session.platform.fingerprint()
    out_console.print_json(json.dumps(doc))
    console.print(choose_dtype(session.platform)[1], markup=False, highlight=False, soft_wrap=True)


def agent_selftest(
    device: DeviceOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON on stdout instead of a table")] = False,
) -> None:
    """Check this machine before it joins a fleet: device, CUDA stack, clocks, timer agreement, small-kernel repeatability,
    L2 flush, SDPA backends.

    Exits 1 when a check fails (each failure says what to do), 2 for an unsupported --device."""
    selftest(device, as_json)


def ingest(
    file: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, help="results.jsonl written by `gac agent run --out`, or a CSV of measurements")
    ],
    platform_file: Annotated[
        Path | None,
        typer.Option(
            "--platform-file",
            exists=True,
            dir_okay=False,
            help="a CSV's platform: the JSON `gac agent platform` printed on the machine that timed it",
        ),
    ] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
    retries: RetriesOpt = 4,
) -> None:
    """Upload a results file (one batch per line), or a CSV of measurements timed on --platform-file's platform
    (a curve downloaded as CSV from another service, another tool's table: `gac align --measurements` reads the
    same); safe to repeat: ingest is idempotent. A CSV's points the service already shows figure for figure are not
    sent (a downloaded curve holds each point's summary, not its rows: sent back, its points would count twice)."""
    from gac.agent.delivery import BatchSender, DeliveryError, DeliveryStats, RejectedError, RetryPolicy

    server, token = client_settings(server, token)
    if server is None or not token:
        console.print("[red]--server and --token (or GAC_SERVER / GAC_TOKEN) are required[/red]")
        raise typer.Exit(2)
    items: Iterable[tuple[str, Batch | None, str | None]]
    if file.suffix.lower() == ".csv":
        items = _csv_items(file, platform_file)
        items, served = _not_served_already(items, server, token) if _is_download(file) else (items, 0)
        if served:
            console.print(
                f"{served} points of the curve download {file} are what {server} shows already, figure for figure (downloaded "
                "from it, or sent before): not sent again, or they would count twice",
                markup=False,
                highlight=False,
            )
            if not items:  # every point is there: nothing to send
                raise typer.Exit(0)
    else:
        items = _results_items(file, platform_file)
    stats, bad, batches = DeliveryStats(), 0, 0
    stop_note = "ingest is idempotent: the same command again sends the rest"
    with _stopped_between_sends(stop_note), BatchSender(server, token, RetryPolicy(retries)) as sender:
        for where, batch, error in items:
            batches += batch is not None
            if batch is None:
                bad += 1
                if bad <= SHOWN_BAD_LINES:  # a file of bad lines says so in a few, not one per line
                    console.print(f"{file}: {error}", style="red", markup=False, highlight=False)
                continue
            try:
                stats.merge_receipt(sender.send_document(batch.model_dump(mode="json", by_alias=True)))
            except RejectedError as err:
                bad += 1
                if err.status in (401, 403):  # the token, not the line: every later line would be refused too
                    console.print(f"[red]{where}: {escape(str(err))}; stopping: check --token / GAC_TOKEN (an ingest token)[/red]")
                    break
                if bad <= SHOWN_BAD_LINES:
                    console.print(f"[red]{where}: batch {batch.id} rejected: {escape(str(err))}[/red]")
            except DeliveryError as err:
                console.print(f"[red]{where}: {escape(str(err))}; stopping (re-run the command later: it is idempotent)[/red]")
                bad += 1
                break
    if bad > SHOWN_BAD_LINES:
        console.print(f"{file}: ... and {bad - SHOWN_BAD_LINES} more bad line(s)", style="red", markup=False, highlight=False)
    if bad and not batches:  # not one line was a batch: the wrong file, not a few bad lines
        said = (
            f"{file}: none of its lines is a batch this gac reads (above): not a results file "
            "(`gac agent run --out` writes one), or one of another version"
        )
        console.print(said, style="red", markup=False)
        raise typer.Exit(2)
    if not batches and not bad:  # a run stopped before its first batch leaves an empty file: true, but worth saying
        console.print(f"{file} holds no batches: nothing sent", markup=False, highlight=False)
        raise typer.Exit(0)
    console.print(_delivery_line(stats))
    raise typer.Exit(1 if bad else 0)


def _results_items(file: Path, platform_file: Path | None) -> Iterator[tuple[str, Batch | None, str | None]]:
    """A results file's batches, as (where, batch or None, why not)."""
    from gac.agent.delivery import read_batch_file
    from gac.agent.delivery.files import NotAResultsFile, check_results_file

    if platform_file is not None:
        console.print("[red]--platform-file is for a CSV: a results file names its platform in every batch[/red]")
        raise typer.Exit(2)
    try:
        check_results_file(file)
    except (NotAResultsFile, OSError) as err:
        said = str(err) if isinstance(err, NotAResultsFile) else f"cannot read {file}: {err.strerror}"
        console.print(said, style="red", markup=False, highlight=False)
        raise typer.Exit(2) from err
    return ((f"line {lineno}", batch, error) for lineno, batch, error in read_batch_file(file))


def _csv_items(file: Path, platform_file: Path | None) -> list[tuple[str, Batch | None, str | None]]:
    """A CSV's rows as batches, every row read (and checked) before any is sent."""
    from gac.agent.delivery.csv_rows import CsvError, csv_batches, platform_from_file

    if platform_file is None:
        console.print(
            f"[red]{escape(str(file))}: a CSV does not describe its platform (a `platform` column holds at most its "
            "fingerprint): give --platform-file, the JSON `gac agent platform` printed on the machine that timed it[/red]"
        )
        raise typer.Exit(2)
    try:
        batches = list(csv_batches(file, platform_from_file(platform_file)))
    except (CsvError, OSError, UnicodeDecodeError) as err:
        console.print(str(err), style="red", markup=False, highlight=False)
        raise typer.Exit(2) from err
    return [(f"batch {k} of {len(batches)}", b, None) for k, b in enumerate(batches, 1)]


def _is_download(file: Path) -> bool:
    """A curve downloaded from a service (its `measurements` column): each row a point's summary, not a measurement."""
    import csv

    with file.open(newline="", encoding="utf-8") as fh:
        return "measurements" in (csv.DictReader(fh).fieldnames or ())


def _not_served_already(
    items: list[tuple[str, Batch | None, str | None]], server: str, token: str
) -> tuple[list[tuple[str, Batch | None, str | None]], int]:
    """A curve download's batches less the rows whose point the service already shows with every one of their figures,
    and how many those were: a download holds each point's summary, not its rows, so sent back to the service it came
    from every point would count twice. (A table's rows are measurements: their ids keep a re-sent one once.)"""
    from gac.agent.delivery.csv_rows import batch_id
    from gac.client import Client, GacApiError, GacClientError
    from gac.contracts.measurements import shape_key

    shown: dict[tuple[str, str, str, str], dict[int, tuple]] = {}  # per curve: x -> the figures the service shows
    asking = True  # until a refusal or an unanswered request: the sends say why; each would wait its timeout

    def figures_shown(client: Client, platform: str, m: Measurement) -> dict[int, tuple]:
        nonlocal asking
        key = (m.op.value, m.dtype.value, m.sweep_axis, shape_key(m.shape, without=m.sweep_axis))
        if key not in shown:
            shown[key] = {}  # none there (404), or not asked: every row is sent
            try:
                if asking:
                    curve = client.curve(platform, *key[:2], key[3], m.sweep_axis)
                    shown[key] = {p.x: (p.median_us, p.p10_us, p.p90_us, p.mean_us, p.n) for p in curve.points}
            except GacApiError as err:
                asking = err.status == 404
            except GacClientError:
                asking = False
        return shown[key]

    out: list[tuple[str, Batch | None, str | None]] = []
    served = 0
    with Client(server, token) as client:
        for where, batch, error in items:
            if batch is None:
                out.append((where, batch, error))
                continue
            fp = batch.platform.fingerprint()
            keep = [
                m
                for m in batch.measurements
                if figures_shown(client, fp, m).get(m.shape[m.sweep_axis]) != (m.median_us, m.p10_us, m.p90_us, m.mean_us, m.n)
            ]
            served += len(batch.measurements) - len(keep)
            if len(keep) == len(batch.measurements):
                out.append((where, batch, None))
            elif keep:  # fewer rows are another batch: the same id with other content would be refused
                out.append((where, batch.model_copy(update={"id": batch_id(batch.run.id, keep), "measurements": keep}), None))
    return out, served


SHOWN_BAD_LINES = 3  # gac ingest: bad lines shown one by one; the rest are counted


def register(app: typer.Typer) -> None:
    """Add the agent's commands to the `gac` application."""
    agent = typer.Typer(no_args_is_help=True, help="The profiler agent: time kernels on this machine and deliver the results.")
    app.add_typer(agent, name="agent")
    agent.command("run")(agent_run)
    agent.command("flush")(agent_flush)
    agent.command("platform")(agent_platform)
    agent.command("selftest")(agent_selftest)
    app.command("ingest")(ingest)


_STATUS_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


def selftest(device: str | None, as_json: bool = False) -> None:
    """`gac agent selftest`: run every check, print a table (or JSON), exit 1 if any failed."""
    import json

    from gac.agent.platform import parse_device
    from gac.agent.selftest import exit_code, run_selftest

    try:
        dev = parse_device(device_setting(device))
    except (RuntimeError, ValueError) as err:  # torch refuses an unknown type; parse_device one the agent does not time on
        console.print(f"[red]device error:[/red] {escape(str(err))}")
        raise typer.Exit(2) from err
    with console.status("selftest") as status:
        results = run_selftest(dev, on_check=lambda name: status.update(f"selftest: {name}"))
    code = exit_code(results)
    if as_json:
        doc = {
            "device": str(dev),
            "ok": code == 0,
            "failed": [r.name for r in results if r.status == "fail"],
            "checks": [r.to_json() for r in results],
        }
        typer.echo(json.dumps(doc, indent=2))  # plain: a console would wrap long strings
    else:
        t = Table(title=f"gac agent selftest --device {dev}")
        t.add_column("check", no_wrap=True)
        t.add_column("result", no_wrap=True)
        t.add_column("detail", overflow="fold")
        for r in results:
            # a detail may quote an error: text, not markup
            t.add_row(escape(r.name), f"[{_STATUS_STYLE[r.status]}]{r.status}[/]", escape(r.detail))
        out_console.print(t)
    for r in results:
        if r.status in ("warn", "fail") and r.fix:
            style = _STATUS_STYLE[r.status]
            console.print(f"[{style}]{r.status}[/] {escape(r.name)}: {escape(r.fix)}", highlight=False)
    counts = {s: sum(r.status == s for r in results) for s in ("ok", "warn", "fail", "skip")}
    tally = f"{counts['ok']} ok, {counts['warn']} warn, {counts['fail']} fail, {counts['skip']} skipped"
    if code:
        failed = ", ".join(r.name for r in results if r.status == "fail")
        console.print(
            f"[bold red]selftest FAILED on {dev} ({tally}): {failed}[/]; fix the above before this box joins the fleet", highlight=False
        )
    else:
        console.print(f"[green]selftest passed on {dev}[/] ({tally})", highlight=False)
    raise typer.Exit(code)


__all__ = ["AgentRunOptions", "register", "run_agent"]
