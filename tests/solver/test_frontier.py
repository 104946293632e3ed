"""The cliff-free frontier: d stays only if every larger d is strictly slower."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gac.solver.frontier import cliff_free_frontier, dominated_dims

curves = st.dictionaries(st.integers(1, 300), st.floats(1.0, 1000.0, allow_nan=False), min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(curves)
def test_frontier_matches_definition(curve):
    expect = [d for d in sorted(curve) if all(curve[e] > curve[d] for e in curve if e > d)]
    assert cliff_free_frontier(curve) == expect
    assert sorted(set(dominated_dims(curve)) | set(expect)) == sorted(curve)


@settings(max_examples=100, deadline=None)
@given(curves, st.floats(0.0, 0.5))
def test_tolerance_only_removes(curve, tol):
    strict = set(cliff_free_frontier(curve))
    loose = cliff_free_frontier(curve, tol)
    assert set(loose) <= strict
    assert max(curve) in loose  # the largest dimension is always a candidate


def test_staircase():
    # Latency steps up every 8: inside each step the top of the step is as fast as its bottom.
    curve = {d: 10.0 * ((d + 7) // 8) for d in range(1, 33)}
    assert cliff_free_frontier(curve) == [8, 16, 24, 32]
    # A cliff: 20 is slower than 24, so 17..23 all lose to 24.
    curve = {16: 1.0, 20: 3.0, 24: 2.0, 32: 4.0}
    assert cliff_free_frontier(curve) == [16, 24, 32]


def test_solver_cliffs_is_always_the_module():
    """`from solver import cliffs` must not depend on import order (no function shadows the module)."""
    import inspect

    import gac.solver
    from gac.solver import cliffs

    assert inspect.ismodule(cliffs) and inspect.ismodule(gac.solver.cliffs)
