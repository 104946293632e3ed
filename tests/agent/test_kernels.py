"""Every kernel runs for every dtype it claims, on this CPU, with the right output."""

from __future__ import annotations

import pytest
import torch

from gac.agent.kernels import SUPPORTED_DTYPES, TORCH_DTYPES, build_kernel
from gac.agent.timing import WEIGHT_POOL_BYTES, CpuTimer
from gac.contracts.measurements import SHAPE_FIELDS, Dtype, Op

SHAPES = {
    Op.gemm: ({"m": 8, "n": 12, "k": 16}, (8, 12)),
    Op.gemv: ({"n": 24, "k": 40}, (1, 24)),
    Op.sdpa: ({"b": 2, "h": 3, "s": 16, "head_dim": 40}, (2, 3, 16, 40)),
    Op.lowrank: ({"m": 8, "in_features": 32, "rank": 5, "out_features": 24}, (8, 24)),
    Op.mlp: ({"m": 4, "hidden": 16, "width": 44}, (4, 16)),
}


def test_every_op_is_covered():
    assert set(SHAPES) == set(Op) == set(SUPPORTED_DTYPES)


@pytest.mark.parametrize("op", list(Op))
def test_kernel_runs_for_every_claimed_dtype(op):
    shape, out_shape = SHAPES[op]
    assert set(shape) == set(SHAPE_FIELDS[op])
    for dtype in SUPPORTED_DTYPES[op]:
        k = build_kernel(op, dtype, shape, "cpu")
        with torch.inference_mode():
            y = k.fn()
            y2 = k.fn()
        assert tuple(y.shape) == out_shape, (op, dtype)
        assert y.dtype == TORCH_DTYPES[dtype]
        assert torch.isfinite(y.float()).all(), (op, dtype)
        assert torch.equal(y, y2)  # same inputs every call: they are allocated once per point
        assert k.flops > 0 and k.kernel


def test_gemm_computes_the_product():
    k = build_kernel(Op.gemm, Dtype.float32, {"m": 3, "n": 5, "k": 7})
    (x,), [(w,)] = k.inputs, k.weights
    torch.testing.assert_close(k.fn(), x @ w.T)


def test_pooled_weights_are_a_new_copy_on_every_call_and_fill_the_pool():
    pool = 1 << 20
    k = build_kernel(Op.lowrank, Dtype.float32, {"m": 4, "in_features": 64, "rank": 8, "out_features": 48}, weight_pool_bytes=pool)
    per_copy = (8 * 64 + 48 * 8) * 4
    assert len(k.weights) == pool // per_copy
    (x,) = k.inputs
    for a, b in k.weights + k.weights[:3]:  # in turn, and round again
        torch.testing.assert_close(k.fn(), (x @ a.T) @ b.T)
    # Side by side, never overlapping, each on a cache line: every call reads bytes no other copy holds.
    spans = sorted((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for ws in k.weights for t in ws)
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))
    assert spans[-1][1] - spans[0][0] > pool - per_copy and all(start % 64 == 0 for start, _ in spans)
    # Another shape starts its turn elsewhere in the shared pool.
    other = build_kernel(Op.gemm, Dtype.float32, {"m": 4, "n": 33, "k": 33}, weight_pool_bytes=pool)
    assert other.weights[0][0].data_ptr() != k.weights[0][0].data_ptr() and other.weights[0][0].data_ptr() % 64 == 0


def test_the_pool_holds_no_two_identical_tiles():
    # Identical pages can be merged by the host into one physical page, which caches would keep hot.
    from gac.agent.kernels import _POOL_BLOCK, _pool, release_weight_pools

    release_weight_pools()
    buf = _pool(3 * _POOL_BLOCK, torch.bfloat16, torch.device("cpu"))
    tiles = buf[: 3 * _POOL_BLOCK].view(3, _POOL_BLOCK)
    assert not torch.equal(tiles[0, :2048], tiles[1, :2048]) and not torch.equal(tiles[1, :2048], tiles[2, :2048])
    release_weight_pools()


def test_a_weight_larger_than_the_pool_is_one_copy_and_the_cuda_timer_needs_no_pool():
    k = build_kernel(Op.gemm, Dtype.float32, {"m": 2, "n": 64, "k": 64}, weight_pool_bytes=64 * 64 * 4)
    assert len(k.weights) == 1
    assert build_kernel(Op.gemm, Dtype.float32, {"m": 2, "n": 64, "k": 64}, weight_pool_bytes=64 * 64 * 8).weights.__len__() == 2
    timer = CpuTimer(threads=1)
    assert timer.weight_pool_bytes == WEIGHT_POOL_BYTES and timer.name.endswith("+cold-weights")
    assert CpuTimer(threads=1, weight_pool_bytes=0).name == "cpu-perf-counter+preempt-filter"


def test_sdpa_records_the_backend_dispatch_picks():
    k = build_kernel(Op.sdpa, Dtype.float32, SHAPES[Op.sdpa][0])
    assert k.backend in {"flash", "math", "efficient", "cudnn"}


def test_bad_shape_is_refused():
    with pytest.raises(ValueError, match="missing"):
        build_kernel(Op.gemm, Dtype.float32, {"m": 3, "n": 5})


def test_a_gpu_kernel_rotates_through_pooled_copies_only_when_its_timer_asks():
    """The GPU branch (views of one pool; shapes only, on the meta device): one weight copy for the
    flushing timer, copies filling the pool for the chained one, each a new stretch of the pool."""
    shape = {"m": 1, "in_features": 4096, "rank": 16, "out_features": 1024}
    per_copy = 16 * 4096 + 1024 * 16  # elements; both multiples of a cache line in bfloat16
    assert len(build_kernel(Op.lowrank, Dtype.bfloat16, shape, device="meta").weights) == 1
    k = build_kernel(Op.lowrank, Dtype.bfloat16, shape, device="meta", weight_pool_bytes=256 << 20)
    assert len(k.weights) == (256 << 20) // (per_copy * 2)
    starts = [a.storage_offset() for a, _ in k.weights]
    assert all(b - a == per_copy for a, b in zip(starts, starts[1:]))
    assert tuple(k.fn().shape) == (1, 1024)
