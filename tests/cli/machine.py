"""This machine's real platform, stored with synthetic curves that cover everything a manifest's
alignment needs: the README's client example and `gac align`'s default platform are tested on
the platform the agent detects here, without timing kernels for minutes."""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from typing import Any

from gac.contracts.manifest import Manifest
from gac.contracts.measurements import Batch, Measurement, PlatformDescriptor, RunInfo

ROUNDS = 4  # align, measure what it lacks, again: a look-ahead can move past a step the new points show
ROWS_PER_BATCH = 2000


def synthetic_us(shape: dict[str, int], swept: int) -> float:
    """A latency that grows with the kernel's size, 6 % slower off multiples of 8 (a comb, as CPUs show)."""
    return round((2.0 + 1e-4 * math.prod(shape.values())) * (1.0 if swept % 8 == 0 else 1.06), 3)


def needed_measurements(doc: dict[str, Any], platform: str, dtype: str) -> list[Measurement]:
    """Every point the alignment of `doc` in `dtype` and its prediction ask for, with synthetic latencies."""
    from gac.solver.align import AlignOptions, align
    from gac.solver.lookup import FileLookup

    manifest = Manifest.model_validate({**doc, "workload": {**doc.get("workload", {"tokens": [1024]}), "dtype": dtype}})
    rows: list[tuple] = []
    out: list[Measurement] = []
    for _ in range(ROUNDS):
        result = align(manifest, FileLookup(rows, platform), AlignOptions(cross_check="none"))
        if not result.missing:
            return out
        for need in result.missing:
            for d in need.dims:
                shape = {**need.fixed_shape, need.axis: d}
                med = synthetic_us(shape, d)
                rows.append((need.op, need.dtype, shape, need.axis, med, med * 0.99, med * 1.01, 20))
                out.append(
                    Measurement(
                        id=uuid.uuid4(),
                        op=need.op,
                        dtype=need.dtype,
                        shape=shape,
                        sweep_axis=need.axis,
                        median_us=med,
                        p10_us=med * 0.99,
                        p90_us=med * 1.01,
                        mean_us=med,
                        n=20,
                        timer="synthetic",
                    )
                )
    raise AssertionError(f"the alignment still lacks points after {ROUNDS} rounds")


def batches(machine: PlatformDescriptor, measurements: list[Measurement]) -> Iterator[Batch]:
    """The measurements as one run's batches, small enough for the service's row limit."""
    run = RunInfo(id=uuid.uuid4(), agent="synthetic-profile", plan="synthetic")
    for i in range(0, len(measurements), ROWS_PER_BATCH):
        yield Batch(id=uuid.uuid4(), platform=machine, run=run, measurements=measurements[i : i + ROWS_PER_BATCH])
