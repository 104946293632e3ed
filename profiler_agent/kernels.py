"""Runnable kernels for each op at one shape: inputs allocated once, a closure to time.

The layouts are the ones a compressed model actually runs: weights are
nn.Linear-style (out_features x in_features) and applied with F.linear, SDPA
is causal prefill attention on (b, h, s, head_dim) tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from gac.contracts.measurements import Dtype, Op, op_flops, validate_shape

TORCH_DTYPES: dict[Dtype, torch.dtype] = {
    Dtype.float16: torch.float16,
    Dtype.bfloat16: torch.bfloat16,
    Dtype.float32: torch.float32,
}
# Every op is built for every dtype; whether a device runs it fast is what we measure.
SUPPORTED_DTYPES: dict[Op, tuple[Dtype, ...]] = {op: tuple(Dtype) for op in Op}

# SDPBackend's integer values (torch/include/ATen/SDPBackend.h) -> names we store.
_SDPA_BACKENDS = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn", 4: "overrideable"}


@dataclass
class Kernel:
    """One op at one shape on one device, ready to time: call fn()."""

    op: Op
    dtype: Dtype
    shape: dict[str, int]
    device: torch.device
    fn: Callable[[], torch.Tensor]
    kernel: str  # what the closure calls, for the record
    backend: str | None = None  # implementation chosen by dispatch (SDPA)
    flops: int = 0


def _randn(*size: int, dtype: torch.dtype, device: torch.device, gen: torch.Generator, scale: float = 1.0) -> torch.Tensor:
    # Drawn in float32 then cast: some dtypes lack a randn kernel on some devices.
    t = torch.randn(*size, generator=gen, dtype=torch.float32, device="cpu") * scale
    return t.to(device=device, dtype=dtype)


def sdpa_backend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool) -> str | None:
    """Which SDPA implementation dispatch picks for these inputs (the one that runs).

    torch._fused_sdp_choice is the same selection function F.scaled_dot_product_attention
    calls, under the current sdpa_kernel / enable_*_sdp settings.
    """
    choose = getattr(torch, "_fused_sdp_choice", None)
    if choose is None:
        return None
    try:
        return _SDPA_BACKENDS.get(int(choose(q, k, v, None, 0.0, is_causal)), "unknown")
    except RuntimeError:
        return None


def build_kernel(op: Op | str, dtype: Dtype | str, shape: dict[str, int], device: torch.device | str = "cpu", seed: int = 0) -> Kernel:
    """Allocate the inputs for one point and return the closure that runs it."""
    op, dtype = Op(op), Dtype(dtype)
    shape = validate_shape(op, shape)
    dev = torch.device(device)
    dt = TORCH_DTYPES[dtype]
    gen = torch.Generator(device="cpu").manual_seed(seed)

    def r(*size: int, fan_in: int = 1) -> torch.Tensor:
        return _randn(*size, dtype=dt, device=dev, gen=gen, scale=fan_in**-0.5)

    if op is Op.gemm:
        m, n, k = shape["m"], shape["n"], shape["k"]
        x, w = r(m, k), r(n, k, fan_in=k)
        return Kernel(op, dtype, shape, dev, lambda: F.linear(x, w), "F.linear(x[m,k], W[n,k])", flops=op_flops(op, shape))
    if op is Op.gemv:
        n, k = shape["n"], shape["k"]
        x, w = r(1, k), r(n, k, fan_in=k)
        return Kernel(op, dtype, shape, dev, lambda: F.linear(x, w), "F.linear(x[1,k], W[n,k])", flops=op_flops(op, shape))
    if op is Op.sdpa:
        b, h, s, d = shape["b"], shape["h"], shape["s"], shape["head_dim"]
        q, kk, v = r(b, h, s, d), r(b, h, s, d), r(b, h, s, d)
        backend = sdpa_backend(q, kk, v, True)
        return Kernel(
            op, dtype, shape, dev,
            lambda: F.scaled_dot_product_attention(q, kk, v, is_causal=True),
            "F.scaled_dot_product_attention(causal)",
            backend=backend,
            flops=op_flops(op, shape),
        )
    if op is Op.lowrank:
        m, fin, rank, fout = shape["m"], shape["in_features"], shape["rank"], shape["out_features"]
        x, a, bm = r(m, fin), r(rank, fin, fan_in=fin), r(fout, rank, fan_in=rank)
        return Kernel(
            op, dtype, shape, dev,
            lambda: F.linear(F.linear(x, a), bm),
            "F.linear(F.linear(x[m,in], A[rank,in]), B[out,rank])",
            flops=op_flops(op, shape),
        )
    if op is Op.mlp:
        m, hid, width = shape["m"], shape["hidden"], shape["width"]
        x = r(m, hid)
        gate, up, down = r(width, hid, fan_in=hid), r(width, hid, fan_in=hid), r(hid, width, fan_in=width)
        return Kernel(
            op, dtype, shape, dev,
            lambda: F.linear(F.silu(F.linear(x, gate)) * F.linear(x, up), down),
            "down(silu(gate(x)) * up(x))",
            flops=op_flops(op, shape),
        )
    raise ValueError(f"no kernel for op {op!r}")  # pragma: no cover - Op is closed


__all__ = ["SUPPORTED_DTYPES", "TORCH_DTYPES", "Kernel", "build_kernel", "sdpa_backend"]
