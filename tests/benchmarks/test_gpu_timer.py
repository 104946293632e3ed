"""benchmarks/gpu_timer.py's report: per method, how many kernels agree with the reference and repeat."""

from __future__ import annotations

from benchmarks.gpu_timer import GPU_KERNELS, SMALL_GPU_KERNELS, report, simulated


def test_report_counts_the_kernels_that_agree_and_repeat(capsys):
    rows = {
        "k1": {"ref": [10.0, 10.0], "ours": [10.2, 10.4], "synced": [14.0, 30.0]},  # ours 1.03x, 2 % apart
        "k2": {"ref": [100.0, 100.0], "ours": [94.0, 94.5], "synced": [100.0, 100.5]},  # ours 0.94x: outside
    }
    report(rows, "ref")
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2].startswith("ours:") and lines[-2].endswith("1 of 2 kernels within 0.95-1.05x, 2 repeat within 3%")
    assert lines[-1].startswith("synced:") and lines[-1].endswith("1 of 2 kernels within 0.95-1.05x, 1 repeat within 3%")


def test_the_simulated_stream_tells_the_queued_timer_from_one_sync_a_sample(capsys):
    simulated(runs=2)
    summary = {line.split(":")[0]: line for line in capsys.readouterr().out.splitlines() if ": ratio to true" in line}
    assert summary["ours"].endswith("5 of 5 kernels within 0.95-1.05x, 5 repeat within 3%")
    assert summary["chained"].endswith("5 of 5 kernels within 0.95-1.05x, 5 repeat within 3%")
    # A sync per sample lets the (simulated) GPU go idle: launch latency and host stalls land in the small kernels.
    assert "5 of 5 kernels within" not in summary["synced"]


def test_every_op_has_small_kernels_that_small_runs_alone():
    ops = {op for _, op, _ in GPU_KERNELS}
    assert ops == {"gemm", "gemv", "sdpa"}
    assert ops == {op for _, op, _ in SMALL_GPU_KERNELS}
    assert GPU_KERNELS[: len(SMALL_GPU_KERNELS)] == SMALL_GPU_KERNELS
    labels = [label for label, _, _ in GPU_KERNELS]
    assert len(set(labels)) == len(labels)
