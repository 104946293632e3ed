"""Runnable kernels for each op at one shape: inputs allocated once, a closure to time.

The layouts are the ones a compressed model actually runs: weights are
nn.Linear-style (out_features x in_features) and applied with F.linear, SDPA
is causal prefill attention on (b, h, s, head_dim) tensors.

Inside a model each weight is read once per forward, long after the caches have
filled with the rest of the model; a kernel that reuses one weight tensor call
after call times it hot in L2 instead. Given `weight_pool_bytes`, a kernel takes
its weights from copies laid side by side in a buffer of that size and uses the
next copy on each call, so every call reads its weights from beyond the caches
(the activations stay hot, as they are in a model). The CUDA timer flushes L2
before each sample instead, except when it times calls back to back (CudaTimer.chained): then
the weights rotate through a pool on the GPU too.
"""

from __future__ import annotations

import gc
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

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
    fn: Callable[[], object]  # queues the kernel (its result is not used)
    kernel: str  # what the closure calls, for the record
    backend: str | None = None  # implementation chosen by dispatch (SDPA)
    flops: int = 0
    inputs: tuple[torch.Tensor, ...] = ()  # what every call reads (activations)
    weights: list[tuple[torch.Tensor, ...]] = field(default_factory=list)  # the copies, one per call in turn


def _randn(*size: int, dtype: torch.dtype, device: torch.device, gen: torch.Generator, scale: float = 1.0) -> torch.Tensor:
    # Drawn in float32 then cast: some dtypes lack a randn kernel on some devices.
    t = torch.randn(*size, generator=gen, dtype=torch.float32, device="cpu") * scale
    return t.to(device=device, dtype=dtype)


# One buffer per (dtype, device), shared by every kernel's weight copies: a point costs no
# allocation, and the copies are read-only views. Values ~N(0, 0.02^2), a weight's usual scale.
_POOLS: dict[tuple[torch.dtype, str], torch.Tensor] = {}
_POOL_BLOCK = 1 << 20
# Views are made once, before timing (slicing on each call would add microseconds to a tens-of-
# microseconds kernel). Capped so a tiny weight does not take a second of views: 16,384 copies of
# even a 256-byte weight still cycle through 4 MiB, twice a 2 MiB L2.
MAX_WEIGHT_COPIES = 16_384
_ALIGN_BYTES = 64  # every copy starts on a cache line, as a fresh allocation does


def _pool(elements: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    key = (dtype, str(device))
    buf = _POOLS.get(key)
    if buf is None or buf.numel() < elements:
        # One random block tiled over the buffer (timing does not depend on the values), each tile
        # scaled differently: identical pages could be merged by the host (KSM) into a few physical
        # ones, and physically tagged caches would then hold the "cold" weights after all.
        gen = torch.Generator(device="cpu").manual_seed(0)
        block = _randn(_POOL_BLOCK, dtype=dtype, device=device, gen=gen, scale=0.02)
        tiles = math.ceil(elements / _POOL_BLOCK)
        buf = block.repeat(tiles, 1).mul_(torch.linspace(1.0, 2.0, tiles, device=device).to(dtype)[:, None]).view(-1)
        _POOLS[key] = buf
    return buf


class _PoolViews:
    """Disjoint views of the (dtype, device) pool, laid out one after another: a GPU point's inputs
    cost no host-side random numbers and no allocation (drawing a GEMM's inputs on the host took
    longer than timing it). The values do not matter to the timing; disjoint views keep one tensor's
    reads from warming another's lines."""

    def __init__(self, dtype: torch.dtype, device: torch.device) -> None:
        self.dtype, self.device, self.at = dtype, device, 0
        self._align = max(1, _ALIGN_BYTES // torch.empty((), dtype=dtype).element_size())

    def take(self, *size: int) -> torch.Tensor:
        n = math.prod(size)
        self.reserve(n)
        buf = _POOLS[(self.dtype, str(self.device))]
        out = buf[self.at : self.at + n].view(*size)
        self.at += math.ceil(n / self._align) * self._align
        return out

    def reserve(self, elements: int) -> None:
        """Room for this many more elements in the pool, grown at once (not by doubling, view by view)."""
        buf = _POOLS.get((self.dtype, str(self.device)))
        if buf is None or buf.numel() < self.at + elements:
            _pool(2 * (self.at + elements), self.dtype, self.device)  # views taken before keep the old buffer alive

    def copies(self, shapes: Sequence[tuple[int, int]], pool_bytes: int) -> list[tuple[torch.Tensor, ...]]:
        """Copies of one kernel's weights, as many as fill pool_bytes (at most MAX_WEIGHT_COPIES, at least
        one), each after the last: calls that take them in turn read bytes no other call read since."""
        strides, count = _copy_layout(shapes, pool_bytes, self.dtype)
        count = max(1, count)
        self.reserve(count * sum(strides))
        out = _copies_at(_POOLS[(self.dtype, str(self.device))], self.at, shapes, strides, count)
        self.at += count * sum(strides)
        return out


def release_weight_pools() -> None:
    """Free the pools (the next pooled kernel allocates its dtype's again)."""
    _POOLS.clear()


def _copy_layout(shapes: Sequence[tuple[int, int]], pool_bytes: int, dtype: torch.dtype) -> tuple[list[int], int]:
    """(the elements each weight of a copy takes, each on a cache line; how many copies fill pool_bytes,
    at most MAX_WEIGHT_COPIES)."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    align = max(1, _ALIGN_BYTES // itemsize)
    strides = [math.ceil(n * k / align) * align for n, k in shapes]
    return strides, min(MAX_WEIGHT_COPIES, pool_bytes // (sum(strides) * itemsize))


def _copies_at(
    buf: torch.Tensor, start: int, shapes: Sequence[tuple[int, int]], strides: Sequence[int], count: int
) -> list[tuple[torch.Tensor, ...]]:
    """count copies of the weights laid out from buf[start]: copy i's weight j at start + i * sum(strides)
    + sum(strides[:j]). One strided view per weight, unbound into its copies in one call: a slice per
    copy took 0.2 s for 16,384 copies, most of a small CPU point's time."""
    step, at, per_weight = sum(strides), buf.storage_offset() + start, []
    # Each new tensor counts towards the cyclic collector's next pass, which walks every live one: tens of
    # thousands of them set off pass after pass (a tiny low-rank pair's views took 2.7x as long). Views
    # make no cycles, so the collector waits until they are made.
    collecting = gc.isenabled()
    gc.disable()
    try:
        for (n, k), stride in zip(shapes, strides, strict=True):
            per_weight.append(torch.as_strided(buf, (count, n, k), (step, k, 1), at).unbind(0))
            at += stride
        return list(zip(*per_weight, strict=True))
    finally:
        if collecting:
            gc.enable()


def weight_copies(
    shapes: Sequence[tuple[int, int]], pool_bytes: int, dtype: torch.dtype, device: torch.device, gen: torch.Generator
) -> list[tuple[torch.Tensor, ...]]:
    """Copies of one kernel's weights, side by side in the shared pool, in the order the kernel uses them.

    As many copies as fill `pool_bytes`, at most MAX_WEIGHT_COPIES; the first one used is drawn from
    `gen`, so kernels timed in turn do not start on the same bytes. With fewer than two copies (pool_bytes
    0, or one copy alone fills it) a single copy is drawn afresh from `gen` instead.
    """
    strides, copies = _copy_layout(shapes, pool_bytes, dtype)
    if copies < 2:
        return [tuple(_randn(n, k, dtype=dtype, device=device, gen=gen, scale=k**-0.5) for n, k in shapes)]
    out = _copies_at(_pool(copies * sum(strides), dtype, device), 0, shapes, strides, copies)
    first = int(torch.randint(copies, (1,), generator=gen))
    return out[first:] + out[:first]


def _each_call_next(copies: list[tuple[torch.Tensor, ...]], call: Callable[..., torch.Tensor]) -> Callable[[], torch.Tensor]:
    """A closure that runs call(*weights) with the next copy of the weights each time."""
    if len(copies) == 1:
        ws = copies[0]
        return lambda: call(*ws)
    turn = itertools.cycle(copies)
    return lambda: call(*next(turn))


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


def build_kernel(
    op: Op | str,
    dtype: Dtype | str,
    shape: dict[str, int],
    device: torch.device | str = "cpu",
    seed: int = 0,
    weight_pool_bytes: int = 0,
) -> Kernel:
    """Allocate the inputs for one point and return the closure that runs it.

    weight_pool_bytes: read the weights from copies filling this many bytes, the next
    copy on each call (0: one weight tensor, hot in cache after the first call).
    """
    op, dtype = Op(op), Dtype(dtype)
    shape = validate_shape(op, shape)
    dev = torch.device(device)
    dt = TORCH_DTYPES[dtype]
    gen = torch.Generator(device="cpu").manual_seed(seed)

    views = _PoolViews(dt, dev) if dev.type != "cpu" else None

    def r(*size: int) -> torch.Tensor:
        return views.take(*size) if views is not None else _randn(*size, dtype=dt, device=dev, gen=gen)

    def weights(*shapes: tuple[int, int]) -> list[tuple[torch.Tensor, ...]]:
        if views is not None:  # a GPU timer flushes the L2 itself (one copy) unless it asks for a pool
            return views.copies(shapes, weight_pool_bytes)
        return weight_copies(shapes, weight_pool_bytes, dt, dev, gen)

    def kernel(what: str, x: torch.Tensor, ws: list[tuple[torch.Tensor, ...]], call: Callable[..., torch.Tensor]) -> Kernel:
        return Kernel(op, dtype, shape, dev, _each_call_next(ws, call), what, flops=op_flops(op, shape), inputs=(x,), weights=ws)

    if op is Op.gemm:
        m, n, k = shape["m"], shape["n"], shape["k"]
        x = r(m, k)
        return kernel("F.linear(x[m,k], W[n,k])", x, weights((n, k)), lambda w: F.linear(x, w))
    if op is Op.gemv:
        n, k = shape["n"], shape["k"]
        x = r(1, k)
        return kernel("F.linear(x[1,k], W[n,k])", x, weights((n, k)), lambda w: F.linear(x, w))
    if op is Op.sdpa:
        b, h, s, d = shape["b"], shape["h"], shape["s"], shape["head_dim"]
        q, kk, v = r(b, h, s, d), r(b, h, s, d), r(b, h, s, d)
        backend = sdpa_backend(q, kk, v, True)
        return Kernel(
            op,
            dtype,
            shape,
            dev,
            lambda: F.scaled_dot_product_attention(q, kk, v, is_causal=True),
            "F.scaled_dot_product_attention(causal)",
            backend=backend,
            flops=op_flops(op, shape),
            inputs=(q, kk, v),
        )
    if op is Op.lowrank:
        m, fin, rank, fout = shape["m"], shape["in_features"], shape["rank"], shape["out_features"]
        x = r(m, fin)
        return kernel(
            "F.linear(F.linear(x[m,in], A[rank,in]), B[out,rank])",
            x,
            weights((rank, fin), (fout, rank)),
            lambda a, b: F.linear(F.linear(x, a), b),
        )
    if op is Op.mlp:
        m, hid, width = shape["m"], shape["hidden"], shape["width"]
        x = r(m, hid)
        return kernel(
            "down(silu(gate(x)) * up(x))",
            x,
            weights((width, hid), (width, hid), (hid, width)),
            lambda gate, up, down: F.linear(F.silu(F.linear(x, gate)) * F.linear(x, up), down),
        )
    raise ValueError(f"no kernel for op {op!r}")  # pragma: no cover - Op is closed


__all__ = ["SUPPORTED_DTYPES", "TORCH_DTYPES", "Kernel", "build_kernel", "sdpa_backend", "weight_copies"]
