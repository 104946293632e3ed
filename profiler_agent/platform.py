"""Work out exactly which software/hardware stack this agent measures on.

Every field that can change which kernel runs goes into the PlatformDescriptor;
its fingerprint() is the platform's identity. Fields that cannot be read are
left unset (None), never guessed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import platform as _platform
import re
import shutil
import subprocess
from importlib import metadata
from pathlib import Path

import torch

from gac.agent.dtypes import cpu_dtype_fields, cuda_dtype_fields
from gac.agent.timing import COLD_WEIGHTS, QUEUED_L2_FLUSH
from gac.contracts.measurements import PlatformDescriptor

# CPU feature flags that change which GEMM/attention kernels a CPU library picks.
_X86_FLAGS = (
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "amx_fp16",
)
_ARM_FLAGS = ("asimd", "asimdhp", "fphp", "sve", "sve2", "bf16", "i8mm", "sme")


def parse_device(device: str | torch.device | None) -> torch.device:
    """'cpu', 'cuda', 'cuda:1' -> torch.device; CUDA without an index means device 0. 'auto': the
    first GPU torch sees, else the CPU (a GPU box in a fleet profiles its GPU unless told otherwise)."""
    if device == "auto":
        return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    if isinstance(device, str) and not device.strip():  # an unset shell variable, as in --device "$DEVICE"
        raise ValueError("empty device name (use cpu, cuda:N or auto)")
    try:
        dev = torch.device(device or "cpu")
    except RuntimeError:  # torch's message lists every device type it knows, most of which GAC does not time on
        raise ValueError(f"unknown device {str(device)!r} (use cpu, cuda:N or auto)") from None
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", 0)
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"unsupported device {str(dev)!r} (use cpu, cuda:N or auto)")
    return dev


def present_device(device: str | torch.device | None) -> torch.device:
    """parse_device, and the device must be on this machine: 'cuda:1' where torch sees one GPU is named."""
    dev = parse_device(device)
    if dev.type == "cuda" and (dev.index or 0) >= (seen := torch.cuda.device_count()):
        raise ValueError(f"{dev} is not here: torch {torch.__version__} sees {seen} GPU{'s' if seen != 1 else ''} on this machine")
    return dev


def detect_platform(device: str | torch.device | None = "cpu", dtypes: bool = True) -> PlatformDescriptor:
    """Describe the platform the agent will time kernels on.

    dtypes: also find its native and fast dtypes (on a CPU this times a short GEMM
    per dtype once per process); False leaves them unset (the identity is the same).
    """
    dev = parse_device(device)
    if dev.type == "cuda":
        return _detect_cuda(dev, dtypes)
    return _detect_cpu(dtypes)


# ---------------------------------------------------------------- CPU


def _cpuinfo() -> dict[str, str]:
    """First processor block of /proc/cpuinfo (empty off Linux)."""
    out: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        if not line.strip():
            if out:
                break
            continue
        key, _, value = line.partition(":")
        out.setdefault(key.strip().lower(), value.strip())
    return out


def _cpu_isa(info: dict[str, str]) -> str | None:
    flags = set((info.get("flags") or info.get("features") or "").split())
    wanted = _X86_FLAGS if "flags" in info else _ARM_FLAGS
    present = [f for f in wanted if f in flags]
    try:  # what ATen's own dispatch uses (DEFAULT / AVX2 / AVX512 / ...)
        present.insert(0, f"aten:{torch.backends.cpu.get_cpu_capability().lower()}")
    except Exception:  # noqa: BLE001 - older torch
        pass
    return ",".join(present) or None


def _cpu_l2_bytes() -> int | None:
    path = Path("/sys/devices/system/cpu/cpu0/cache")
    for idx in sorted(path.glob("index*")):
        try:
            if (idx / "level").read_text().strip() == "2":
                return _parse_size((idx / "size").read_text().strip())
        except OSError:
            continue
    return None


def _parse_size(text: str) -> int | None:
    m = re.fullmatch(r"(\d+)\s*([KMG]?)B?", text, re.IGNORECASE)
    if not m:
        return None
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2).upper()]


def _library_versions() -> tuple[str | None, str | None]:
    """(MKL, oneDNN) versions from torch's build description."""
    try:
        cfg = torch.__config__.show()
    except Exception:  # noqa: BLE001
        return None, None
    mkl = re.search(r"Math Kernel Library Version ([\w.]+)", cfg)
    dnn = re.search(r"(?:MKL-DNN|oneDNN) v([\d.]+)", cfg)
    return (mkl.group(1) if mkl else None), (dnn.group(1) if dnn else None)


def _detect_cpu(dtypes: bool = True) -> PlatformDescriptor:
    info = _cpuinfo()
    name = info.get("model name") or info.get("hardware") or _platform.processor() or _platform.machine() or "cpu"
    mkl, dnn = _library_versions()
    return PlatformDescriptor(
        device_kind="cpu",
        device_name=name[:200],
        isa=_cpu_isa(info),
        cores=os.cpu_count(),
        threads=torch.get_num_threads(),
        l2_bytes=_cpu_l2_bytes(),
        torch_version=torch.__version__,
        mkl_version=mkl if torch.backends.mkl.is_available() else None,
        onednn_version=dnn if torch.backends.mkldnn.is_available() else None,
        timing=COLD_WEIGHTS,
        **cpu_dtype_fields(info, measure=dtypes),
    )


# ---------------------------------------------------------------- CUDA


def _dist_version(*names: str) -> str | None:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _driver_version() -> str | None:
    """NVML (nvidia-ml-py) first, then nvidia-smi, else unknown."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else str(v)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - not installed or no driver
        pass
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = (
                subprocess.run(
                    [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                    capture_output=True,
                    text=True,
                    timeout=10,
                    check=True,
                )
                .stdout.strip()
                .splitlines()
            )
            if out:
                return out[0].strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return None


def decode_cublas_version(v: int) -> str:
    """cublasLtGetVersion's integer: major*10000+minor*100+patch since CUDA 12
    (six digits), major*1000+minor*100+patch before (five digits)."""
    if v >= 100_000:
        return f"{v // 10_000}.{v // 100 % 100}.{v % 100}"
    return f"{v // 1_000}.{v // 100 % 10}.{v % 100}"


def _cublaslt_candidates() -> list[str]:
    paths: list[str] = []
    # The library torch itself loaded, when it came from the nvidia-cublas wheel.
    try:
        import nvidia.cublas

        for root in getattr(nvidia.cublas, "__path__", []):
            paths += sorted(glob.glob(os.path.join(root, "lib", "libcublasLt.so*")))
    except ImportError:
        pass
    found = ctypes.util.find_library("cublasLt")
    if found:
        paths.append(found)
    paths.append("libcublasLt.so")
    return paths


def cublas_version() -> str | None:
    """cuBLAS version: cublasLtGetVersion() via ctypes, else the nvidia-cublas wheel's version."""
    for path in _cublaslt_candidates():
        try:
            lib = ctypes.CDLL(path)
            fn = lib.cublasLtGetVersion
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_size_t
        fn.argtypes = []
        return decode_cublas_version(int(fn()))
    return _dist_version("nvidia-cublas-cu13", "nvidia-cublas-cu12", "nvidia-cublas-cu11", "nvidia-cublas")


def _tf32_allowed() -> bool | None:
    matmul = torch.backends.cuda.matmul
    precision = getattr(matmul, "fp32_precision", None)  # newer torch: "ieee" | "tf32" | "none"
    if isinstance(precision, str) and precision != "none":
        return precision == "tf32"
    return bool(matmul.allow_tf32)


def _detect_cuda(dev: torch.device, dtypes: bool = True) -> PlatformDescriptor:
    if not torch.cuda.is_available():
        raise RuntimeError(f"device {dev} requested but torch.cuda is not available (torch {torch.__version__})")
    props = torch.cuda.get_device_properties(dev)
    is_rocm = getattr(torch.version, "hip", None) is not None
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    capability = f"{props.major}.{props.minor}"
    return PlatformDescriptor(
        device_kind="rocm" if is_rocm else "cuda",
        device_name=props.name[:200],
        compute_capability=capability,
        sm_count=props.multi_processor_count,
        memory_bytes=props.total_memory,
        l2_bytes=getattr(props, "L2_cache_size", None) or None,
        driver_version=_driver_version(),
        cuda_runtime=torch.version.hip if is_rocm else torch.version.cuda,
        cublas_version=None if is_rocm else cublas_version(),
        cudnn_version=str(cudnn) if cudnn else None,
        torch_version=torch.__version__,
        triton_version=_dist_version("triton", "pytorch-triton", "pytorch-triton-rocm"),
        flash_attn_version=_dist_version("flash-attn", "flash_attn"),
        tf32_allowed=_tf32_allowed(),
        timing=QUEUED_L2_FLUSH,
        **(cuda_dtype_fields(capability, is_rocm) if dtypes else {}),
    )


__all__ = ["cublas_version", "decode_cublas_version", "detect_platform", "parse_device", "present_device"]
