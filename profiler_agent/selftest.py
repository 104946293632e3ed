"""`gac agent selftest`: what an operator checks on a new box before it joins a fleet.

Each check is one small function returning a CheckResult (name, status, detail, fix):

| check | CPU | CUDA |
|---|---|---|
| device | platform detection | torch sees the GPU and runs a matmul correctly on it |
| cuda stack | skip | CUDA runtime, cuBLAS, cuDNN, driver, torch's compiled archs |
| nvml clocks | skip | SM clock under load against its maximum, throttle reasons, other processes |
| timer vs cuda events | skip | CudaTimer against plain torch.cuda.Event timing, three GEMMs |
| timer vs triton do_bench | skip | the same against triton.testing.do_bench, where triton is installed |
| timer vs torch.utils.benchmark | CpuTimer against torch.utils.benchmark, three GEMMs | skip |
| l2 flush | skip | the timer's flush buffer against the device's L2, and that a flush evicts |
| sdpa backends | which SDPA backends run, and which dispatch picks, per head_dim | the same |

A check that does not apply to the device is "skip" with the reason, never a silent
pass. "fail" means the box should not join the fleet as it is (the CLI exits non-zero);
"warn" means its figures are usable but something deserves a look. Every warn and
fail says what to do. Nothing here invents a number: what cannot be read is said so.

The timer comparisons time the same closure with both tools, interleaved, in several
repeats, and compare the best (least disturbed) median of each: the ratio must lie in
BAND. On a busy machine a ratio outside BAND but within GROSS is reported as "warn"
with the reason (load, unsteady repeats), not "fail"; beyond GROSS it fails whatever
the load, since noise on the least disturbed of several interleaved repeats does not
make two sound timers disagree by that much (a unit or loop-count error does).
"""

from __future__ import annotations

import math
import os
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any, Literal

import torch

from gac.agent.gpu_queue import nvml_handle
from gac.agent.kernels import build_kernel
from gac.agent.platform import detect_platform, parse_device
from gac.agent.timing import CpuTimer, CudaTimer, Timer
from gac.contracts.measurements import Op, PlatformDescriptor
from gac.contracts.plans import Timing

Status = Literal["ok", "warn", "fail", "skip"]

BAND = (0.8, 1.25)  # ours / reference, best medians: agreement
GROSS = 1.5  # beyond 1/GROSS..GROSS: a broken timer, even on a busy machine
REPEATS = 3  # interleaved repeats per shape ...
MAX_REPEATS = 6  # ... and up to this many when the ratio is ambiguous (outside BAND, inside GROSS)

# (m, n, k) of F.linear(x[m,k], W[n,k]): a decode-like weight read and two compute-bound GEMMs.
CPU_GEMMS = ((16, 1024, 1024), (256, 256, 256), (128, 512, 512))  # ~0.3-1 ms each on one core
CUDA_GEMMS = ((16, 8192, 8192), (2048, 2048, 2048), (4096, 4096, 4096))
SDPA_HEAD_DIMS = (64, 80, 96, 128, 256)
SDPA_SHAPE = {"b": 1, "h": 8, "s": 256}

# Our CPU timer stops early on a quiet machine; on a busy one it keeps looking for samples
# that were not preempted for up to twice its cap, and the reference gets as long (GIVE_UP_S).
CPU_TIMING = Timing(time_cap_ms=500, warmup_ms=20)
CUDA_TIMING = Timing(time_cap_ms=500)
L2_TIMING = Timing(time_cap_ms=200)
SMALL_GEMMS = ((256, 128, 256), (256, 136, 256), (256, 200, 256))  # ~3-7 us on current GPUs
REPEAT_OK, REPEAT_FAIL = 0.03, 0.10  # medians of one point apart by up to 3 %: repeatable; beyond 10 %: broken
REFERENCE_S = 0.2  # time budget of one reference measurement
GIVE_UP_S = 2 * CPU_TIMING.time_cap_ms / 1e3
CPU_BLOCK_US = 1000.0  # torch.utils.benchmark block length (see cpu_reference_us)


@dataclass
class CheckResult:
    """One check's verdict; `fix` says what to do when it is not ok."""

    name: str
    status: Status
    detail: str
    fix: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _skip(name: str, why: str) -> CheckResult:
    return CheckResult(name, "skip", why)


def _is_rocm() -> bool:
    return getattr(torch.version, "hip", None) is not None


def _fmt_bytes(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB" if n >= 1 << 20 else f"{n / 1024:.0f} KiB"


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


# ---------------------------------------------------------------- device


def check_device(dev: torch.device) -> tuple[CheckResult, PlatformDescriptor | None]:
    """torch sees the device and computes on it; the platform it would be recorded as (None on failure)."""
    name = "device"
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            if torch.version.cuda is None and not _is_rocm():
                why = f"torch {torch.__version__} is a CPU-only build: it cannot use {dev}"
            else:
                why = f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU: {_cuda_init_error()}"
            return CheckResult(
                name,
                "fail",
                why,
                fix=(
                    "install a CUDA build of torch matching the driver (https://pytorch.org/get-started/locally), "
                    "check that `nvidia-smi` lists the GPU, and that CUDA_VISIBLE_DEVICES does not hide it"
                ),
            ), None
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            return CheckResult(
                name,
                "fail",
                f"torch sees {count} CUDA device(s) (cuda:0..cuda:{count - 1}), not {dev}"
                + (f"; CUDA_VISIBLE_DEVICES={visible}" if visible is not None else ""),
                fix=f"use --device cuda:N with N < {count}",
            ), None
        try:
            _matmul_matches_cpu(dev)
        except (RuntimeError, AssertionError) as err:
            return CheckResult(
                name,
                "fail",
                f"{dev} cannot run a float16 matmul correctly: {str(err)[:300]}",
                fix=(
                    "the torch build may lack kernels for this GPU's architecture (see torch.cuda.get_arch_list()) "
                    "or the GPU is faulty: install a torch build for it, check `nvidia-smi -q` for errors"
                ),
            ), None
    try:
        platform = detect_platform(dev)
    except (RuntimeError, ValueError, OSError) as err:
        return CheckResult(
            name, "fail", f"platform detection failed: {err}", fix="report this with the output of `gac agent platform`"
        ), None
    p = platform
    if p.device_kind == "cpu":
        what = (
            f"{p.device_name}: {p.cores} cores, torch uses {p.threads} threads, L2 "
            f"{_fmt_bytes(p.l2_bytes) if p.l2_bytes else 'unknown'}, ISA {p.isa or 'unknown'}"
        )
    else:
        what = (
            f"{p.device_name} sm_{(p.compute_capability or '?').replace('.', '')}, {p.sm_count} SMs, "
            f"{(p.memory_bytes or 0) / (1 << 30):.0f} GiB, L2 {_fmt_bytes(p.l2_bytes) if p.l2_bytes else 'unknown'}"
        )
    fast = p.fast_dtype.value if p.fast_dtype is not None else "unknown"
    detail = f"{what}; fast dtype {fast}; fingerprint {p.fingerprint()[:16]}"
    return CheckResult(
        name, "ok", detail, data={"platform": p.model_dump(mode="json", exclude_none=True), "fingerprint": p.fingerprint()}
    ), platform


def _cuda_init_error() -> str:
    try:
        torch.cuda.init()
    except Exception as err:  # noqa: BLE001 - its message is the reason (no driver, driver too old, ...)
        return str(err).strip().splitlines()[0][:300]
    return "torch.cuda.is_available() is False"


def _matmul_matches_cpu(dev: torch.device) -> None:
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 64, generator=gen), torch.randn(64, 64, generator=gen)
    got = (a.to(dev, torch.float16) @ b.to(dev, torch.float16)).float().cpu()
    want = a.half().float() @ b.half().float()
    err = (got - want).abs().max().item()
    assert err < 0.5, f"largest error {err:.3g} against the CPU result"


# ---------------------------------------------------------------- CUDA stack


def check_cuda_stack(dev: torch.device, platform: PlatformDescriptor) -> CheckResult:
    """CUDA runtime, cuBLAS, cuDNN and driver versions (what the fingerprint records) and torch's compiled archs."""
    name = "cuda stack"
    p = platform
    if dev.type != "cuda":
        libs = ", ".join(f"{k} {v}" for k, v in (("torch", p.torch_version), ("MKL", p.mkl_version), ("oneDNN", p.onednn_version)) if v)
        return _skip(name, f"CPU device: no CUDA runtime, cuBLAS, cuDNN or driver in use ({libs})")
    rocm = p.device_kind == "rocm"
    driver = p.driver_version
    driver_cuda = _nvml_cuda_driver_version()
    parts = [f"{'HIP' if rocm else 'CUDA'} runtime {p.cuda_runtime}"]
    if not rocm:
        parts.append(f"cuBLAS {p.cublas_version or 'unknown'}")
    parts.append(f"cuDNN {p.cudnn_version or 'unavailable'}")
    parts.append(f"driver {driver or 'unknown'}" + (f" (supports CUDA {driver_cuda})" if driver_cuda else ""))
    problems, fixes = [], []
    if not rocm and p.cublas_version is None:
        problems.append("cuBLAS version unknown")
        fixes.append("cuBLAS: make libcublasLt loadable (the nvidia-cublas wheel or the CUDA toolkit's lib dir on LD_LIBRARY_PATH)")
    if driver is None:
        problems.append("driver version unknown")
        fixes.append("driver: install nvidia-ml-py (the [cuda] extra) or put nvidia-smi on PATH")
    if p.cudnn_version is None:
        problems.append("cuDNN unavailable (no cudnn SDPA backend)")
        fixes.append("cuDNN: install the torch wheel with its nvidia-cudnn dependency")
    arch = _arch_note(dev)
    if arch:
        problems.append(arch)
        fixes.append("archs: install a torch build compiled for this GPU")
    detail = ", ".join(parts) + (f"; {'; '.join(problems)}" if problems else "")
    data = {
        "cuda_runtime": p.cuda_runtime,
        "cublas": p.cublas_version,
        "cudnn": p.cudnn_version,
        "driver": driver,
        "driver_cuda": driver_cuda,
        "arch_list": _arch_list(),
    }
    if problems:
        return CheckResult(
            name,
            "warn",
            detail,
            fix="; ".join(fixes) + " (platforms that differ only in an unknown version share a fingerprint)",
            data=data,
        )
    return CheckResult(name, "ok", detail, data=data)


def _nvml_cuda_driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            v = int(pynvml.nvmlSystemGetCudaDriverVersion())
        finally:
            pynvml.nvmlShutdown()
        return f"{v // 1000}.{v % 1000 // 10}"
    except Exception:  # noqa: BLE001 - not installed or no driver: unknown
        return None


def _arch_list() -> list[str]:
    try:
        return list(torch.cuda.get_arch_list())
    except Exception:  # noqa: BLE001
        return []


def _arch_note(dev: torch.device) -> str | None:
    """None if torch carries machine code for this GPU (same major, minor <= the GPU's), else what it has."""
    if _is_rocm():
        return None
    archs = _arch_list()
    if not archs:
        return None
    major, minor = torch.cuda.get_device_capability(dev)

    def code(prefix: str) -> list[tuple[int, int]]:
        out = []
        for a in archs:
            digits = "".join(ch for ch in a.removeprefix(prefix) if ch.isdigit())
            if a.startswith(prefix) and len(digits) >= 2:
                out.append((int(digits[:-1]), int(digits[-1])))
        return out

    if any(ma == major and mi <= minor for ma, mi in code("sm_")):
        return None
    if any((ma, mi) <= (major, minor) for ma, mi in code("compute_")):
        return f"torch has no sm_{major}{minor} machine code, only PTX (JIT-compiled on first use: slow first calls)"
    return f"torch was built for {','.join(archs)}, not sm_{major}{minor}"


# ---------------------------------------------------------------- NVML


# nvmlClocksEventReason* bits (nvml.h): name, and how bad it is while a GEMM runs.
THROTTLE_REASONS: dict[int, tuple[str, Status]] = {
    0x1: ("gpu idle", "ok"),
    0x2: ("application clocks setting", "ok"),
    0x4: ("software power cap", "ok"),  # normal under a heavy GEMM on many boards
    0x8: ("hardware slowdown", "fail"),
    0x10: ("sync boost", "ok"),
    0x20: ("software thermal slowdown", "warn"),
    0x40: ("hardware thermal slowdown", "fail"),
    0x80: ("hardware power brake", "fail"),
    0x100: ("display clock setting", "ok"),
    0x200: ("board limit", "warn"),
    0x400: ("reliability", "warn"),
}
MIN_CLOCK_FRACTION = 0.5  # SM clock under load below this share of its maximum: warn


def decode_throttle(mask: int) -> list[tuple[str, Status]]:
    """The throttle reasons set in an NVML mask (unknown bits named by value, as warnings)."""
    out = [THROTTLE_REASONS[bit] for bit in sorted(THROTTLE_REASONS) if mask & bit]
    rest = mask & ~sum(THROTTLE_REASONS)
    if rest:
        out.append((f"unknown reason bits {rest:#x}", "warn"))
    return out


def check_nvml(dev: torch.device, dtype: str = "float16", load_seconds: float = 0.6) -> CheckResult:
    """SM clock under a GEMM load against its maximum, throttle reasons, temperature, other processes."""
    name = "nvml clocks"
    if dev.type != "cuda":
        return _skip(name, "CPU device: no GPU clocks to read (NVML is the NVIDIA GPU driver's library)")
    if _is_rocm():
        return _skip(name, "ROCm device: NVML does not apply (rocm-smi shows clocks)")
    try:
        import pynvml
    except ImportError:
        return CheckResult(
            name,
            "warn",
            "nvidia-ml-py is not installed: measurements will carry no SM clock or throttle reasons",
            fix="pip install nvidia-ml-py (part of the [cuda] extra)",
        )
    try:
        pynvml.nvmlInit()
    except Exception as err:  # noqa: BLE001
        return CheckResult(name, "warn", f"NVML did not initialise: {err}", fix="check the driver with `nvidia-smi`")
    try:
        handle, nvml_index = nvml_handle(pynvml, dev)
        idle = _nvml_read(pynvml, handle)
        busy = _nvml_under_load(pynvml, handle, dev, dtype, load_seconds)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
    return judge_nvml(busy, idle, dev_index=dev.index or 0, nvml_index=nvml_index)


def judge_nvml(busy: dict[str, Any], idle: dict[str, Any], dev_index: int, nvml_index: int | None) -> CheckResult:
    """The verdict on NVML readings taken while a GEMM ran (busy) and before (idle)."""
    name = "nvml clocks"
    if not busy:
        return CheckResult(
            name,
            "warn",
            "NVML answered but returned no clock, throttle or process reading for this GPU",
            fix="check `nvidia-smi -q -d CLOCK,PERFORMANCE`; measurements will carry no SM clock",
            data={"idle": idle, "nvml_index": nvml_index},
        )
    status: Status = "ok"
    notes, fixes = [], []
    clock, top = busy.get("sm_clock_mhz"), busy.get("max_sm_clock_mhz")
    parts = [f"SM clock under load {clock if clock is not None else '?'} MHz of max {top if top is not None else '?'} MHz"]
    if busy.get("temperature_c") is not None:
        parts.append(f"{busy['temperature_c']} C")
    if busy.get("power_w") is not None and busy.get("power_limit_w"):
        parts.append(f"{busy['power_w']:.0f} of {busy['power_limit_w']:.0f} W")
    reasons = decode_throttle(int(busy["throttle_reasons"])) if busy.get("throttle_reasons") is not None else None
    parts.append("throttle reasons: " + (", ".join(r for r, _ in reasons) or "none") if reasons is not None else "throttle reasons unknown")
    for reason, severity in reasons or []:
        if severity == "fail":
            status = "fail"
            fixes.append(
                f"{reason}: the GPU is slowed by hardware (temperature, power delivery): check cooling and power "
                "(`nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER`) before profiling on it"
            )
        elif severity == "warn" and status == "ok":
            status = "warn"
            fixes.append(f"{reason}: check `nvidia-smi -q -d PERFORMANCE`; figures taken now would be of a slowed GPU")
    if clock and top and clock < MIN_CLOCK_FRACTION * top:
        notes.append(f"SM clock under load is {clock / top:.0%} of its maximum")
        fixes.append("low clocks under load: check for locked clocks (`nvidia-smi -q -d CLOCK`) or a power limit")
        status = "warn" if status == "ok" else status
    others = busy.get("other_processes") or []
    if others:
        notes.append(f"{len(others)} other process(es) on this GPU (pids {', '.join(map(str, others[:5]))})")
        fixes.append("other processes share the GPU: profile on an idle GPU, or the figures are shared")
        status = "warn" if status == "ok" else status
    if nvml_index is not None and nvml_index != dev_index:
        notes.append(f"cuda:{dev_index} is NVML device {nvml_index} (the timer finds it by PCI bus id)")
    detail = "; ".join(parts + notes)
    return CheckResult(
        name, status, detail, fix="; ".join(fixes) or None, data={"under_load": busy, "idle": idle, "nvml_index": nvml_index}
    )


def _nvml_read(nv: Any, handle: Any) -> dict[str, Any]:
    """What NVML tells now; a field it cannot read is left out."""
    reads: dict[str, Callable[[], Any]] = {
        "sm_clock_mhz": lambda: int(nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM)),
        "max_sm_clock_mhz": lambda: int(nv.nvmlDeviceGetMaxClockInfo(handle, nv.NVML_CLOCK_SM)),
        "temperature_c": lambda: int(nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU)),
        "power_w": lambda: nv.nvmlDeviceGetPowerUsage(handle) / 1000,
        "power_limit_w": lambda: nv.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000,
        "throttle_reasons": lambda: int(
            (getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons)(handle)
        ),
        "other_processes": lambda: sorted(p.pid for p in nv.nvmlDeviceGetComputeRunningProcesses(handle) if p.pid != os.getpid()),
    }
    out: dict[str, Any] = {}
    for key, read in reads.items():
        try:
            out[key] = read()
        except Exception:  # noqa: BLE001 - unsupported on this board: not recorded
            pass
    return out


def _nvml_under_load(nv: Any, handle: Any, dev: torch.device, dtype: str, seconds: float) -> dict[str, Any]:
    """Queue GEMMs for `seconds` and read NVML half way through, while the GPU is busy."""
    k = build_kernel(Op.gemm, dtype, {"m": 4096, "n": 4096, "k": 4096}, dev)
    with torch.inference_mode():
        k.fn()
        _sync(dev)
        reading: dict[str, Any] = {}
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            k.fn()  # launches block once the queue is full, so the GPU is busy from here on
            if not reading and time.perf_counter() - t0 >= seconds / 2:
                reading = _nvml_read(nv, handle)
        _sync(dev)
    return reading or _nvml_read(nv, handle)


# ---------------------------------------------------------------- timer agreement


Sample = float | tuple[float, bool]  # a median (us), or (median, clean): clean False when it had to use preempted samples


@dataclass(frozen=True)
class Agreement:
    """Our timer against a reference on one kernel: each one's median (us) per repeat, interleaved,
    and whether both sides of each repeat were clean (not made of preempted samples)."""

    label: str
    ours_us: tuple[float, ...]
    ref_us: tuple[float, ...]
    clean: tuple[bool, ...] = ()

    @property
    def ratio(self) -> float:
        """Best (least disturbed) median of ours over the reference's best."""
        return min(self.ours_us) / min(self.ref_us)

    @property
    def unsteady(self) -> float:
        """How much the same tool's medians moved between repeats (max / min, the larger of the two tools)."""
        return max(max(v) / min(v) for v in (self.ours_us, self.ref_us))


def classify(ratio: float, band: tuple[float, float] = BAND, gross: float = GROSS) -> Literal["ok", "off", "gross"]:
    if band[0] <= ratio <= band[1]:
        return "ok"
    return "gross" if ratio > gross or ratio < 1 / gross else "off"


def _split(sample: Sample) -> tuple[float, bool]:
    return (float(sample[0]), bool(sample[1])) if isinstance(sample, tuple) else (float(sample), True)


def compare(
    label: str,
    ours: Callable[[], Sample],
    ref: Callable[[], Sample],
    repeats: int = REPEATS,
    max_repeats: int = MAX_REPEATS,
) -> Agreement:
    """Time with both, interleaved (alternating which goes first, so a drift hits both alike);
    more repeats, up to max_repeats, while the ratio is ambiguous (outside BAND, inside GROSS)."""
    o: list[float] = []
    r: list[float] = []
    clean: list[bool] = []
    while True:
        if len(o) % 2 == 0:
            (a, ca), (b, cb) = _split(ours()), _split(ref())
        else:
            (b, cb), (a, ca) = _split(ref()), _split(ours())
        o.append(a)
        r.append(b)
        clean.append(ca and cb)
        done = len(o) >= repeats and classify(min(o) / min(r)) != "off"
        if done or len(o) >= max_repeats:
            return Agreement(label, tuple(o), tuple(r), tuple(clean))


def judge_agreement(name: str, reference: str, agreements: Sequence[Agreement], busy: Sequence[str] = ()) -> CheckResult:
    """ok when every ratio lies in BAND; fail beyond GROSS, or outside BAND on a quiet machine;
    warn outside BAND on a busy one (`busy`: why the machine is thought busy; unsteady repeats add to it),
    and beyond GROSS too when no repeat of that kernel was clean on both sides (nothing sound to compare)."""
    verdicts = [(a, classify(a.ratio)) for a in agreements]
    why_busy = list(busy)
    worst = max((a.unsteady for a in agreements), default=1.0)
    if worst > 1.2:
        why_busy.append(f"the same kernel's median moved {worst:.2f}x between repeats")
    unsound = [a.label for a in agreements if a.clean and not any(a.clean)]
    if unsound:
        why_busy.append(f"every repeat of {', '.join(unsound)} had to use preempted samples")
    verdicts = [(a, "off" if v == "gross" and a.label in unsound else v) for a, v in verdicts]
    per = ", ".join(f"{a.label} {a.ratio:.2f}" for a in agreements)
    runs = sorted({len(a.ours_us) for a in agreements}) or [0]
    n = str(runs[0]) if len(runs) == 1 else f"{runs[0]}-{runs[-1]}"
    detail = f"ours/{reference} {per} (band {BAND[0]}-{BAND[1]}, best median of {n} interleaved repeats)"
    data = {
        "band": list(BAND),
        "gross": GROSS,
        "busy": why_busy,
        "shapes": [
            {"label": a.label, "ratio": a.ratio, "ours_us": list(a.ours_us), "ref_us": list(a.ref_us), "clean": list(a.clean)}
            for a in agreements
        ],
    }
    gross = [a for a, v in verdicts if v == "gross"]
    off = [a for a, v in verdicts if v == "off"]
    fix = (
        f"our timer disagrees with {reference}: do not profile with this agent; report the output "
        "(`gac agent selftest --json`) with the agent version"
    )
    if gross:
        worst_a = max(gross, key=lambda a: abs(math.log(a.ratio)))
        return CheckResult(name, "fail", f"{detail}; {worst_a.label} is off by {worst_a.ratio:.2f}x: not noise", fix=fix, data=data)
    if off and why_busy:
        return CheckResult(
            name,
            "warn",
            f"{detail}; inconclusive, the machine is busy: {'; '.join(why_busy)}",
            fix="re-run `gac agent selftest` on a quiet machine (nothing else running) to settle it",
            data=data,
        )
    if off:
        return CheckResult(name, "fail", f"{detail}; outside the band on a quiet machine", fix=fix, data=data)
    if why_busy:
        detail += f" (despite a busy machine: {'; '.join(why_busy)})"
    return CheckResult(name, "ok", detail, data=data)


def _gemm_label(m: int, n: int, k: int) -> str:
    return f"{m}x{n}x{k}"


@dataclass
class ReferenceStats:
    """How many of the reference's blocks were kept and how many dropped as preempted."""

    kept: int = 0
    dropped: int = 0


def cpu_reference_us(
    fn: Callable[[], object],
    budget_s: float = REFERENCE_S,
    block_us: float = CPU_BLOCK_US,
    stats: ReferenceStats | None = None,
    min_on_cpu: float = 0.9,
    give_up_s: float = GIVE_UP_S,
) -> tuple[float, bool]:
    """torch.utils.benchmark's median time per call, from blocks of about block_us.

    Not blocked_autorange: it grows blocks until the timer's overhead is below 1e-4 of
    them (tens of milliseconds here), and on a shared machine every such block includes
    time the thread spent descheduled: it read 1.5-3x slow on this 2-core VM under load.
    Blocks of ~1 ms mostly fit between preemptions; a block during which the thread ran
    for less than min_on_cpu of its wall time (the thread's CPU clock, read around the
    block, as CpuTimer does) is dropped, unless fewer than 10 survive within give_up_s
    (then all are used and the result is not clean). The time itself is
    torch.utils.benchmark's: its clock, its loop, its division by the call count.
    Returns (median us per call, clean)."""
    import torch.utils.benchmark as tb

    timer = tb.Timer("fn()", globals={"fn": fn}, num_threads=1)
    per_call = min(timer.timeit(1).raw_times[0] for _ in range(3))  # also the warm-up
    number = max(1, math.ceil(block_us / 1e6 / max(per_call, 1e-9)))
    kept: list[float] = []
    dropped: list[float] = []
    t0 = time.perf_counter()
    while len(kept) < 10 or time.perf_counter() - t0 < budget_s:
        c, w = time.thread_time_ns(), time.perf_counter_ns()
        us = timer.timeit(number).raw_times[0] / number * 1e6
        on_cpu, wall = time.thread_time_ns() - c, time.perf_counter_ns() - w
        (dropped if wall > 0 and on_cpu < min_on_cpu * wall else kept).append(us)
        if time.perf_counter() - t0 > give_up_s:
            break  # almost every block preempted: use them all (below)
    if stats is not None:
        stats.kept += len(kept)
        stats.dropped += len(dropped)
    clean = len(kept) >= 10
    return statistics.median(kept if clean else kept + dropped), clean


def _cpu_busy(cores: int | None, preempted: float | None, ref_preempted: float | None = None) -> list[str]:
    out = []
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    cores = cores or os.cpu_count() or 1
    if load is not None and load > cores:
        out.append(f"load average {load:.1f} on {cores} cores")
    if preempted is not None and preempted > 0.25:
        out.append(f"{preempted:.0%} of our timer's samples were preempted")
    if ref_preempted is not None and ref_preempted > 0.25:
        out.append(f"{ref_preempted:.0%} of the reference's blocks were preempted")
    return out


def check_cpu_timer(
    dev: torch.device, timer: Timer | None = None, shapes: Sequence[tuple[int, int, int]] = CPU_GEMMS, repeats: int = REPEATS
) -> CheckResult:
    """CpuTimer (one thread) against torch.utils.benchmark on three float32 GEMMs."""
    name = "timer vs torch.utils.benchmark"
    if dev.type != "cpu":
        return _skip(
            name, "CUDA device: a host-side reference cannot time GPU kernels; the CUDA timer is compared with CUDA events instead"
        )
    timer = timer or CpuTimer(threads=1)
    kept = discarded = 0
    ref_stats = ReferenceStats()
    agreements = []
    for m, n, k in shapes:
        kernel = build_kernel(Op.gemm, "float32", {"m": m, "n": n, "k": k}, dev)

        def ours(fn: Callable[[], object] = kernel.fn) -> tuple[float, bool]:
            nonlocal kept, discarded
            r = timer.time(fn, CPU_TIMING)
            kept += r.n
            discarded += int(r.extra.get("preempted") or 0)
            return r.median_us, not r.extra.get("preempted_fallback")

        with torch.inference_mode():
            agreements.append(compare(_gemm_label(m, n, k), ours, partial(cpu_reference_us, kernel.fn, stats=ref_stats), repeats))
    preempted = discarded / (kept + discarded) if kept + discarded else None
    total = ref_stats.kept + ref_stats.dropped
    ref_preempted = ref_stats.dropped / total if total else None
    return judge_agreement(name, "torch.utils.benchmark", agreements, _cpu_busy(os.cpu_count(), preempted, ref_preempted))


def _timer_us(timer: Timer, fn: Callable[[], object]) -> float:
    """Our CUDA timer's median for fn (the side compared with a reference)."""
    return timer.time(fn, CUDA_TIMING).median_us


def cuda_events_reference_us(fn: Callable[[], object], dev: torch.device, flush_bytes: int, budget_s: float = REFERENCE_S) -> float:
    """Median of plain torch.cuda.Event pairs around single calls, L2 flushed before each
    by zeroing its own buffer (what triton.testing.do_bench does), after a short warm-up."""
    with torch.cuda.device(dev):
        cache = torch.empty(flush_bytes // 4, dtype=torch.int32, device=dev)
        for _ in range(3):
            fn()
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        for _ in range(5):
            fn()
        torch.cuda.synchronize(dev)
        per_call = (time.perf_counter() - t0) / 5
        while time.perf_counter() - t0 < 0.05:  # warm-up: ~50 ms
            fn()
        reps = max(10, min(1000, int(budget_s / max(per_call, 1e-6))))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for s, e in zip(starts, ends):
            cache.zero_()
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize(dev)
        del cache
        return statistics.median(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends))


def _cuda_gemm_dtype(platform: PlatformDescriptor | None) -> str:
    fast = platform.fast_dtype.value if platform is not None and platform.fast_dtype is not None else None
    return fast or "float16"


def _gpu_busy() -> list[str]:
    """Other processes on the GPU (NVML), when that can be read."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001
        return []
    try:
        index = int(torch.cuda._get_nvml_device_index(torch.cuda.current_device()))
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        others = [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle) if p.pid != os.getpid()]
    except Exception:  # noqa: BLE001
        return []
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
    return [f"{len(others)} other process(es) use this GPU"] if others else []


def check_cuda_timer(
    dev: torch.device,
    platform: PlatformDescriptor | None,
    timer: CudaTimer | None = None,
    shapes: Sequence[tuple[int, int, int]] = CUDA_GEMMS,
    repeats: int = REPEATS,
) -> CheckResult:
    """CudaTimer against plain torch.cuda.Event timing on three GEMMs in the platform's fast dtype."""
    name = "timer vs cuda events"
    if dev.type != "cuda":
        return _skip(name, "CPU device: no CUDA events (the CPU timer is compared with torch.utils.benchmark)")
    timer = timer or CudaTimer(dev)
    flush = max(timer.flush_bytes, 256 << 20)
    return _against_reference(
        name, "cuda events", dev, platform, timer, shapes, repeats, lambda fn: cuda_events_reference_us(fn, dev, flush)
    )


def _against_reference(
    name: str,
    reference: str,
    dev: torch.device,
    platform: PlatformDescriptor | None,
    timer: CudaTimer,
    shapes: Sequence[tuple[int, int, int]],
    repeats: int,
    reference_us: Callable[[Callable[[], object]], float],
) -> CheckResult:
    """The CUDA timer against a reference timer on GEMMs of these shapes in the platform's fast dtype."""
    dtype = _cuda_gemm_dtype(platform)
    agreements = []
    for m, n, k in shapes:
        kernel = build_kernel(Op.gemm, dtype, {"m": m, "n": n, "k": k}, dev)
        with torch.inference_mode():
            agreements.append(
                compare(
                    f"{_gemm_label(m, n, k)} {dtype}",
                    partial(_timer_us, timer, kernel.fn),
                    partial(reference_us, kernel.fn),
                    repeats,
                )
            )
        del kernel
    with torch.cuda.device(dev):
        busy = _gpu_busy()
    return judge_agreement(name, reference, agreements, busy)


def triton_do_bench() -> Callable[..., Any] | None:
    try:
        from triton.testing import do_bench
    except Exception:  # noqa: BLE001 - not installed, or broken on this box
        return None
    return do_bench


def triton_reference_us(do_bench: Callable[..., Any], fn: Callable[[], object], dev: torch.device) -> float:
    """triton.testing.do_bench's median (it flushes the L2 and times with CUDA events), in us."""
    with torch.cuda.device(dev):
        try:
            ms = do_bench(fn, warmup=25, rep=100, return_mode="median")
        except TypeError:  # triton < 2.1: no return_mode, returns (median, p20, p80)
            ms = do_bench(fn, warmup=25, rep=100)
        if isinstance(ms, (tuple, list)):
            ms = ms[0]
    return float(ms) * 1e3


def check_triton_timer(
    dev: torch.device,
    platform: PlatformDescriptor | None,
    timer: CudaTimer | None = None,
    shapes: Sequence[tuple[int, int, int]] = CUDA_GEMMS,
    repeats: int = REPEATS,
) -> CheckResult:
    """CudaTimer against triton.testing.do_bench on the same three GEMMs, where triton is installed."""
    name = "timer vs triton do_bench"
    if dev.type != "cuda":
        return _skip(name, "CPU device: triton's do_bench times GPU kernels only")
    do_bench = triton_do_bench()
    if do_bench is None:
        return _skip(name, "triton is not installed (optional): the CUDA timer was compared with CUDA events only")
    timer = timer or CudaTimer(dev)
    return _against_reference(
        name, "triton do_bench", dev, platform, timer, shapes, repeats, lambda fn: triton_reference_us(do_bench, fn, dev)
    )


# ---------------------------------------------------------------- L2 flush


def check_l2_flush(dev: torch.device, timer: CudaTimer | None = None) -> CheckResult:
    """The timer's flush buffer against the device's L2, and that a flush makes a read of half the L2 slower."""
    name = "l2 flush"
    if dev.type != "cuda":
        return _skip(name, "CPU device: the CPU timer flushes no cache (the L2 flush belongs to the CUDA timer)")
    props = torch.cuda.get_device_properties(dev)
    l2 = int(getattr(props, "L2_cache_size", 0) or 0)
    try:
        timer = timer or CudaTimer(dev)
    except ValueError as err:
        return CheckResult(name, "fail", str(err), fix="the flush buffer must cover the L2: do not pass a smaller flush size")
    flush = timer.flush_bytes
    data: dict[str, Any] = {"l2_bytes": l2, "flush_bytes": flush}
    if not l2:
        return CheckResult(
            name,
            "warn",
            f"torch reports no L2 size for this device: the timer flushes {_fmt_bytes(flush)}, an assumed upper bound",
            fix="check the GPU's L2 size in its datasheet; if larger, the curves are of a warm L2",
            data=data,
        )
    head = f"flush buffer {_fmt_bytes(flush)} = {flush / l2:.1f}x the L2 ({_fmt_bytes(l2)})"
    if flush < l2:
        return CheckResult(
            name,
            "fail",
            head + ": smaller than the L2, kernels would read warm operands",
            fix="use the default flush size (twice the L2)",
            data=data,
        )
    with torch.cuda.device(dev), torch.inference_mode():
        buf = torch.ones(max(1, l2 // 4 // 4), dtype=torch.float32, device=dev)
        warm, cold = l2_read_times(timer, buf.sum)
        del buf
    return judge_l2_flush(l2, flush, warm, cold)


def l2_read_times(timer: CudaTimer, read: Callable[[], object]) -> tuple[float, float]:
    """Median us of one read: warm (read just before) and cold (after the timer's flush), both queued ahead."""
    return timer.warm().time(read, L2_TIMING).median_us, timer.time(read, L2_TIMING).median_us


def judge_l2_flush(l2: int, flush: int, warm: float, cold: float) -> CheckResult:
    """A read of a quarter of the L2 must be slower after a flush than warm (a quarter: it fits in
    the near half of a partitioned L2 too)."""
    name = "l2 flush"
    data: dict[str, Any] = {"l2_bytes": l2, "flush_bytes": flush, "warm_read_us": warm, "cold_read_us": cold}
    head = f"flush buffer {_fmt_bytes(flush)} = {flush / l2:.1f}x the L2 ({_fmt_bytes(l2)})"
    detail = f"{head}; a read of {_fmt_bytes(l2 // 4)} takes {cold:.1f} us after a flush, {warm:.1f} us warm ({cold / warm:.2f}x)"
    if flush < 2 * l2:
        return CheckResult(
            name, "warn", detail + "; under 2x the L2, some lines may survive", fix="use the default flush size (twice the L2)", data=data
        )
    if cold < 1.05 * warm:
        return CheckResult(
            name,
            "warn",
            detail + ": the flush did not make it slower",
            fix="the reported L2 size may be wrong, or this GPU keeps data elsewhere; compare with the datasheet",
            data=data,
        )
    return CheckResult(name, "ok", detail, data=data)


# ---------------------------------------------------------------- repeatability


def check_repeatability(dev: torch.device, platform: PlatformDescriptor | None, timer: CudaTimer | None = None) -> CheckResult:
    """Small GEMMs (a few us, where launch latency and host jitter are as long as the kernel) timed
    REPEATS times each, interleaved: each point's medians must agree."""
    name = "small-kernel repeatability"
    if dev.type != "cuda":
        return _skip(name, "CPU device: the CPU timer's agreement is checked against torch.utils.benchmark")
    timer = timer or CudaTimer(dev)
    dtype = _cuda_gemm_dtype(platform)
    with torch.cuda.device(dev), torch.inference_mode():
        kernels = [
            (f"{_gemm_label(m, n, k)} {dtype}", build_kernel(Op.gemm, dtype, {"m": m, "n": n, "k": k}, dev).fn) for m, n, k in SMALL_GEMMS
        ]
        return judge_repeatability(name, repeat_medians(timer, kernels))


def repeat_medians(timer: Timer, kernels: Sequence[tuple[str, Callable[[], object]]], repeats: int = REPEATS) -> dict[str, list[float]]:
    """Each kernel's median from `repeats` separate timings, interleaved (kernel 1, 2, ..., 1, 2, ...)."""
    out: dict[str, list[float]] = {label: [] for label, _ in kernels}
    for _ in range(repeats):
        for label, fn in kernels:
            out[label].append(timer.time(fn, CUDA_TIMING).median_us)
    return out


def judge_repeatability(name: str, medians: dict[str, list[float]]) -> CheckResult:
    """ok when every kernel's medians lie within REPEAT_OK of their smallest, fail beyond REPEAT_FAIL."""
    spreads = {label: max(ms) / min(ms) - 1 for label, ms in medians.items()}
    worst = max(spreads, key=spreads.__getitem__)
    detail = "; ".join(f"{label}: {', '.join(f'{m:.2f}' for m in medians[label])} us" for label in medians)
    data = {"medians_us": medians, "spread": spreads}
    head = f"worst {worst}: medians {spreads[worst]:.1%} apart ({detail})"
    if spreads[worst] <= REPEAT_OK:
        return CheckResult(name, "ok", head, data=data)
    fix = (
        "the same kernel timed again gives another figure: small kernels' points would show cliffs that are not there; "
        "check for other processes on the GPU and for clock changes (nvml clocks)"
    )
    return CheckResult(name, "fail" if spreads[worst] > REPEAT_FAIL else "warn", head, fix=fix, data=data)


# ---------------------------------------------------------------- SDPA


def _sdpa_backends(dev: torch.device) -> dict[str, Any]:
    from torch.nn.attention import SDPBackend

    names = ["flash", "efficient", "cudnn", "math"] if dev.type == "cuda" else ["flash", "math"]
    members = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION", "math": "MATH"}
    return {n: getattr(SDPBackend, members[n]) for n in names if hasattr(SDPBackend, members[n])}


def _runs_with(fn: Callable[[], object], backend: Any, dev: torch.device) -> str | None:
    """None if fn runs under only this SDPA backend, else why not (torch's first warning, or the error)."""
    from torch.nn.attention import sdpa_kernel

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with sdpa_kernel([backend]), torch.inference_mode():
                fn()
                _sync(dev)
        except Exception as err:  # noqa: BLE001 - "no available kernel", or a backend's own refusal
            reason = next((str(w.message) for w in caught), f"{type(err).__name__}: {err}")
            return reason.strip().splitlines()[0][:200]
    return None


def check_sdpa(dev: torch.device, platform: PlatformDescriptor | None, head_dims: Sequence[int] = SDPA_HEAD_DIMS) -> CheckResult:
    """Per head_dim: which SDPA backends run (causal prefill, the platform's fast dtype) and which one dispatch picks."""
    name = "sdpa backends"
    dtype = (
        platform.fast_dtype.value
        if platform is not None and platform.fast_dtype is not None
        else ("float16" if dev.type == "cuda" else "float32")
    )
    backends = _sdpa_backends(dev)
    per: dict[int, dict[str, Any]] = {}
    for hd in head_dims:
        try:
            kernel = build_kernel(Op.sdpa, dtype, {**SDPA_SHAPE, "head_dim": hd}, dev)
        except (RuntimeError, ValueError) as err:
            per[hd] = {"chosen": None, "runs": [], "why_not": {"all": f"{type(err).__name__}: {err}"[:200]}}
            continue
        why_not = {b: _runs_with(kernel.fn, backend, dev) for b, backend in backends.items()}
        per[hd] = {
            "chosen": kernel.backend,
            "runs": [b for b, why in why_not.items() if why is None],
            "why_not": {b: why for b, why in why_not.items() if why is not None},
        }
        del kernel
    parts = []
    for hd, info in per.items():
        shown = [b + ("*" if b == info["chosen"] else "") for b in info["runs"]]
        parts.append(f"{hd}: {'/'.join(shown) or 'none'}")
    detail = f"{dtype}, head_dim: {', '.join(parts)} (* = what dispatch picks)"
    data = {"dtype": dtype, "head_dims": {str(hd): info for hd, info in per.items()}}
    broken = [hd for hd, info in per.items() if not info["runs"]]
    if broken:
        return CheckResult(
            name,
            "fail",
            f"{detail}; no backend runs at head_dim {', '.join(map(str, broken))}",
            fix="SDPA cannot run here: check the torch install (and GPU memory); see --json for torch's reasons",
            data=data,
        )
    if dev.type == "cuda":
        math_only = [hd for hd in (64, 128) if hd in per and per[hd]["chosen"] == "math"]
        if math_only:
            return CheckResult(
                name,
                "warn",
                f"{detail}; only the math fallback runs at head_dim {', '.join(map(str, math_only))}",
                fix="install a torch build with flash / memory-efficient attention for this GPU: curves measured now "
                "are of the math fallback, which production inference would not run",
                data=data,
            )
    return CheckResult(name, "ok", detail, data=data)


# ---------------------------------------------------------------- all of them


CHECKS = (
    "device",
    "cuda stack",
    "nvml clocks",
    "timer vs cuda events",
    "timer vs triton do_bench",
    "timer vs torch.utils.benchmark",
    "small-kernel repeatability",
    "l2 flush",
    "sdpa backends",
)


def run_selftest(device: str | torch.device = "cpu", on_check: Callable[[str], None] | None = None) -> list[CheckResult]:
    """Every check, in CHECKS order, on one device. A check that raises is reported as failed
    (with the error), never lost; the thread count is restored afterwards."""
    dev = parse_device(device)  # ValueError for a device the agent does not support
    threads = torch.get_num_threads()
    results: list[CheckResult] = []
    try:
        if on_check:
            on_check("device")
        first, platform = _guarded("device", lambda: check_device(dev))
        results.append(first)
        if platform is None:
            why = f"needs a working {dev} (see the device check)"
            return results + [_skip(n, why) for n in CHECKS[1:]]
        timers: dict[str, CudaTimer] = {}

        def cuda_timer() -> CudaTimer | None:
            if dev.type != "cuda":
                return None
            if "t" not in timers:
                timers["t"] = CudaTimer(dev)
            return timers["t"]

        dtype = _cuda_gemm_dtype(platform)
        steps: list[tuple[str, Callable[[], CheckResult]]] = [
            ("cuda stack", lambda: check_cuda_stack(dev, platform)),
            ("nvml clocks", lambda: check_nvml(dev, dtype)),
            ("timer vs cuda events", lambda: check_cuda_timer(dev, platform, cuda_timer())),
            ("timer vs triton do_bench", lambda: check_triton_timer(dev, platform, cuda_timer())),
            ("timer vs torch.utils.benchmark", lambda: check_cpu_timer(dev)),
            ("small-kernel repeatability", lambda: check_repeatability(dev, platform, cuda_timer())),
            ("l2 flush", lambda: check_l2_flush(dev, cuda_timer())),
            ("sdpa backends", lambda: check_sdpa(dev, platform)),
        ]
        for name, step in steps:
            if on_check:
                on_check(name)
            results.append(_guarded(name, step))
        return results
    finally:
        torch.set_num_threads(threads)


def _guarded(name: str, step: Callable[[], Any]) -> Any:
    try:
        return step()
    except Exception as err:  # noqa: BLE001 - one broken check must not hide the others
        result = CheckResult(
            name,
            "fail",
            f"the check itself failed: {type(err).__name__}: {str(err)[:300]}",
            fix="report this output with the agent version; the device or its stack is not in the state the agent expects",
        )
        return (result, None) if name == "device" else result


def exit_code(results: Sequence[CheckResult]) -> int:
    """1 when any check failed, else 0 (warnings and skips do not fail a box)."""
    return 1 if any(r.status == "fail" for r in results) else 0


__all__ = [
    "BAND",
    "CHECKS",
    "GROSS",
    "Agreement",
    "CheckResult",
    "check_cpu_timer",
    "check_cuda_stack",
    "check_cuda_timer",
    "check_device",
    "check_l2_flush",
    "check_repeatability",
    "check_nvml",
    "check_sdpa",
    "check_triton_timer",
    "classify",
    "compare",
    "cpu_reference_us",
    "decode_throttle",
    "exit_code",
    "judge_agreement",
    "judge_l2_flush",
    "judge_repeatability",
    "l2_read_times",
    "repeat_medians",
    "judge_nvml",
    "run_selftest",
]
