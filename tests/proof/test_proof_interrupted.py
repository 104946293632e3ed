"""`gac proof` stopped by Ctrl-C says that nothing was saved (its run is saved at its end), with a shell's exit code."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def test_a_proof_stopped_by_ctrl_c_says_nothing_was_saved(tmp_path):
    env = os.environ | {"GAC_DATA_DIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gac", "proof", "--quick", "--save", str(tmp_path / "run.json")],
        env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    said = []
    for line in proc.stderr:  # each step logs a line: stop it once it is profiling
        said.append(line)
        if "profiling" in line:
            proc.send_signal(signal.SIGINT)
            break
    rest = proc.stderr.read()
    assert proc.wait(timeout=120) == 130, "".join(said) + rest
    assert "interrupted: nothing saved (a proof saves its run when it ends)" in rest, rest
    assert "Traceback" not in rest and not (tmp_path / "run.json").exists()
