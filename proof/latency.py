"""Latency of whole models in interleaved, paired rounds.

Each round times every (variant, setting) pair once, in a fresh random order, so
drift of a shared machine hits all variants alike and a round's ratio of two
variants compares them under the same machine state. One measurement is the
median of a few passes after one warm-up call. Speed-ups are the median of
per-round ratios with a bootstrap CI (gac.proof.stats).

How one pass is clocked depends on the device the models are on (pass_clock):
- CPU: perf_counter around the call, on the intra-op thread count asked for; a pass
  during which the timing thread was off the CPU for over 10 % of the wall time
  (preempted) is dropped when running single-threaded, unless that would leave fewer
  than half of the passes.
- CUDA: CUDA events recorded on the current stream before and after the call, read
  after a torch.cuda.synchronize that follows the pass: the GPU's time from the start
  event to the end event, gaps waiting for the host's launches included (what eager
  execution costs). No thread count and no preemption filter apply there.

- CUDA graphs (graphs=True, on CUDA only): each (variant, setting) call is captured once in a
  CUDA graph and every pass replays it, with the same events around the replay. That is how
  serving engines run decode: the host's kernel-by-kernel launches leave the measurement, which
  then holds the GPU's work and the one launch of the graph (the GPU reaches the start event
  before the graph's launch is done), as a serving step that waits for its token pays it too
  (what the launch adds: docs/results/2026-11-27-h100-in-place.md). Eager timing of a small model or a decode step measures the
  launches instead (a host-bound GPU idles between kernels, and kernel savings do not show).
  A call that cannot be captured is timed eagerly, and the run says which.

Optionally, once per round and setting, one more call of each compressed variant runs with a
clock around the modules that hold the compressed weights: how long those modules take in
place, which the prediction sets against the profile. Eager: forward hooks (removed again),
on CUDA an event pair per module call. With graphs: the modules' calls, on the inputs they
received inside the model, captured in one graph of their own and replayed between two
events, so their launches stay out of it as they do from the model's graph.
"""

from __future__ import annotations

import contextlib
import copy
import random
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from gac.proof.stats import Speedup, paired_speedup

DECODE_PASS_FACTOR = 4  # a decode step is ~1/10 of a prefill: take more of them per round
MIN_ON_CPU = 0.9


@dataclass(frozen=True)
class Setting:
    """One timed workload at batch 1: a prefill of `tokens` tokens, or one decode step after `tokens` cached ones."""

    kind: str  # "prefill" | "decode"
    tokens: int

    @property
    def label(self) -> str:
        return f"S={self.tokens}" if self.kind == "prefill" else f"decode@{self.tokens}"

    @property
    def gemm_m(self) -> int:
        """The row count M of every projection GEMM in this setting (batch 1)."""
        return self.tokens if self.kind == "prefill" else 1

    @property
    def unit(self) -> str:
        return "ms" if self.kind == "prefill" else "ms/tok"


def settings_for(seqs: Sequence[int], decode_context: int | None) -> list[Setting]:
    out = [Setting("prefill", s) for s in seqs]
    if decode_context:
        out.append(Setting("decode", decode_context))
    return out


@dataclass
class Stat:
    median: float
    lo: float  # min over rounds
    hi: float  # max over rounds
    n: int

    @property
    def spread(self) -> float:
        """(max - min) / median over rounds."""
        return (self.hi - self.lo) / self.median if self.median > 0 else float("inf")

    @classmethod
    def of(cls, values: Sequence[float]) -> Stat:
        return cls(statistics.median(values), min(values), max(values), len(values))


@dataclass
class LatencyRun:
    settings: list[Setting]
    rounds: int
    passes: int
    threads: int | None  # the CPU's intra-op threads; None on CUDA
    seed: int = 0
    device: str = "cpu"
    # (variant, setting label) -> one median per round, in µs (index r = round r)
    medians: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    # (variant, setting label) -> passes dropped as preempted, per round
    preempted: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    # (variant, setting label) -> that variant's compressed modules, µs summed over one call, per round
    modules: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    in_place_variant: str | None = None  # whose modules the prediction reads (the baseline)
    graphs: bool = False  # passes replayed from CUDA graphs
    instances: int = 1  # builds of every model, round r timing build r mod instances (time_rounds)
    eager: dict[tuple[str, str], str] = field(default_factory=dict)  # (variant, label) timed eagerly in a graph run: why

    @property
    def in_place(self) -> dict[str, list[float]]:
        """setting label -> the baseline's compressed modules in place, µs per round."""
        v = self.in_place_variant
        return {label: us for (name, label), us in self.modules.items() if name == v}

    def in_place_us(self, label: str, variant: str | None = None) -> float | None:
        """Median over rounds of a variant's compressed modules in place (default: the baseline's; None: not clocked)."""
        got = self.modules.get((variant or self.in_place_variant or "", label))
        return statistics.median(got) if got else None

    @property
    def labels(self) -> list[str]:
        return [s.label for s in self.settings]

    def stat(self, variant: str, label: str) -> Stat:
        return Stat.of(self.medians[(variant, label)])

    def speedup(self, variant: str, baseline: str, label: str) -> Speedup:
        """baseline / variant, paired by round: median ratio and its bootstrap 95 % CI."""
        return paired_speedup(self.medians[(baseline, label)], self.medians[(variant, label)], seed=self.seed)


Device = torch.device | str
# One timed pass: (µs the call took, µs the calling thread was on the CPU meanwhile; None where that is not read).
PassClock = Callable[[Callable[[], object]], tuple[float, float | None]]


def is_cuda(device: Device) -> bool:
    return torch.device(device).type == "cuda"


def cpu_pass(fn: Callable[[], object]) -> tuple[float, float | None]:
    """perf_counter around one call (the CPU runs it synchronously), and the thread's CPU time."""
    c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
    fn()
    wall = time.perf_counter_ns() - t0
    return wall / 1e3, (time.thread_time_ns() - c0) / 1e3


def cuda_pass(fn: Callable[[], object]) -> tuple[float, float | None]:
    """CUDA events around one call on the current stream; read after synchronizing, once the pass is done."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3, None  # elapsed_time is in ms


def pass_clock(device: Device) -> PassClock:
    """How a pass on this device is clocked: CUDA events on a CUDA device, perf_counter elsewhere."""
    return cuda_pass if is_cuda(device) else cpu_pass


def synchronize(device: Device) -> None:
    """Wait for the device's queued work (a no-op on the CPU, which runs the calls synchronously)."""
    if is_cuda(device):
        torch.cuda.synchronize(device)


def on_device(device: Device) -> contextlib.AbstractContextManager[Any]:
    """Make `device` the current CUDA device (its current stream is where the events are recorded)."""
    return torch.cuda.device(torch.device(device)) if is_cuda(device) else contextlib.nullcontext()


def median_of_passes(fn: Callable[[], object], passes: int, filter_preempted: bool, device: Device = "cpu") -> tuple[float, int]:
    """(median µs over the passes after one warm-up call, passes dropped as preempted; always 0 on CUDA)."""
    clock = pass_clock(device)
    fn()  # warm-up: this variant's weights back into cache, oneDNN primitives or cuBLAS heuristics looked up
    synchronize(device)
    walls: list[float] = []
    kept: list[float] = []
    for _ in range(passes):
        us, on_cpu = clock(fn)
        walls.append(us)
        if not filter_preempted or on_cpu is None or on_cpu >= MIN_ON_CPU * us:
            kept.append(us)
    use = kept if 2 * len(kept) >= passes else walls
    return statistics.median(use), passes - len(kept)


class CpuSpans:
    """perf_counter at each module's start and end; the CPU runs its kernels in between."""

    def __init__(self) -> None:
        self.started: dict[int, int] = {}
        self.spent = 0

    def start(self, key: int) -> None:
        self.started[key] = time.perf_counter_ns()

    def stop(self, key: int) -> None:
        self.spent += time.perf_counter_ns() - self.started.pop(key)

    def total_us(self) -> float:
        return self.spent / 1e3


class CudaSpans:
    """A CUDA event recorded at each module's start and end on the current stream; summed after a synchronize."""

    def __init__(self) -> None:
        self.started: dict[int, Any] = {}
        self.spans: list[tuple[Any, Any]] = []

    def start(self, key: int) -> None:
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        self.started[key] = ev

    def stop(self, key: int) -> None:
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        self.spans.append((self.started.pop(key), ev))

    def total_us(self) -> float:
        torch.cuda.synchronize()
        return sum(a.elapsed_time(b) for a, b in self.spans) * 1e3


def module_spans(device: Device) -> CpuSpans | CudaSpans:
    return CudaSpans() if is_cuda(device) else CpuSpans()


def clocked_call(fn: Callable[[], object], modules: Sequence[nn.Module], device: Device = "cpu") -> float:
    """µs spent inside `modules` during one call of fn (forward hooks, removed afterwards).

    Each module is clocked once however often it is listed. On the CPU the clock includes what a
    module call costs besides its kernels (Python dispatch, the hooks, a bias add): a few µs per
    module. On CUDA it is the GPU's time from the module's start event to its end event, which
    includes any wait for the host to launch the module's kernels."""
    modules = list({id(m): m for m in modules}.values())
    spans = module_spans(device)

    def pre(mod: nn.Module, args: object) -> None:
        spans.start(id(mod))

    def post(mod: nn.Module, args: object, out: object) -> None:
        spans.stop(id(mod))

    handles = [h for mod in modules for h in (mod.register_forward_pre_hook(pre), mod.register_forward_hook(post))]
    try:
        fn()
    finally:
        for h in handles:
            h.remove()
    return spans.total_us()


Capture = Callable[[Callable[[], object]], Callable[[], object]]  # a call -> a replay of it


GRAPH_WARMUP = 3  # eager calls on a side stream before a capture (cuBLAS and allocator set-up stay out of it)


class GraphReplay:
    """A call captured once in a CUDA graph; calling this replays the same kernels on the same buffers,
    with no host launches, and returns the call's output as the replay rewrote it. It holds the call,
    and with it the inputs and caches the graph's kernels read: freed, their memory would be reused
    under the graph. Warmed up on a side stream first, as capture requires."""

    def __init__(self, fn: Callable[[], object]) -> None:
        self.fn = fn
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(GRAPH_WARMUP):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = fn()

    def __call__(self) -> object:
        self.graph.replay()
        return self.out


cuda_graph: Capture = GraphReplay


def module_calls(fn: Callable[[], object], modules: Sequence[nn.Module]) -> Callable[[], object]:
    """The modules' calls during one call of fn, as one call: each module again on the inputs it got there
    (kept from that call), in the order they ran. Timed from a graph, that is the modules' own GPU work."""
    modules = list({id(m): m for m in modules}.values())
    calls: list[tuple[nn.Module, tuple]] = []

    def keep(mod: nn.Module, args: tuple) -> None:
        calls.append((mod, tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)))

    handles = [mod.register_forward_pre_hook(keep) for mod in modules]
    try:
        fn()
    finally:
        for h in handles:
            h.remove()

    def run() -> None:
        with torch.inference_mode():
            for mod, args in calls:
                mod(*args)

    return run


def graph_modules_clock(fn: Callable[[], object], modules: Sequence[nn.Module], capture: Capture = cuda_graph) -> Callable[[], float]:
    """A clock of the modules in place, from a graph: each reading replays their captured calls once between two events."""
    replay = capture(module_calls(fn, modules))

    def read() -> float:
        return cuda_pass(replay)[0]

    return read


def time_rounds(
    models: Mapping[str, nn.Module],
    settings: Sequence[Setting],
    make_fn: Callable[[nn.Module, Setting], Callable[[], object]],
    rounds: int = 25,
    passes: int = 5,
    threads: int = 1,
    dtype: torch.dtype | None = None,
    seed: int = 0,
    on_round: Callable[[int], None] | None = None,
    in_place: tuple[str, Callable[[nn.Module], Sequence[nn.Module]]] | None = None,
    device: Device = "cpu",
    graphs: bool = False,
    clock_also: Sequence[str] = (),
    capture: Capture = cuda_graph,
    clock_original: tuple[str, Callable[[nn.Module], Sequence[nn.Module] | None]] | None = None,
    instances: int = 1,
) -> LatencyRun:
    """Time every model at every setting, interleaved in `rounds` shuffled rounds.

    make_fn(model, setting) returns the zero-argument call to time (inputs and
    caches prepared once, on the model's device). Models are copied to `device` and cast to
    `dtype` (None: kept as they are); callers keep theirs. `threads` applies to the CPU only.
    in_place = (variant, modules_of): each round, the modules modules_of(model) returns are clocked
    in place for that variant (the prediction's baseline) and for each of `clock_also`
    (LatencyRun.modules). clock_original = (variant, modules_of): that variant's own modules clocked
    alike (the uncompressed model's, for the fit the report shows; modules_of returning None: not
    clocked). graphs: on CUDA, replay each call from a CUDA graph (`capture` makes
    the replay; a call it cannot capture is timed eagerly, and LatencyRun.eager says why).
    instances: each model is built (copied) this many times, the builds of all models in a shuffled
    order, and round r times build r mod instances of every model. Where a model's memory lands moves
    its time: one build would carry that into every ratio; several put it into the rounds' spread, and
    so into the intervals.
    """
    cuda = is_cuda(device)
    if not cuda:
        torch.set_num_threads(threads)
    graphs = graphs and cuda
    if not 1 <= instances <= max(1, rounds):
        raise ValueError(f"instances {instances}: at least 1, and at most the rounds ({rounds}), so that each build is timed")
    builds = [(name, i) for i in range(instances) for name in models]
    random.Random(seed + 1).shuffle(builds)  # no model always built first (or last)
    cast = {key: _copy_to(models[key[0]], device, dtype) for key in builds}
    by_label = {s.label: s for s in settings}
    out = LatencyRun(
        settings=list(settings),
        rounds=rounds,
        passes=passes,
        threads=None if cuda else torch.get_num_threads(),
        seed=seed,
        device=str(torch.device(device)),
        graphs=graphs,
        instances=instances,
    )
    rng = random.Random(seed)
    filter_preempted = out.threads == 1  # with more threads the caller may legitimately wait at a barrier
    with on_device(device):
        # (model, setting label, build) -> the call to time
        fns = {(name, s.label, i): make_fn(m, s) for (name, i), m in cast.items() for s in settings}
        selectors: dict[str, Callable[[nn.Module], Sequence[nn.Module] | None]] = {}  # variant -> its modules to clock
        if in_place is not None:
            out.in_place_variant, modules_of = in_place
            selectors = dict.fromkeys([out.in_place_variant, *clock_also], modules_of)
        if clock_original is not None and clock_original[0] in models:
            selectors[clock_original[0]] = clock_original[1]
        clocks: dict[tuple[str, str, int], Callable[[], float]] = {}
        for (name, i), m in cast.items():
            mods = selectors[name](m) if name in selectors else None
            for s in settings if mods else ():
                clocks[(name, s.label, i)] = _module_clock(fns[(name, s.label, i)], mods, device, graphs, capture)
        if graphs:
            fns = {key: _replayable(fn, capture, key, out.eager) for key, fn in fns.items()}
        pairs = [(name, s.label) for name in models for s in settings]
        for r in range(rounds):
            build = r % instances
            order = list(pairs)
            rng.shuffle(order)
            for key in order:
                n = passes * (DECODE_PASS_FACTOR if by_label[key[1]].kind == "decode" else 1)
                med, dropped = median_of_passes(fns[(*key, build)], n, filter_preempted, device)
                out.medians.setdefault(key, []).append(med)
                out.preempted.setdefault(key, []).append(dropped)
            for (name, label, i), read in clocks.items():
                if i == build:
                    out.modules.setdefault((name, label), []).append(read())
            if on_round is not None:
                on_round(r + 1)
    return out


def _module_clock(
    fn: Callable[[], object], modules: Sequence[nn.Module], device: Device, graphs: bool, capture: Capture
) -> Callable[[], float]:
    """How one variant's modules are clocked in place: from a graph of their calls, or hooks around one call."""
    if graphs:
        try:
            return graph_modules_clock(fn, modules, capture)
        except Exception:  # noqa: BLE001 - not capturable: the eager clock (launch gaps included) instead
            pass
    return lambda: clocked_call(fn, modules, device)


def capture_or_eager(fn: Callable[[], object], capture: Capture) -> tuple[Callable[[], object], str | None]:
    """fn's replay from a graph and None; or fn itself and why it could not be captured (e.g. a host
    synchronisation inside the call): it is then timed eagerly, and the caller says so."""
    try:
        return capture(fn), None
    except Exception as exc:  # noqa: BLE001 - any capture failure: timed eagerly instead
        return fn, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def _replayable(
    fn: Callable[[], object], capture: Capture, key: tuple[str, str, int], eager: dict[tuple[str, str], str]
) -> Callable[[], object]:
    """fn's replay from a graph; fn itself (and the reason, in `eager` by model and setting) when it cannot be captured."""
    call, why = capture_or_eager(fn, capture)
    if why is not None:
        eager[key[0], key[1]] = why
    return call


def _copy_to(model: nn.Module, device: Device, dtype: torch.dtype | None) -> nn.Module:
    m = copy.deepcopy(model).to(device)
    return (m.to(dtype) if dtype is not None else m).eval()
