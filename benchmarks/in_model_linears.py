"""Do a model's GEMMs run inside the model as they run in the profile? Every nn.Linear timed in place.

`gac proof` predicts a variant's speed-up from the profiled GEMM curves (each kernel timed alone)
and flags a miss above 0.03. This takes a saved proof run, rebuilds its unaligned model and one
other variant, and in the same shuffled rounds times three things per variant:

- model: a prefill forward (or with --decode, one decode step after the run's KV cache) with a clock
  around every nn.Linear (forward hooks; they add a few us per call, alike for both variants), summed
  over the linears;
- cold: the agent's own GEMM kernel for each linear (m = tokens, n = out_features, k = in_features)
  as the agent times it on a CPU: weights read from a pool beyond the caches
  (gac.agent.timing.WEIGHT_POOL_BYTES), a new copy each call;
- warm: the same kernel reusing one weight tensor, hot in cache (how the agent timed before).

It prints per linear the three medians, then per mode the total over the linears, what the variant
saves, and the paired ratio unaligned / variant with its 95 % bootstrap interval over rounds, beside
the saved run's own profile. The mode whose ratio and saving match the model's is the one whose
predictions hold inside a model.

With --device cuda:N the models are built on that GPU in the saved run's dtype and five things are
timed per variant instead, in the same shuffled rounds:

- inplace: the linears' calls, in model order on the inputs they received inside the model
  (gac.proof.latency.module_calls), captured in one CUDA graph; the median over a few replays (after
  one warm-up replay), each between two CUDA events. What the proof's in-place clock measures;
- alone: each linear's recorded call captured in a graph of its own and timed the same way, summed
  over the linears;
- cold: the agent's GEMM kernel per linear call (m = the rows the linear got in the model) timed by
  gac.agent.timing.CudaTimer, the L2 flushed before each sample (as the profile times it), summed;
- warm: the same with CudaTimer(...).warm(): each sample follows an untimed call, operands in the L2;
- chain: the same with CudaTimer(...).chained(): a sample is 8 calls back to back, each on the next
  copy of its weights from a pool beyond the L2, as the linears run in a decode step (no flush).

and one line says which of cold / warm / chain / alone saves nearest what the linears save in place.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/in_model_linears.py RUN.json [--method asvd] [--variant round-to-8] [--decode]
    python benchmarks/in_model_linears.py RUN.json --device cuda:0 [--method asvd] [--variant V] [--decode] [--max-seconds 60]

(RUN.json: a saved proof run, `gac proof ... --save RUN.json`.)
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import random
import statistics
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

STARTED = time.perf_counter()  # --max-seconds counts from here
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gac.agent.kernels import build_kernel  # noqa: E402
from gac.agent.timing import WEIGHT_POOL_BYTES, Timer  # noqa: E402
from gac.contracts.plans import Timing  # noqa: E402
from gac.proof.latency import Capture, Device, capture_or_eager, cuda_graph, is_cuda, median_of_passes, module_calls, on_device  # noqa: E402
from gac.proof.pipeline import ProofConfig, compress, prepare, with_dtype  # noqa: E402
from gac.proof.retime import load_run  # noqa: E402
from gac.proof.stats import bootstrap_median_ci, paired_speedup  # noqa: E402

MODES = ("model", "cold", "warm")
PASSES = 10  # per linear and round in the kernel modes, after one warm-up call; their median counts
GPU_MODES = ("inplace", "alone", "cold", "warm", "chain")  # the last three: the agent's kernel under each timer
GPU_PASSES = 10  # graph replays per (variant, round) in inplace and per linear in alone, after one warm-up replay
MIN_ROUNDS = 3  # --max-seconds stops no sooner
# The cold and warm kernels' stopping rule per round: the proof's profile timing (gac.proof.profile), fewer samples.
KERNEL_TIMING = Timing(min_samples=10, max_samples=100, target_spread=0.05, median_ci=0.01, time_cap_ms=100.0, warmup_ms=10.0)


def clock_linears(model: torch.nn.Module) -> dict[str, list[float]]:
    """Per nn.Linear (by module name), the microseconds of each call from now on."""
    times: dict[str, list[float]] = defaultdict(list)
    started: dict[str, int] = {}
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear):
            mod.register_forward_pre_hook(lambda m, i, name=name: started.__setitem__(name, time.perf_counter_ns()))
            mod.register_forward_hook(lambda m, i, o, name=name: times[name].append((time.perf_counter_ns() - started[name]) / 1e3))
    return times


@dataclass
class Built:
    """The saved run's unaligned model and the variant, rebuilt on the device in the run's dtype."""

    names: tuple[str, str]  # ("unaligned", the variant)
    models: dict[str, torch.nn.Module]
    timed: Callable[[torch.nn.Module, int, int], Callable[[], object]]  # the subject's prefill or decode
    cfg: ProofConfig
    tokens: int
    setting: str
    why: str
    method: str
    result: dict[str, Any]  # the saved run's result for the method
    make: Callable[[str], torch.nn.Module]  # any variant of the run's method, built on the device in the run's dtype
    dims: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)  # variant -> weight -> dim, as saved
    make_dims: Callable[[dict[str, int]], torch.nn.Module] | None = None  # a model at any dims, built like make's

    def call(self, model: torch.nn.Module, decode: bool) -> Callable[[], object]:
        """The timed call of one variant: a prefill of `tokens`, or one decode step after the run's cache."""
        return self.timed(model, (self.cfg.context or 0) if decode else self.tokens, self.cfg.seed)


@dataclass
class Setup:
    """The two variants' models, ready to time: their linears' shapes, clocks and timed forwards."""

    names: tuple[str, str]  # ("unaligned", the variant)
    linears: dict[str, dict[str, tuple[int, int]]]  # variant -> linear -> (out_features, in_features)
    clocks: dict[str, dict[str, list[float]]]
    forwards: dict[str, Callable[[], object]]
    kernels: dict[tuple[str, tuple[int, int]], Callable[[], object]]  # (mode, (n, k)) -> the agent's GEMM
    tokens: int
    setting: str
    why: str
    method: str
    result: dict[str, Any]  # the saved run's result for the method


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="a saved proof run (gac proof --save FILE)")
    ap.add_argument("--method", default=None, help="asvd | prune | palu (default: the run's first)")
    ap.add_argument("--variant", default="round-to-8", help="compared with unaligned (a variant name of the run)")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--decode", action="store_true", help="one decode step (M = 1) instead of the prefill")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]: build and time the models there")
    ap.add_argument(
        "--max-seconds",
        type=float,
        default=None,
        help=f"on CUDA: start no new round this many seconds after the script started (at least {MIN_ROUNDS} rounds)",
    )
    return ap.parse_args(argv)


def cuda_problem(device: str) -> str | None:
    """Why `device` cannot be used here (None: it can): a bad name, or CUDA absent or without that GPU."""
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        return f"--device {device!r}: {exc}"
    if dev.type not in ("cpu", "cuda"):
        return f"--device {device!r}: use cpu or cuda[:N]"
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            return f"--device {device}: this torch ({torch.__version__}) has no CUDA, or no GPU is visible; the CUDA path needs a GPU"
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            return f"--device {device}: only {torch.cuda.device_count()} GPU(s) visible"
    return None


def build_models(a: argparse.Namespace) -> Built:
    """Rebuild the saved run's unaligned model and the variant on a.device, in the saved run's dtype."""
    saved = load_run(a.run)
    cfg = dataclasses.replace(ProofConfig.from_json(saved["config"]), device=a.device)
    subject = prepare(cfg)
    cfg, why = with_dtype(cfg, by="by the saved run")
    res = next((r for r in saved["results"] if a.method in (None, r["method"])), None)
    if res is None:
        sys.exit(f"no method {a.method!r} in {a.run}: {', '.join(r['method'] for r in saved['results'])}")
    comp = compress(res["method"], dataclasses.replace(cfg, ratio=res["ratio"]), subject)
    dims = {name: {k: int(d) for k, d in v["dims"].items()} for name, v in res["variants"].items()}
    if a.variant not in dims:
        sys.exit(f"no variant {a.variant!r} in {a.run}: {', '.join(dims)}")
    if a.decode and (subject.decode is None or not cfg.context):  # the run's decode context, its model's default if unset
        sys.exit(f"{a.run}: its model has no decode setting")
    tokens = 1 if a.decode else cfg.prefill_seqs[0]
    if not is_cuda(cfg.device):
        torch.set_num_threads(cfg.threads)
    names = ("unaligned", a.variant)

    def make_dims(at: dict[str, int]) -> torch.nn.Module:
        return copy.deepcopy(comp.build(at)).to(cfg.torch_dtype).eval()

    def make(variant: str) -> torch.nn.Module:
        if variant not in dims:
            sys.exit(f"no variant {variant!r} in {a.run}: {', '.join(dims)}")
        return make_dims(dims[variant])

    models = {n: make(n) for n in names}
    return Built(
        names=names,
        models=models,
        timed=subject.decode if a.decode else subject.prefill,
        cfg=cfg,
        tokens=tokens,
        setting=f"decode@{cfg.context} (M = 1)" if a.decode else f"prefill S = {tokens}",
        why=why,
        method=res["method"],
        result=res,
        make=make,
        dims=dims,
        make_dims=make_dims,
    )


def build_setup(a: argparse.Namespace) -> Setup:
    """Rebuild the saved run's unaligned model and the variant, clock their linears, build the kernels."""
    b = build_models(a)
    linears = {
        n: {name: (mod.out_features, mod.in_features) for name, mod in m.named_modules() if isinstance(mod, torch.nn.Linear)}
        for n, m in b.models.items()
    }
    shapes = {nk for per in linears.values() for nk in per.values()}
    dtype = str(b.cfg.torch_dtype).removeprefix("torch.")
    return Setup(
        names=b.names,
        linears=linears,
        clocks={n: clock_linears(m) for n, m in b.models.items()},
        forwards={n: b.call(m, a.decode) for n, m in b.models.items()},
        kernels={
            (mode, nk): build_kernel(
                "gemm", dtype, {"m": b.tokens, "n": nk[0], "k": nk[1]}, weight_pool_bytes=WEIGHT_POOL_BYTES if mode == "cold" else 0
            ).fn
            for mode in ("cold", "warm")
            for nk in shapes
        },
        tokens=b.tokens,
        setting=b.setting,
        why=b.why,
        method=b.method,
        result=b.result,
    )


def time_rounds(s: Setup, rounds: int) -> tuple[dict[tuple[str, str, str], list[float]], dict[tuple[str, str], list[float]]]:
    """Each round times every (mode, variant) once in a shuffled order: per linear, and summed."""
    per_linear: dict[tuple[str, str, str], list[float]] = defaultdict(list)  # (mode, variant, linear) -> us per round
    totals: dict[tuple[str, str], list[float]] = defaultdict(list)  # (mode, variant) -> sum over linears per round
    rng = random.Random(0)
    with torch.inference_mode():
        for fn in [*s.forwards.values(), *s.kernels.values()]:
            fn()
        for _ in range(rounds):
            jobs = [(mode, n) for mode in MODES for n in s.names]
            rng.shuffle(jobs)
            for mode, n in jobs:
                if mode == "model":
                    s.clocks[n].clear()
                    s.forwards[n]()
                    took = {name: sum(v) for name, v in s.clocks[n].items()}
                else:
                    took = {
                        name: median_of_passes(s.kernels[mode, nk], PASSES, filter_preempted=False)[0] for name, nk in s.linears[n].items()
                    }
                for name, us in took.items():
                    per_linear[mode, n, name].append(us)
                totals[mode, n].append(sum(took.values()))
    return per_linear, totals


def print_linears(s: Setup, per_linear: dict[tuple[str, str, str], list[float]], rounds: int) -> None:
    u, v = s.names
    print(f"{s.method}, {v} against unaligned, {s.setting}, {s.why}; us, median over {rounds} rounds")
    print(f"  {'linear':32s} {'unaligned':>10s} -> {v:<10s}  " + "  ".join(f"{m:>15s}" for m in MODES))
    for name in sorted(s.linears[u]):
        cells = "  ".join(
            f"{statistics.median(per_linear[m, u, name]):6.1f} -> {statistics.median(per_linear[m, v, name]):6.1f}" for m in MODES
        )
        shape_u, shape_v = (f"{s.linears[n][name][0]}x{s.linears[n][name][1]}" for n in s.names)
        print(f"  {name:32s} {shape_u:>10s} -> {shape_v:<10s}  {cells}")


def print_totals(
    names: tuple[str, str],
    n_linears: int,
    totals: Mapping[tuple[str, str], list[float]],
    modes: Sequence[str] = MODES,
    ref: str = "model",
    ref_label: str = "the model's",
) -> None:
    u, v = names
    print(f"{n_linears} linears, summed; saves = unaligned - {v} per round, median [95% CI]; ratio = paired unaligned / {v}:")
    for mode in modes:
        base, var = totals[mode, u], totals[mode, v]
        saves = [b - x for b, x in zip(base, var)]
        lo, hi = bootstrap_median_ci(saves)
        sp = paired_speedup(base, var)
        share = statistics.median(base) / statistics.median(totals[ref, u])
        print(
            f"  {mode:{max(5, *map(len, modes))}s}  unaligned {statistics.median(base):7.0f} us ({share:.2f}x {ref_label})  "
            f"saves {statistics.median(saves):+6.0f} us "
            f"[{lo:+.0f} to {hi:+.0f}]  ratio {sp.median:.3f}x [{sp.ci_lo:.3f}-{sp.ci_hi:.3f}]"
        )


def saved_gemm_medians(result: Mapping[str, Any]) -> dict[tuple[int, int, int], float]:
    """The saved run's profile: each GEMM point's median (us) by (m, n, k)."""
    return {(m["shape"]["m"], m["shape"]["n"], m["shape"]["k"]): m["median_us"] for m in result["profile"] if m["op"] == "gemm"}


def print_saved_profile(s: Setup) -> None:
    """The same sums from the saved run's own profile, when it holds every shape."""
    res, (u, v) = s.result, s.names
    profile = saved_gemm_medians(res)
    saved_u = [profile.get((s.tokens, *nk)) for nk in s.linears[u].values()]
    saved_v = [profile.get((s.tokens, *nk)) for nk in s.linears[v].values()]
    if None not in saved_u and None not in saved_v:
        su, sv = sum(saved_u), sum(saved_v)  # type: ignore[arg-type]
        print(
            f"  the saved run's profile ({res['profile'][0]['timer']}): unaligned {su:.0f} us, "
            f"saves {su - sv:+.0f} us, ratio {su / sv:.3f}x"
        )


# --- CUDA: the linears in place (one graph), alone (a graph each), and the agent's kernel cold and warm ---


MNK = tuple[int, int, int]


@dataclass
class GpuSetup:
    """What the CUDA rounds time per variant. The replays hold the recorded calls (and so the inputs and
    memory their graphs read): this setup must stay alive while they are timed."""

    names: tuple[str, str]  # ("unaligned", the variant)
    linears: dict[str, dict[str, tuple[int, int]]]  # variant -> linear -> (out_features, in_features), model order
    rows: dict[str, dict[str, tuple[int, ...]]]  # variant -> linear -> the rows (GEMM m) of each of its calls in the model
    inplace: dict[str, Callable[[], object]]  # variant -> one replay of its linears' calls, in model order
    alone: dict[str, dict[str, Callable[[], object]]]  # variant -> linear -> one replay of that linear's calls
    kernels: dict[str, dict[MNK, Callable[[], object]]]  # timer's mode -> (m, n, k) -> the agent's GEMM, built for that timer
    timers: dict[str, Timer]  # "cold" (L2 flushed before each sample), "warm", "chain"
    device: Device
    notes: list[str]  # what could not be captured and was timed eagerly, linears never called

    def modes(self) -> tuple[str, ...]:
        """What each round times: in place, alone, and the agent's kernels under each timer."""
        return ("inplace", "alone", *self.timers)

    def shapes(self, variant: str) -> list[MNK]:
        """The (m, n, k) of each call of the variant's linears (deduplicated, in model order)."""
        return list(dict.fromkeys((m, *nk) for name, nk in self.linears[variant].items() for m in self.rows[variant][name]))


def linear_modules(model: torch.nn.Module) -> dict[str, torch.nn.Linear]:
    """Every nn.Linear by module name (a low-rank pair is its two nn.Linear, down and up: two GEMMs)."""
    return {name: mod for name, mod in model.named_modules() if isinstance(mod, torch.nn.Linear)}


def gemm_counts(rows: Mapping[str, tuple[int, ...]], modules: Mapping[str, torch.nn.Linear]) -> Counter[MNK]:
    """The linears' calls (linear_rows) as GEMMs: (rows, out_features, in_features), each with its count."""
    return Counter((r, modules[name].out_features, modules[name].in_features) for name, rs in rows.items() for r in rs)


def linear_rows(fn: Callable[[], object], modules: Mapping[str, torch.nn.Module]) -> dict[str, tuple[int, ...]]:
    """Per module, the rows (all but the last dim) of its input in each of its calls during one call of fn."""
    rows: dict[str, list[int]] = defaultdict(list)
    handles = [
        mod.register_forward_pre_hook(lambda m, args, name=name: rows[name].append(args[0].numel() // args[0].shape[-1]))
        for name, mod in modules.items()
    ]
    try:
        fn()
    finally:
        for h in handles:
            h.remove()
    return {name: tuple(r) for name, r in rows.items()}


def replayable(call: Callable[[], object], capture: Capture, what: str, notes: list[str]) -> Callable[[], object]:
    """call's replay from a graph; call itself (and a note why) when it cannot be captured."""
    got, why = capture_or_eager(call, capture)
    if why is not None:
        notes.append(f"{what}: timed eagerly ({why})")
    return got


def gpu_setup(
    names: tuple[str, str],
    models: Mapping[str, torch.nn.Module],
    calls: Mapping[str, Callable[[], object]],
    make_kernel: Callable[[int, int, int, int], Callable[[], object]],
    timers: dict[str, Timer],
    device: Device,
    capture: Capture = cuda_graph,
) -> GpuSetup:
    """Record each variant's linears inside its timed call and make their replays (capture: a call -> its
    replay; a CUDA graph's by default) and the agent's kernel for each (m, n, k) they ran at, per timer
    (make_kernel(m, n, k, weight_pool_bytes): the timer's pool, 0 for one weight tensor)."""
    notes: list[str] = []
    linears: dict[str, dict[str, tuple[int, int]]] = {}
    rows: dict[str, dict[str, tuple[int, ...]]] = {}
    inplace: dict[str, Callable[[], object]] = {}
    alone: dict[str, dict[str, Callable[[], object]]] = {}
    for n in names:
        mods = linear_modules(models[n])
        rows[n] = linear_rows(calls[n], mods)
        unused = [name for name in mods if name not in rows[n]]
        if unused:
            notes.append(f"{n}: {len(unused)} linears not called in the timed call, left out: {', '.join(unused[:4])}")
        used = {name: mod for name, mod in mods.items() if name in rows[n]}
        linears[n] = {name: (mod.out_features, mod.in_features) for name, mod in used.items()}
        inplace[n] = replayable(module_calls(calls[n], list(used.values())), capture, f"{n} in place", notes)
        alone[n] = {name: replayable(module_calls(calls[n], [mod]), capture, f"{n} {name}", notes) for name, mod in used.items()}
    setup = GpuSetup(
        names=names, linears=linears, rows=rows, inplace=inplace, alone=alone, kernels={}, timers=timers, device=device, notes=notes
    )
    built: dict[tuple[MNK, int], Callable[[], object]] = {}  # timers asking for the same pool share a kernel
    shapes = list(dict.fromkeys(s for n in names for s in setup.shapes(n)))
    for mode, timer in timers.items():
        pool = getattr(timer, "weight_pool_bytes", 0)
        for s in shapes:
            if (s, pool) not in built:
                built[s, pool] = make_kernel(*s, pool)
        setup.kernels[mode] = {s: built[s, pool] for s in shapes}
    return setup


def time_gpu_rounds(
    g: GpuSetup,
    rounds: int,
    passes: int = GPU_PASSES,
    max_seconds: float | None = None,
    timing: Timing = KERNEL_TIMING,
    seed: int = 0,
    since: float | None = None,
    on_round: Callable[[int, Mapping[tuple[str, str], list[float]]], None] | None = None,
) -> tuple[dict[tuple[str, str, str], list[float]], dict[tuple[str, str], list[float]], int]:
    """Each round times every (mode, variant) once in a shuffled order. Returns the per-linear figures
    ((mode, variant, linear) -> us per round; none for inplace, timed as a whole), the totals
    ((mode, variant) -> us per round) and how many rounds were done: max_seconds after `since` (a
    perf_counter reading; default: now) no new round starts, once MIN_ROUNDS are done. on_round(rounds done,
    totals) after each round: a run stopped at its limit has said what it had."""
    per_linear: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    totals: dict[tuple[str, str], list[float]] = defaultdict(list)
    rng = random.Random(seed)
    started = time.perf_counter() if since is None else since
    done = 0
    for r in range(rounds):
        if max_seconds is not None and r >= MIN_ROUNDS and time.perf_counter() - started > max_seconds:
            break
        jobs = [(mode, n) for mode in g.modes() for n in g.names]
        rng.shuffle(jobs)
        for mode, n in jobs:
            took: dict[str, float]
            if mode == "inplace":
                totals[mode, n].append(median_of_passes(g.inplace[n], passes, False, g.device)[0])
                continue
            if mode == "alone":
                took = {name: median_of_passes(rep, passes, False, g.device)[0] for name, rep in g.alone[n].items()}
            else:
                shapes = g.shapes(n)
                results = g.timers[mode].time_many([g.kernels[mode][s] for s in shapes], timing)
                med = {s: res.median_us for s, res in zip(shapes, results)}
                took = {name: sum(med[(m, *nk)] for m in g.rows[n][name]) for name, nk in g.linears[n].items()}
            for name, us in took.items():
                per_linear[mode, n, name].append(us)
            totals[mode, n].append(sum(took.values()))
        done += 1
        if on_round is not None:
            on_round(done, totals)
    return per_linear, totals, done


def savings(totals: Mapping[tuple[str, str], list[float]], names: tuple[str, str], modes: Sequence[str]) -> dict[str, float]:
    """Per mode, the median over rounds of unaligned - variant (us)."""
    u, v = names
    return {mode: statistics.median(b - x for b, x in zip(totals[mode, u], totals[mode, v])) for mode in modes}


def nearest_mode(saved: Mapping[str, float], ref: str = "inplace") -> str:
    """The other mode whose saving is nearest the reference mode's."""
    return min((m for m in saved if m != ref), key=lambda m: abs(saved[m] - saved[ref]))


def print_gpu_linears(g: GpuSetup, b: Built, per_linear: Mapping[tuple[str, str, str], list[float]], rounds: int) -> None:
    u, v = g.names
    modes = [m for m in g.modes() if m != "inplace"]
    print(f"{b.method}, {v} against unaligned, {b.setting}, {b.why}, on {g.device}; us, median over {rounds} rounds")
    print(f"  {'linear':32s} {'unaligned':>10s} -> {v:<12s}  " + "  ".join(f"{m:>15s}" for m in modes))

    def cell(mode: str, n: str, name: str) -> str:
        got = per_linear.get((mode, n, name))
        return f"{statistics.median(got):6.1f}" if got else f"{'-':>6s}"

    def shape(n: str, name: str) -> str:
        nk = g.linears[n].get(name)
        return f"{nk[0]}x{nk[1]}" if nk else "-"

    for name in dict.fromkeys([*g.linears[u], *g.linears[v]]):
        cells = "  ".join(f"{cell(m, u, name)} -> {cell(m, v, name)}" for m in modes)
        print(f"  {name:32s} {shape(u, name):>10s} -> {shape(v, name):<12s}  {cells}")


def profile_saving(result: Mapping[str, Any], g: GpuSetup) -> str | None:
    """What the saved run's profile says the variant saves over its linears' calls whose shape differs
    between the two (the others cancel), or None when the profile lacks one of them."""
    u, v = g.names
    profile = saved_gemm_medians(result)
    calls = {n: Counter((m, *nk) for name, nk in g.linears[n].items() for m in g.rows[n][name]) for n in g.names}
    only_u, only_v = calls[u] - calls[v], calls[v] - calls[u]
    if any(s not in profile for s in [*only_u, *only_v]):
        return None
    su = sum(profile[s] * c for s, c in only_u.items())
    sv = sum(profile[s] * c for s, c in only_v.items())
    return (
        f"  the saved run's profile ({result['profile'][0]['timer']}): saves {su - sv:+.0f} us"
        f" over the {sum(only_u.values())} -> {sum(only_v.values())} linear calls whose shapes differ"
    )


def print_gpu_report(
    g: GpuSetup,
    b: Built,
    per_linear: Mapping[tuple[str, str, str], list[float]],
    totals: Mapping[tuple[str, str], list[float]],
    rounds: int,
) -> None:
    print_gpu_linears(g, b, per_linear, rounds)
    u, _ = g.names
    print_totals(g.names, len(g.linears[u]), totals, g.modes(), ref="inplace", ref_label="in place")
    saved = savings(totals, g.names, g.modes())
    best = nearest_mode(saved)
    others = ", ".join(f"{m} {saved[m]:+.0f} us" for m in g.modes() if m != "inplace")
    print(f"  nearest the in-place saving ({saved['inplace']:+.0f} us): {best} ({others})")
    line = profile_saving(b.result, g)
    if line:
        print(line)
    for note in g.notes:
        print(f"  note: {note}")


def run_cuda(a: argparse.Namespace) -> None:
    """The CUDA path: build on a.device, record and capture, time the rounds, print."""
    from gac.agent.timing import CudaTimer

    dev = torch.device(a.device)
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
        a.device = str(dev)
    t0 = time.perf_counter()
    with on_device(dev):
        b = build_models(a)
        dtype = str(b.cfg.torch_dtype).removeprefix("torch.")
        cold = CudaTimer(dev)
        kept: list[object] = []  # the kernels' inputs live as long as their closures, kept here besides

        def make_kernel(m: int, n: int, k: int, pool: int) -> Callable[[], object]:
            kernel = build_kernel("gemm", dtype, {"m": m, "n": n, "k": k}, device=dev, weight_pool_bytes=pool)
            kept.append(kernel)
            return kernel.fn

        g = gpu_setup(
            b.names,
            b.models,
            {n: b.call(m, a.decode) for n, m in b.models.items()},
            make_kernel,
            {"cold": cold, "warm": cold.warm(), "chain": cold.chained()},
            dev,
        )
        torch.cuda.synchronize(dev)
        print(
            f"built and captured in {time.perf_counter() - t0:.0f} s: {torch.cuda.get_device_name(dev)}, "
            f"{len(g.kernels['cold'])} GEMM shapes; timing {a.rounds} rounds",
            flush=True,
        )

        def so_far(done: int, totals: Mapping[tuple[str, str], list[float]]) -> None:
            saved = savings(totals, g.names, g.modes())
            print(
                f"after {done} round(s), {time.perf_counter() - STARTED:.0f} s: saves "
                + ", ".join(f"{m} {us:+.1f} us" for m, us in saved.items()),
                flush=True,
            )

        per_linear, totals, done = time_gpu_rounds(g, a.rounds, max_seconds=a.max_seconds, since=STARTED, on_round=so_far)
    print_gpu_report(g, b, per_linear, totals, done)


def main(argv: Sequence[str] | None = None) -> None:
    a = parse_args(argv)
    problem = cuda_problem(a.device)
    if problem:
        sys.exit(problem)
    if is_cuda(a.device):
        run_cuda(a)
        return
    setup = build_setup(a)
    per_linear, totals = time_rounds(setup, a.rounds)
    print_linears(setup, per_linear, a.rounds)
    print_totals(setup.names, len(setup.linears[setup.names[0]]), totals)
    print_saved_profile(setup)


if __name__ == "__main__":
    main()
