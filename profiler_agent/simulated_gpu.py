"""A simulated GPU stream (a GpuQueue), so the CUDA timing logic runs and is tested without a GPU.

It models what makes GPU timing hard rather than any GPU's speed: the host queues work and
the device runs it later, in order; each launch costs host time, and some launches cost far
more (the bimodal host stalls of small kernels: a slow launch path, an interrupt, the
garbage collector); an event takes the device's time when the device reaches it, so a device
that waits for the host between two events puts the wait into the measurement. Kernels read
cold or warm operands depending on whether an L2 flush ran since they last did (a kernel that
reads the next copy of its weights on each call reads them cold every time).

Times are microseconds on a virtual clock: nothing here waits for real time, and a seed makes
every run repeatable. With `memory_bytes`, a kernel holds its operands' bytes while it lives, and
one that does not fit beside the others raises torch's out-of-memory error, as a GPU does.
"""

from __future__ import annotations

import math
import random
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from gac.agent.kernels import Kernel
from gac.contracts.measurements import Dtype, Op, op_flops


@dataclass
class HostCosts:
    """Host microseconds per call into the runtime (a stall adds to a launch with probability stall_p)."""

    launch_us: float = 5.0  # a plain kernel launch (the flush, a spin)
    op_us: float = 20.0  # what a framework op costs the host before its kernel is queued
    stall_p: float = 0.5  # share of op launches that take the slow path ...
    stall_us: tuple[float, float] = (20.0, 35.0)  # ... and how much longer (uniform)
    record_us: float = 1.5
    query_us: float = 1.0
    sync_us: float = 8.0


@dataclass
class SimEvent:
    at_us: float | None = None  # device time when the device reaches it


@dataclass
class SimulatedGpu:
    """A GpuQueue on a virtual clock. `kernel(cold_us, warm_us)` makes a callable that queues one kernel."""

    flush_bytes: int = 100 << 20
    flush_us: float = 33.0  # writing flush_bytes at ~3 TB/s
    noise: float = 0.01  # relative jitter of device durations (gaussian sd)
    host: HostCosts = field(default_factory=HostCosts)
    seed: int = 0
    memory_bytes: int | None = None  # device memory for kernels' operands (None: unlimited)
    held_bytes: int = 0  # what the live kernels hold
    host_us: float = 0.0  # the host's clock
    free_us: float = 0.0  # when the device has run everything queued so far
    launches: int = 0
    syncs: int = 0  # host waits for the device: the round trips a timer pays for
    _cold: bool = True  # whether the next kernel's operands were flushed out of the L2
    _rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    # -- the device side
    def _queue(self, device_us: float, host_us: float) -> None:
        self.host_us += host_us
        self.free_us = max(self.free_us, self.host_us) + device_us * max(0.0, 1 + self._rng.gauss(0, self.noise))
        self.launches += 1

    def kernel(self, cold_us: float, warm_us: float | None = None, pooled: bool = False) -> Callable[[], None]:
        """A framework op whose kernel takes cold_us on a flushed L2 and warm_us (default cold_us) otherwise;
        pooled: its weights are a new copy on each call, cold whatever ran before."""
        warm = cold_us if warm_us is None else warm_us

        def launch() -> None:
            stall = self._rng.uniform(*self.host.stall_us) if self._rng.random() < self.host.stall_p else 0.0
            self._queue(cold_us if self._cold or pooled else warm, self.host.op_us + stall)
            self._cold = False

        return launch

    # -- GpuQueue
    def now(self) -> float:
        return self.host_us / 1e6

    def flush_l2(self) -> None:
        self._queue(self.flush_us, self.host.launch_us)
        self._cold = True

    def spin(self, us: float) -> None:
        if us > 0:
            self._queue(us, self.host.launch_us)

    def event(self) -> SimEvent:
        return SimEvent()

    def record(self, event: Any) -> None:
        self.host_us += self.host.record_us
        event.at_us = max(self.free_us, self.host_us)

    def done(self, event: Any) -> bool:
        self.host_us += self.host.query_us
        return event.at_us is not None and event.at_us <= self.host_us

    def synchronize(self) -> None:
        self.host_us = max(self.host_us, self.free_us) + self.host.sync_us
        self.syncs += 1

    def elapsed_us(self, start: Any, end: Any) -> float:
        if start.at_us is None or end.at_us is None:
            raise RuntimeError("an event that was never recorded")
        return end.at_us - start.at_us

    def clocks(self) -> dict[str, Any]:
        return {}

    def build_kernel(self, op: Any, dtype: Any, shape: dict[str, int], device: Any = None, weight_pool_bytes: int = 0, **_: Any) -> Kernel:
        """A point's kernel on this stream (the runner's KernelBuilder), its time from lattice_us (cold;
        WARM_FACTOR of it warm, unless its weights come from a pool)."""
        op, dtype = Op(op), Dtype(dtype)
        need = operand_elements(op, shape) * (4 if dtype is Dtype.float32 else 2)
        if self.memory_bytes is not None and self.held_bytes + need > self.memory_bytes:
            free = self.memory_bytes - self.held_bytes
            raise torch.cuda.OutOfMemoryError(f"CUDA out of memory (simulated). Tried to allocate {need} bytes; {free} bytes free")
        us = lattice_us(op, shape)
        fn = self.kernel(us, us * WARM_FACTOR, pooled=weight_pool_bytes > 0)
        kernel = Kernel(op, dtype, shape, torch.device("meta"), fn, "simulated", flops=op_flops(op, shape))
        self.held_bytes += need
        weakref.finalize(kernel, self._release, need)  # freed with the kernel, as its tensors would be
        return kernel

    def _release(self, nbytes: int) -> None:
        self.held_bytes -= nbytes

    def idle(self, seconds: float) -> None:
        """Let host time pass with nothing queued (between points, between curves)."""
        self.host_us += seconds * 1e6


# The shape of a GPU's cliffs, not any GPU's figures: a roofline floor (FLOPs at PEAK_TFLOPS, bytes at
# BANDWIDTH) times a factor per misaligned dim: multiples of 8 run at full speed, other even dims
# EVEN_FACTOR slower, odd dims ODD_FACTOR slower (GEMM along N and K; SDPA along head_dim).
PEAK_TFLOPS, BANDWIDTH_GBS, FLOOR_US = 600.0, 3000.0, 2.0
EVEN_FACTOR, ODD_FACTOR = 2.5, 5.5
WARM_FACTOR = 0.8  # a kernel whose operands are in the L2 takes this share of its cold time
_ALIGNED_DIMS = {Op.gemm: ("n", "k"), Op.gemv: ("n", "k"), Op.lowrank: ("rank",), Op.mlp: ("width",), Op.sdpa: ("head_dim",)}


def operand_elements(op: Op, shape: dict[str, int]) -> int:
    """What a simulated kernel reads and writes, in elements: each pair of its dims' product (a GEMM's
    m x k, k x n and m x n); SDPA's q, k, v and output."""
    return sum(math.prod(v for k, v in shape.items() if k != d) for d in shape) if op is not Op.sdpa else 4 * math.prod(shape.values())


def lattice_us(op: Op, shape: dict[str, int], bytes_per_element: int = 2) -> float:
    """A simulated kernel's duration at this shape."""
    elements = operand_elements(op, shape)
    floor = max(FLOOR_US, op_flops(op, shape) / (PEAK_TFLOPS * 1e6), elements * bytes_per_element / (BANDWIDTH_GBS * 1e3))
    factor = 1.0
    for d in _ALIGNED_DIMS[op]:
        v = shape[d]
        factor = max(factor, 1.0 if v % 8 == 0 else EVEN_FACTOR if v % 2 == 0 else ODD_FACTOR)
    return floor * factor


__all__ = ["HostCosts", "SimEvent", "SimulatedGpu", "lattice_us"]
