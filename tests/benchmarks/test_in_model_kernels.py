"""benchmarks/in_model_kernels.py on the CPU: its trace (aten GEMM ops stand in for kernels), the gaps
between launches, and the per-step sums it prints."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from benchmarks.in_model_kernels import (
    GAP_WITHIN_US,
    back_to_back_us,
    gaps_us,
    kernel_durations,
    per_step,
    print_kernels,
    print_sums,
    step_anatomy,
    trace,
)


def test_trace_counts_every_gemm_of_every_call_in_start_order():
    a, b = torch.randn(8, 16), torch.randn(16, 4)

    def two_gemms() -> None:
        torch.mm(a, b)
        torch.mm(b.t(), a.t())

    launches = trace(two_gemms, reps=3, device="cpu")
    assert [name for name, _, _ in launches] == ["aten::mm"] * 6  # the untraced first call left out
    assert all(end >= start for _, start, end in launches)
    assert [s for _, s, _ in launches] == sorted(s for _, s, _ in launches)
    ((count, median_us),) = per_step(kernel_durations(launches), reps=3).values()
    assert count == 2 and median_us > 0


def test_gaps_are_kept_within_a_call_and_dropped_between_calls():
    launches = [("a", 0.0, 1.0), ("b", 1.5, 2.0), ("a", 2.0, 3.0), ("b", 3.0 + GAP_WITHIN_US + 1, 60.0)]
    assert gaps_us(launches) == {("a", "b"): [0.5], ("b", "a"): [0.0]}


def test_step_anatomy_keeps_what_the_medians_and_the_gap_cut_leave_out():
    # Three steps of two kernels: quick, then k long once with a wait past GAP_WITHIN_US before r, then medium.
    long_wait = GAP_WITHIN_US + 30
    launches = [
        ("k", 0, 2), ("r", 3, 4),
        ("k", 100, 140), ("r", 140 + long_wait, 141 + long_wait),
        ("k", 300, 303), ("r", 305, 306),
    ]  # fmt: skip
    an = step_anatomy(launches, reps=3)
    assert an is not None and an.kernels == 2
    assert (an.span_us, an.busy_us, an.gaps_us) == (6.0, 4.0, 2.0)  # the median step, all its figures from it
    assert an.by_name == {"k": 3.0, "r": 1.0} and an.largest_gap == (2.0, "k", "r")
    slow = step_anatomy(launches[2:4], reps=1)
    assert slow is not None and slow.largest_gap == (pytest.approx(long_wait), "k", "r") and slow.busy_us == 41.0
    assert step_anatomy(launches[:5], reps=3) is None  # steps of different kernel counts are not cut by count


def test_print_kernels_returns_busy_plus_idle_per_step(capsys):
    # two steps each: u launches k twice (2 us each, 0.5 us apart); v launches k once and r once
    traces = {
        "unaligned": [("k", 0, 2), ("k", 2.5, 4.5), ("k", 100, 102), ("k", 102.5, 104.5)],
        "v": [("k", 0, 2), ("r", 3, 4), ("k", 100, 102), ("r", 103, 104)],
    }
    wall = print_kernels("in place", traces, reps=2)
    assert wall == {"unaligned": pytest.approx(4.5), "v": pytest.approx(4.0)}
    out = capsys.readouterr().out
    assert "2 kernels/step" in out and "busy      4.0  idle     0.5" in out
    assert "k -> r" in out and "k -> k" in out


def test_print_sums_says_what_each_way_saves(capsys):
    calls = {"unaligned": Counter({(1, 7, 16): 2, (1, 8, 8): 1}), "v": Counter({(1, 8, 16): 2, (1, 8, 8): 1})}
    per_shape = {"alone": {(1, 7, 16): 5.0, (1, 8, 16): 3.0, (1, 8, 8): 1.0}, "partial": {(1, 7, 16): 1.0}}
    print_sums(calls, {"in place": {"unaligned": 20.0, "v": 12.5}}, per_shape)
    out = capsys.readouterr().out
    assert "in place    12.5 [  +7.5]" in out
    assert "alone    11.0" in out and "alone     7.0 [  +4.0]" in out  # 2 x 5 + 1 against 2 x 3 + 1
    assert "partial" not in out  # a way that lacks a shape is left blank


def test_back_to_back_times_one_call_of_many(monkeypatch):
    monkeypatch.setattr("benchmarks.in_model_kernels.B2B_POOL_BYTES", 64 * 64 * 4 * 8)  # 8 copies of a float32 64 x 64
    us = back_to_back_us(4, 64, 64, "float32", "cpu", passes=3)
    assert 0 < us < float("inf")  # a time per call, not a limit on it: a loaded machine may take any time
