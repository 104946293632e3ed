"""The GPU stream as the CUDA timer sees it: work is queued by the host and run later by the device.

A timer that waits for the device after every sample lets it go idle; the next sample then
starts only when the host has launched it, and the launch latency and any host jitter land
between the timing events. CudaTimer avoids that by keeping the queue ahead of the host, and
needs only these few operations to do so. TorchCudaQueue implements them on a real device;
gac.agent.simulated_gpu implements them on a simulated one, so the timing logic is tested
where there is no GPU.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import torch


class GpuQueue(Protocol):
    """One device stream, driven from the host."""

    flush_bytes: int  # what flush_l2 writes: at least the device's L2

    def now(self) -> float:
        """Host time in seconds (a monotonic clock)."""
        ...

    def flush_l2(self) -> None:
        """Queue a write over a buffer larger than the L2: the next kernel reads its operands from memory."""
        ...

    def spin(self, us: float) -> None:
        """Queue a kernel that keeps the device busy for about `us` microseconds."""
        ...

    def event(self) -> Any:
        """A new timing event."""
        ...

    def record(self, event: Any) -> None:
        """Queue the event: it takes the device's time when the device reaches it."""
        ...

    def done(self, event: Any) -> bool:
        """Whether the device has reached this event (without waiting)."""
        ...

    def synchronize(self) -> None:
        """Wait until the device has run everything queued."""
        ...

    def elapsed_us(self, start: Any, end: Any) -> float:
        """Device time between two reached events."""
        ...

    def clocks(self) -> dict[str, Any]:
        """What to record beside a point (SM clock, throttle reasons), when known."""
        ...


def nvml_handle(nv: Any, dev: torch.device) -> tuple[Any, int | None]:
    """The NVML handle of this CUDA device: by PCI bus id when torch reports it, else by index."""
    props = torch.cuda.get_device_properties(dev)
    bus = getattr(props, "pci_bus_id", None)
    if bus is not None:
        try:
            pci = f"{getattr(props, 'pci_domain_id', 0):08x}:{bus:02x}:{getattr(props, 'pci_device_id', 0):02x}.0"
            handle = nv.nvmlDeviceGetHandleByPciBusId(pci)
            return handle, int(nv.nvmlDeviceGetIndex(handle))
        except Exception:  # noqa: BLE001 - fall back to the index mapping
            pass
    try:
        index = int(torch.cuda._get_nvml_device_index(dev))  # honours CUDA_VISIBLE_DEVICES
    except Exception:  # noqa: BLE001
        index = dev.index or 0
    return nv.nvmlDeviceGetHandleByIndex(index), index


class NvmlProbe:
    """SM clock (MHz) and clock-throttle reasons via nvidia-ml-py, when installed."""

    def __init__(self, device: torch.device) -> None:
        self._handle = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            # By PCI bus id: the CUDA index differs from NVML's under CUDA_VISIBLE_DEVICES or another device order.
            self._handle, _ = nvml_handle(pynvml, device)
        except Exception:  # noqa: BLE001 - no NVML: nothing recorded, nothing invented
            self._handle = None

    def read(self) -> dict[str, Any]:
        if self._handle is None:
            return {}
        nv = self._nvml
        out: dict[str, Any] = {}
        try:
            out["sm_clock_mhz"] = int(nv.nvmlDeviceGetClockInfo(self._handle, nv.NVML_CLOCK_SM))
        except Exception:  # noqa: BLE001
            pass
        getter = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        if getter is not None:
            try:
                out["throttle_reasons"] = int(getter(self._handle))
            except Exception:  # noqa: BLE001
                pass
        return out


SPIN_PROBE_CYCLES = 1_000_000  # ~0.5 ms at the clocks of current GPUs: long enough to time, short enough to waste


class TorchCudaQueue:
    """GpuQueue on a CUDA device through torch (the current stream of that device)."""

    def __init__(self, device: torch.device, flush_bytes: int | None = None) -> None:
        if not torch.cuda.is_available():
            raise RuntimeError("CUDA timing needs CUDA; this torch build or machine has none")
        self.device = device
        props = torch.cuda.get_device_properties(device)
        self.l2_bytes = int(getattr(props, "L2_cache_size", 0) or 0)
        # Unknown L2 size: 256 MiB is above every GPU's L2 to date.
        size = flush_bytes if flush_bytes is not None else (2 * self.l2_bytes if self.l2_bytes else 256 << 20)
        if size < self.l2_bytes:
            raise ValueError(f"flush buffer ({size} B) must be at least the L2 size ({self.l2_bytes} B)")
        self.flush_bytes = size
        with torch.cuda.device(device):
            self._flush = torch.empty(size // 4, dtype=torch.int32, device=device)
        self._cycles_per_us: float | None = None
        self._nvml = NvmlProbe(device)

    def now(self) -> float:
        return time.perf_counter()

    def flush_l2(self) -> None:
        self._flush.fill_(1)  # a write over the whole buffer evicts every L2 line

    def spin(self, us: float) -> None:
        if us > 0:
            torch.cuda._sleep(max(1, int(us * self._spin_rate())))

    def _spin_rate(self) -> float:
        """Clock cycles per microsecond of torch.cuda._sleep, measured once."""
        if self._cycles_per_us is None:
            start, end = self.event(), self.event()
            torch.cuda._sleep(SPIN_PROBE_CYCLES)  # first call: module load, not timed
            start.record()
            torch.cuda._sleep(SPIN_PROBE_CYCLES)
            end.record()
            end.synchronize()
            self._cycles_per_us = SPIN_PROBE_CYCLES / max(self.elapsed_us(start, end), 1.0)
        return self._cycles_per_us

    def event(self) -> torch.cuda.Event:
        return torch.cuda.Event(enable_timing=True)

    def record(self, event: Any) -> None:
        event.record()

    def done(self, event: Any) -> bool:
        return bool(event.query())

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def elapsed_us(self, start: Any, end: Any) -> float:
        return float(start.elapsed_time(end)) * 1e3  # elapsed_time is in milliseconds

    def clocks(self) -> dict[str, Any]:
        return self._nvml.read()


__all__ = ["GpuQueue", "NvmlProbe", "TorchCudaQueue", "nvml_handle"]
