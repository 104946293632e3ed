"""What each weight kind costs and which kernels its dimension shapes (docs/architecture.md:
adding a weight kind starts here).

Every kind's parameter count is linear in d (params = unit * d); the solver
relies on that only for reporting, never for correctness.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gac.contracts.manifest import HeadDimWeight, LinearOutWeight, LowRankWeight, MlpWidthWeight, Weight
from gac.contracts.measurements import Op


@dataclass(frozen=True, order=True)
class Kernel:
    """One kernel a weight's dimension shapes: the swept axis takes the value scale * d."""

    op: Op
    fixed: tuple[tuple[str, int], ...]  # the other shape fields, sorted by name
    axis: str
    scale: int = 1  # e.g. a head_dim change of 1 moves the q projection's N by `heads`
    count: int = 1  # how many times the kernel runs per forward (gate and up GEMMs: 2)
    # The curve it runs on (op, fixed shape, axis): kept, as it is a dict key per item and point.
    curve_key: tuple[Op, tuple[tuple[str, int], ...], str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "curve_key", (self.op, self.fixed, self.axis))

    @property
    def fixed_shape(self) -> dict[str, int]:
        return dict(self.fixed)


# The fields a kind's kernels (and parameter counts) depend on: equal keys, equal kernels.
_SHAPE_FIELDS = {
    LowRankWeight: ("out_features", "in_features"),
    LinearOutWeight: ("out_features", "in_features"),
    MlpWidthWeight: ("hidden", "full", "gated"),
    HeadDimWeight: ("heads", "kv_heads", "hidden", "full", "batch", "seq"),
}


def shape_key(w: Weight) -> tuple:
    """What of a weight its kernels depend on (its kind and shape; not its name, dim or importance)."""
    cls = type(w)
    return (cls, *(getattr(w, f) for f in _SHAPE_FIELDS[cls]))


def _kernel(op: Op, axis: str, scale: int = 1, count: int = 1, **fixed: int) -> Kernel:
    return Kernel(op, tuple(sorted(fixed.items())), axis, scale, count)


def unit_params(w: Weight) -> int:
    """Parameters per unit of d (the contract's: a group's shared dim is validated with it)."""
    return w.unit_params


def params(w: Weight, d: float) -> float:
    """Parameter count at dimension d (fractional d gives the compressor's continuous figure)."""
    return unit_params(w) * d


def original_params(w: Weight) -> int:
    """Parameters of the uncompressed weight (the budget ratio is taken of these)."""
    if isinstance(w, (LowRankWeight, LinearOutWeight)):
        return w.out_features * w.in_features
    return unit_params(w) * w.max_dim


def row_count(w: Weight) -> int:
    """The paper's 'row count' M: parameters one column of the weight holds (for its quantum u = 8 * min M)."""
    if isinstance(w, LowRankWeight):
        return min(w.out_features, w.in_features)
    if isinstance(w, LinearOutWeight):
        return w.in_features
    if isinstance(w, (MlpWidthWeight, HeadDimWeight)):
        return w.hidden
    raise TypeError(f"unknown weight kind {type(w).__name__}")


def kernels(w: Weight, tokens: int) -> list[Kernel]:
    """The kernels d shapes at M = tokens, each with its swept axis."""
    m = tokens
    if isinstance(w, LowRankWeight):
        return [
            _kernel(Op.gemm, "n", m=m, k=w.in_features),
            _kernel(Op.gemm, "k", m=m, n=w.out_features),
        ]
    if isinstance(w, LinearOutWeight):
        return [_kernel(Op.gemm, "n", m=m, k=w.in_features)]
    if isinstance(w, MlpWidthWeight):
        return [
            _kernel(Op.gemm, "n", count=2 if w.gated else 1, m=m, k=w.hidden),
            _kernel(Op.gemm, "k", m=m, n=w.hidden),
        ]
    if isinstance(w, HeadDimWeight):
        kv = w.n_kv_heads
        out = [
            _kernel(Op.sdpa, "head_dim", b=w.batch, h=w.heads, s=w.seq or m),
            _kernel(Op.gemm, "n", scale=w.heads, m=m, k=w.hidden),  # q
            _kernel(Op.gemm, "k", scale=w.heads, m=m, n=w.hidden),  # o
        ]
        kv_proj = _kernel(Op.gemm, "n", scale=kv, count=2, m=m, k=w.hidden)  # k and v
        if kv == w.heads:  # same shape as q: one curve, three runs
            out[1] = _kernel(Op.gemm, "n", scale=w.heads, count=3, m=m, k=w.hidden)
        else:
            out.append(kv_proj)
        return out
    raise TypeError(f"unknown weight kind {type(w).__name__}")


def original_points(w: Weight, tokens: int) -> list[tuple[Kernel, int]]:
    """The kernels the uncompressed weight runs at M = tokens, each with its axis value. A low-rank
    weight's original is one dense GEMM (out x in), not its factor pair at full rank (about twice the work)."""
    if isinstance(w, LowRankWeight):
        return [(_kernel(Op.gemm, "n", m=tokens, k=w.in_features), w.out_features)]
    return [(k, k.scale * w.max_dim) for k in kernels(w, tokens)]
