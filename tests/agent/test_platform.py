"""Platform detection on this CPU: complete, stable across processes, sensitive to versions; its dtypes."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import gac.agent.dtypes as dtypes_mod
from gac.agent.dtypes import EMULATED_RATIO, choose_dtype, cuda_dtype_fields, fast_dtype, native_cpu_dtypes
from gac.agent.platform import decode_cublas_version, detect_platform, parse_device
from gac.contracts.measurements import PlatformDescriptor
from tests import factories


def test_cpu_platform_fields():
    p = detect_platform("cpu")
    assert p.device_kind == "cpu"
    assert p.device_name
    assert p.torch_version == torch.__version__
    assert p.threads == torch.get_num_threads()
    assert p.cores and p.cores >= 1
    assert p.isa and p.isa.startswith("aten:")
    assert p.compute_capability is None and p.cublas_version is None  # nothing CUDA is invented on a CPU


def test_fingerprint_is_stable_across_runs():
    here = detect_platform("cpu").fingerprint()
    assert detect_platform("cpu").fingerprint() == here
    code = (
        f"import torch; torch.set_num_threads({torch.get_num_threads()});"
        "from gac.agent.platform import detect_platform; print(detect_platform('cpu').fingerprint())"
    )
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert other == here


@pytest.mark.parametrize(
    "change",
    [
        {"torch_version": "0.0.1"},
        {"onednn_version": "9.9.9"},
        {"mkl_version": "1999.1"},
        {"threads": 77},
        {"cublas_version": "12.2.5"},
        {"tf32_allowed": True},
        {"timing": None},
    ],
)
def test_fingerprint_changes_with_any_version_field(change):
    p = detect_platform("cpu")
    assert p.model_copy(update=change).fingerprint() != p.fingerprint()


def test_a_cpu_records_that_its_kernels_read_cold_weights():
    # Curves timed with hot weights (agents before this field) must not mix with these: another fingerprint.
    p = detect_platform("cpu", dtypes=False)
    assert p.timing == "cold-weights/256MiB" and "cold-weights" in p.label()


def test_device_parsing_and_missing_cuda():
    assert parse_device("cpu").type == "cpu"
    assert parse_device("cuda") == torch.device("cuda", 0)
    with pytest.raises(ValueError, match="unsupported device"):
        parse_device("mps")
    with pytest.raises(ValueError, match=r"^unknown device 'gpu' \(use cpu, cuda:N or auto\)$"):  # not torch's list of every device type
        parse_device("gpu")
    for empty in ("", " "):  # --device "$DEVICE" with the variable unset: named, not taken for the CPU
        with pytest.raises(ValueError, match=r"^empty device name \(use cpu, cuda:N or auto\)$"):
            parse_device(empty)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="not available"):
            detect_platform("cuda:0")


def test_auto_is_the_first_gpu_torch_sees_else_the_cpu(monkeypatch):
    """The commands' default: a GPU box in a fleet profiles its GPU without being told."""
    for sees_a_gpu, expected in ((False, torch.device("cpu")), (True, torch.device("cuda", 0))):
        monkeypatch.setattr(torch.cuda, "is_available", lambda sees=sees_a_gpu: sees)
        assert parse_device("auto") == expected


def test_device_is_the_option_else_gac_device_else_auto(monkeypatch):
    from gac.agent.cli import device_setting

    monkeypatch.setenv("GAC_DEVICE", "cuda:1")
    assert (device_setting(None), device_setting("cpu"), device_setting(None, threads=2)) == ("cuda:1", "cpu", "cuda:1")
    monkeypatch.delenv("GAC_DEVICE")
    assert device_setting(None) == "auto"
    assert device_setting(None, threads=1) == "cpu"  # --threads is a CPU's: auto does not take the GPU then
    monkeypatch.setenv("GAC_DEVICE", "gpu")
    with pytest.raises(ValueError, match=r"^GAC_DEVICE=gpu: unknown device 'gpu'"):
        device_setting(None)


def test_cublas_version_decoding():
    assert decode_cublas_version(120205) == "12.2.5"  # CUDA 12 encoding: major*10000 + minor*100 + patch
    assert decode_cublas_version(11401) == "11.4.1"  # CUDA 11 encoding: major*1000 + minor*100 + patch


# ---------------------------------------------------------------- dtypes


def _cpu_flags() -> set[str] | None:
    """This CPU's flags, read here independently of the agent."""
    try:
        for line in open("/proc/cpuinfo"):
            key, _, value = line.partition(":")
            if key.strip() in ("flags", "Features"):
                return set(value.split())
    except OSError:
        pass
    return None


def test_fingerprint_ignores_the_dtype_fields():
    # The fingerprint this descriptor had before the dtype fields existed: stored platforms must still match.
    golden = PlatformDescriptor(
        device_kind="cpu",
        device_name="Golden CPU",
        isa="aten:avx2,avx,avx2,fma,f16c",
        cores=2,
        threads=1,
        l2_bytes=524288,
        torch_version="2.13.0",
        mkl_version="2024.2",
        onednn_version="3.7.1",
    )
    old = "51596023bd2ed6a646b613ca660b74adc4d287830f8f57000b8e37ca1e58c5eb"
    assert golden.fingerprint() == old
    measured = golden.model_validate(
        golden.model_dump()
        | {"native_dtypes": [], "fast_dtype": "float32", "dtype_speed": {"float32": 1.0, "bfloat16": 41.2, "float16": 40.0}}
    )
    assert measured.fingerprint() == old
    here = detect_platform("cpu")
    assert here.fast_dtype is not None  # detected, so the comparison below is about something
    assert here.fingerprint() == detect_platform("cpu", dtypes=False).fingerprint()
    assert {here, measured}  # still hashable with a list and a dict inside


def test_this_cpu_dtypes_agree_with_its_flags_and_its_timing():
    p = detect_platform("cpu")
    speed = {str(k): v for k, v in (p.dtype_speed or {}).items()}
    native = [str(d) for d in p.native_dtypes or []]
    assert speed["float32"] == 1.0 and speed["bfloat16"] > 0  # measured, never left out on a CPU
    flags = _cpu_flags()
    for dtype, isa in (("bfloat16", ("avx512_bf16", "amx_bf16", "bf16")), ("float16", ("avx512_fp16", "amx_fp16", "asimdhp", "fphp"))):
        if flags is not None and not flags & set(isa):
            assert dtype not in native, f"{dtype} has no native instructions here ({sorted(flags & {'avx2', 'avx512f'})})"
        elif flags is not None and dtype in speed:
            assert (dtype in native) == (speed[dtype] < EMULATED_RATIO), (dtype, speed)
    # The fast dtype is never clearly slower than another candidate (the native ones and float32).
    fast = str(p.fast_dtype)
    assert fast in [*native, "float32"]
    assert all(speed[fast] <= 1.25 * speed[d] for d in [*native, "float32"]), (fast, speed)


def test_dtype_probe_leaves_the_thread_count_alone():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        dtypes_mod._measured_ratios.__wrapped__()  # uncached: runs the probe (one thread) again
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize(
    ("flags", "speed", "native"),
    [
        ({"avx2", "fma", "f16c"}, {"bfloat16": 0.5, "float16": 0.5}, []),  # no instructions: a fast timing is not enough
        ({"avx512_bf16", "amx_bf16"}, {"bfloat16": 4.1, "float16": 9.0}, []),  # instructions, but slow here: not native
        ({"amx_bf16"}, {"bfloat16": 0.3, "float16": 1.2}, ["bfloat16"]),
        ({"avx512_bf16", "avx512_fp16"}, {"bfloat16": 0.6, "float16": 1.4}, ["bfloat16", "float16"]),
        ({"avx512_bf16"}, {"bfloat16": 1.7, "float16": 30.0}, ["bfloat16"]),  # instructions, a little slower under load: still native
        (None, {"bfloat16": 1.7, "float16": 30.0}, []),  # flags unreadable: only a clearly native timing counts
        (None, {"bfloat16": 1.2, "float16": 3.0}, ["bfloat16"]),  # flags unreadable: the timing decides
        ({"amx_bf16"}, {}, []),  # not measured: not confirmed
    ],
)
def test_native_cpu_dtypes_need_the_instructions_and_the_speed(flags, speed, native):
    assert native_cpu_dtypes(flags, speed) == native


@pytest.mark.parametrize(
    ("native", "speed", "fast"),
    [
        (["bfloat16", "float16"], {"float32": 1.0, "bfloat16": 0.18, "float16": 0.5}, "bfloat16"),  # AMX
        (["bfloat16", "float16"], {"float32": 1.0, "bfloat16": 0.9, "float16": 0.8}, "bfloat16"),  # a close race: the preference
        # AVX512-BF16 and -FP16 without AMX (a Xeon VM): bfloat16 1.69-1.88x over five probes, float16 1.00-1.07x
        (["bfloat16", "float16"], {"float32": 1.0, "bfloat16": 1.69, "float16": 1.07}, "float16"),
        (["bfloat16", "float16"], {"float32": 1.0, "bfloat16": 1.88, "float16": 1.00}, "float16"),
        (["bfloat16"], {"float32": 1.0, "bfloat16": 1.6, "float16": 40.0}, "float32"),  # native, but clearly slower than float32
        (["bfloat16"], {"float32": 1.0, "bfloat16": 1.2}, "bfloat16"),
        ([], {"float32": 1.0, "bfloat16": 41.0}, "float32"),
        (["bfloat16", "float16"], None, "bfloat16"),  # a GPU: no timings, the preference
    ],
)
def test_the_fast_dtype_is_the_preferred_native_one_unless_another_is_clearly_faster(native, speed, fast):
    assert fast_dtype(native, speed) == fast


@pytest.mark.parametrize(
    ("cc", "native", "fast"),
    [
        ("6.1", [], "float32"),
        ("7.0", ["float16"], "float16"),
        ("7.5", ["float16"], "float16"),
        ("8.0", ["bfloat16", "float16"], "bfloat16"),
        ("9.0", ["bfloat16", "float16"], "bfloat16"),
    ],
)
def test_cuda_dtypes_from_compute_capability(cc, native, fast):
    assert cuda_dtype_fields(cc, is_rocm=False) == {"native_dtypes": native, "fast_dtype": fast}  # no made-up timings
    assert cuda_dtype_fields(cc, is_rocm=True) == {}  # ROCm's architecture numbers are not CUDA's: unknown


def test_the_dtype_line_says_which_and_why():
    avx2 = factories.platform(native_dtypes=[], fast_dtype="float32", dtype_speed={"float32": 1.0, "bfloat16": 4.1, "float16": 6.0})
    assert choose_dtype(avx2) == (
        "float32",
        "dtype float32: bfloat16 is emulated on this CPU (4.1x slower than float32); float16 too (6.0x)",
    )
    dtype, line = choose_dtype(avx2, "bfloat16")
    assert dtype == "bfloat16" and "chosen with --dtype, though bfloat16 is emulated on this CPU (4.1x" in line
    amx = factories.platform(native_dtypes=["bfloat16"], fast_dtype="bfloat16", dtype_speed={"float32": 1.0, "bfloat16": 0.25})
    assert choose_dtype(amx) == ("bfloat16", "dtype bfloat16: bfloat16 is native on this CPU (0.25x float32's time)")
    gpu = factories.platform(device_kind="cuda", compute_capability="7.5", native_dtypes=["float16"], fast_dtype="float16")
    assert choose_dtype(gpu)[1] == "dtype float16: float16 is native on sm_75"
    unknown = factories.platform()
    assert choose_dtype(unknown) == ("bfloat16", "dtype bfloat16: the platform's fast dtype is unknown (not detected), so the default")


def test_a_cpu_platforms_label_names_its_threads_as_its_fingerprint_does():
    """One machine profiled at 1 and at 2 threads is two platforms: their labels say which is which."""
    from tests import factories as f

    one, two, unset = (f.platform(threads=t) for t in (1, 2, None))
    assert one.fingerprint() != two.fingerprint() and one.label() != two.label()
    assert one.label() == "Test CPU / torch 2.13.0 / 1 thread" and two.label().endswith(" / 2 threads")
    assert unset.label() == "Test CPU / torch 2.13.0"  # a GPU's, or a CPU's recorded without a count
