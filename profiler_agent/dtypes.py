"""Which low-precision dtypes a platform runs natively, and which dtype is the fast one.

bfloat16 and float16 GEMMs are fast only where the hardware has instructions for
them (x86 AVX512-BF16 / AMX, AVX512-FP16; Arm BF16 / FP16 arithmetic; CUDA tensor
cores). Elsewhere libraries emulate them through float32, often several times
slower than float32 itself, and the cliffs GAC measures would be an emulator's.
So the fast dtype is detected, never assumed:

- CPU: the ISA flags say whether native instructions exist, and one short GEMM
  per dtype confirms that the library uses them (emulated is 15-141x float32's
  time, native 0.2-1.7x: under EMULATED_RATIO counts as native). Without readable
  flags the measurement alone decides (at most NATIVE_MAX_RATIO). The fast dtype
  is the preferred native one unless another, or float32, is clearly faster here:
  a race within CLEARLY_FASTER would flip from run to run with the machine's load.
- CUDA: the compute capability decides (fp16 tensor cores from sm_70, bf16 from
  sm_80); nothing is timed there.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable

import torch

from gac.contracts.measurements import PlatformDescriptor

LOW_PRECISION = ("bfloat16", "float16")  # in order of preference when both are native
FALLBACK_DTYPE = "bfloat16"  # what the tools used before platforms said; used when a platform does not say
NATIVE_MAX_RATIO = 1.5  # without readable flags: a native dtype's GEMM takes at most this many times float32's
EMULATED_RATIO = 4.0  # with the instructions: only a GEMM this much slower than float32's says the library emulates it
CLEARLY_FASTER = 1.25  # the preferred dtype gives way only to one at least this much faster

# Flags that give a dtype native arithmetic: x86 /proc/cpuinfo "flags", Arm "Features".
NATIVE_FLAGS = {
    "bfloat16": ("avx512_bf16", "amx_bf16", "bf16"),
    "float16": ("avx512_fp16", "amx_fp16", "asimdhp", "fphp"),
}

PROBE_SHAPE = (256, 512, 512)  # m, k, n: big enough that the arithmetic, not call overhead, dominates
PROBE_MS = 5.0  # time each dtype for at least this long ...
PROBE_MIN_CALLS = 2  # ... and at least this many calls (an emulated call alone can take 100 ms)


def _probe(dtypes: list[torch.dtype]) -> dict[torch.dtype, float]:
    """Fastest time (s) of one probe GEMM in each dtype on the CPU. The dtypes take turns, a call
    each, so load that comes and goes (a busy sibling hyperthread, another process) slows them alike
    rather than whichever was being timed then; the minimum shrugs off preemption. A dtype with no
    kernel at all is left out: certainly not native."""
    m, k, n = PROBE_SHAPE
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen)
    inputs, best, spent, calls = {}, {}, dict.fromkeys(dtypes, 0.0), 0
    for dt in dtypes:
        try:
            torch.matmul(x.to(dt), w.to(dt))
        except RuntimeError:
            continue
        inputs[dt], best[dt] = (x.to(dt), w.to(dt)), float("inf")
    while calls < PROBE_MIN_CALLS or min(spent[dt] for dt in inputs) < PROBE_MS / 1e3:
        for dt, (a, b) in inputs.items():
            t0 = time.perf_counter()
            torch.matmul(a, b)
            took = time.perf_counter() - t0
            best[dt], spent[dt] = min(best[dt], took), spent[dt] + took
        calls += 1
    return best


@functools.cache
def _measured_ratios() -> tuple[tuple[str, float], ...]:
    # Cached per process: the probe costs about half a second where the dtypes are emulated.
    # One thread: whether a dtype has native instructions shows in one core's time, and a
    # multi-threaded GEMM on a shared machine stalls at its barriers (ratios jumped 7x-60x).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        best = _probe([torch.float32, *(getattr(torch, name) for name in LOW_PRECISION)])
    finally:
        torch.set_num_threads(threads)
    base = best.pop(torch.float32)
    return (("float32", 1.0), *((str(dt).removeprefix("torch."), round(t / base, 2)) for dt, t in best.items()))


def measure_cpu_dtype_speed() -> dict[str, float]:
    """GEMM time of each dtype relative to float32 (1.0) on this CPU, one thread."""
    return dict(_measured_ratios())


def native_cpu_dtypes(flags: Iterable[str] | None, speed: dict[str, float]) -> list[str]:
    """Low-precision dtypes native on a CPU: its flags offer them and the measurement confirms it.

    flags None means they could not be read: then the measurement alone decides."""
    have = set(flags) if flags is not None else None
    native = []
    for name in LOW_PRECISION:
        ratio = speed.get(name)
        if ratio is None:
            continue
        if have is None:
            confirmed = ratio <= NATIVE_MAX_RATIO
        else:
            confirmed = any(f in have for f in NATIVE_FLAGS[name]) and ratio < EMULATED_RATIO
        if confirmed:
            native.append(name)
    return native


def native_cuda_dtypes(compute_capability: str) -> list[str]:
    """Tensor-core dtypes by compute capability: float16 from sm_70 (Volta), bfloat16 from sm_80 (Ampere)."""
    major = int(compute_capability.split(".")[0])
    return [name for name, since in (("bfloat16", 8), ("float16", 7)) if major >= since]


def fast_dtype(native: list[str], speed: dict[str, float] | None = None) -> str:
    """The preferred native low-precision dtype, else float32; with timings (a CPU's: time over
    float32's), the first of them, in that order, that no other is CLEARLY_FASTER than."""
    candidates = [d for d in LOW_PRECISION if d in native] + ["float32"]
    timed = {d: speed[d] for d in candidates if speed and d in speed}
    for d in candidates:
        if d in timed and not any(other * CLEARLY_FASTER < timed[d] for other in timed.values()):
            return d
    return candidates[0]


def cpu_flags(info: dict[str, str]) -> list[str] | None:
    """The CPU's feature flags from a /proc/cpuinfo block (None when it has none)."""
    text = info.get("flags") or info.get("features")
    return text.split() if text else None


def cpu_dtype_fields(info: dict[str, str], measure: bool = True) -> dict:
    """native_dtypes, fast_dtype, dtype_speed for this CPU (all None when not measured: flags alone can miss a slow library)."""
    if not measure:
        return {}
    speed = measure_cpu_dtype_speed()
    native = native_cpu_dtypes(cpu_flags(info), speed)
    return {"native_dtypes": native, "fast_dtype": fast_dtype(native, speed), "dtype_speed": speed}


def cuda_dtype_fields(compute_capability: str | None, is_rocm: bool) -> dict:
    """From the compute capability only. ROCm's numbers are not CUDA's: left unknown there."""
    if is_rocm or not compute_capability:
        return {}
    native = native_cuda_dtypes(compute_capability)
    return {"native_dtypes": native, "fast_dtype": fast_dtype(native)}


# ---------------------------------------------------------------- saying which dtype and why


def _where(p: PlatformDescriptor) -> str:
    if p.device_kind == "cpu":
        return "this CPU"
    return f"sm_{p.compute_capability.replace('.', '')}" if p.compute_capability else "this GPU"


def _speed(p: PlatformDescriptor) -> dict[str, float]:
    return {str(k): v for k, v in (p.dtype_speed or {}).items()}


def _not_native(p: PlatformDescriptor, dtype: str) -> str:
    """'bfloat16 is emulated on this CPU (4.1x slower than float32)'; the ratio only when measured."""
    ratio = _speed(p).get(dtype)
    how = "emulated" if p.device_kind == "cpu" else "not native"  # a GPU without tensor cores still has the dtype
    return f"{dtype} is {how} on {_where(p)}" + (f" ({ratio:.1f}x slower than float32)" if ratio else "")


def _why_fast(p: PlatformDescriptor) -> str:
    fast = str(p.fast_dtype)
    native = [str(d) for d in p.native_dtypes or []]
    # Native, but passed over as clearly slower here: 'bfloat16 1.54x'.
    passed = ", ".join(f"{d} {_speed(p)[d]:.2f}x" for d in native if d != fast and d in _speed(p))
    if fast != "float32":
        ratio = _speed(p).get(fast)
        if not ratio:
            return f"{fast} is native on {_where(p)}"
        slower = f"; {passed}, native too, is slower" if passed else ""
        return f"{fast} is native on {_where(p)} ({ratio:.2f}x float32's time{slower})"
    if passed:
        return f"native {passed} float32's time: no faster than float32 here"
    slow = [d for d in LOW_PRECISION if d not in native]
    if not slow:
        return "no faster dtype found"
    why = _not_native(p, slow[0])
    for d in slow[1:]:
        ratio = _speed(p).get(d)
        why += f"; {d} too" + (f" ({ratio:.1f}x)" if ratio else "")
    return why


def choose_dtype(p: PlatformDescriptor, override: str | None = None, by: str = "with --dtype") -> tuple[str, str]:
    """(dtype, one line saying which and why): the override if given, else the platform's fast dtype.

    by: who chose the override, for the line ("with --dtype", "by plan paper")."""
    if override:
        dtype = str(override)
        fast = str(p.fast_dtype) if p.fast_dtype is not None else None
        why = f"chosen {by}"
        if fast is not None and dtype == fast:
            why += f", the fast dtype here: {_why_fast(p)}"
        elif fast is not None:
            if dtype != "float32" and dtype not in [str(d) for d in p.native_dtypes or []]:
                why += f", though {_not_native(p, dtype)}"
            why += f"; the fast dtype here is {fast}"
        return dtype, f"dtype {dtype}: {why}"
    if p.fast_dtype is None:
        return FALLBACK_DTYPE, f"dtype {FALLBACK_DTYPE}: the platform's fast dtype is unknown (not detected), so the default"
    return str(p.fast_dtype), f"dtype {p.fast_dtype}: {_why_fast(p)}"


__all__ = [
    "FALLBACK_DTYPE",
    "LOW_PRECISION",
    "CLEARLY_FASTER",
    "EMULATED_RATIO",
    "NATIVE_MAX_RATIO",
    "choose_dtype",
    "cpu_dtype_fields",
    "cuda_dtype_fields",
    "fast_dtype",
    "measure_cpu_dtype_speed",
    "native_cpu_dtypes",
    "native_cuda_dtypes",
]
