"""The --why report of benchmarks/gpu_timer.py on made-up figures (the measuring needs a GPU)."""

from __future__ import annotations

from benchmarks.gpu_timer import why, why_report


def test_why_report_ratios_clocks_and_summary(capsys):
    rows = {
        "k1": {"do_bench": [10.0, 12.0, 11.0], "ours": [9.0, 9.9, 9.5], "replica": [11.0, 11.0, 11.0]},
        "k2": {"do_bench": [20.0], "ours": [22.0], "replica": [20.0]},
        "k3": {"ours": [5.0]},  # no reference figure: left out of the ratios
    }
    clocks = {"k1": {"do_bench": [1980, 1755, 1980], "ours": []}, "k2": {}}
    why_report(rows, clocks, "do_bench")
    lines = capsys.readouterr().out.splitlines()
    k1_ours = next(line for line in lines if line.startswith("k1") and " ours " in line).split()
    assert k1_ours[2:] == ["9.00/9.90/9.50", "0.864", "10.0%", "-"]  # 9.5 / 11, 9.9 / 9 - 1, no clock readings
    k1_ref = next(line for line in lines if line.startswith("k1") and " do_bench " in line).split()
    assert k1_ref[-1] == "1980"  # the median of the readings
    assert any(line.startswith("k3") and "no do_bench figure" in line for line in lines)
    # worst: the ratio farthest from 1 (0.864 against 1.100), median over the kernels with a reference
    assert "ours: ratio to do_bench median 0.982, worst 0.864" in lines
    assert "replica: ratio to do_bench median 1.000, worst 1.000" in lines
    assert not any(line.startswith("do_bench:") for line in lines)


def test_why_without_a_gpu_says_so(capsys, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    why("cuda:0", 1)
    assert "needs a CUDA GPU" in capsys.readouterr().out
