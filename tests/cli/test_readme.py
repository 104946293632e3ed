"""The README's examples run as written: every shell block marked `<!-- runnable ... -->` is run
with bash (errexit, pipefail) in a scratch directory that sees the repository's examples/, on an
empty data directory, and must exit 0 without a traceback."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARK = re.compile(r"<!-- runnable[^>]*-->\s*\n```(?:bash|sh)\n(.*?)```", re.S)


def runnable_blocks() -> list[str]:
    return MARK.findall((ROOT / "README.md").read_text())


def test_the_readme_marks_runnable_blocks():
    blocks = runnable_blocks()
    assert blocks, "no block in README.md is marked <!-- runnable -->"
    assert all(block.strip() for block in blocks)


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(runnable_blocks())))
def test_readme_block_runs_as_written(index, tmp_path):
    block = runnable_blocks()[index]
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "GAC_DATA_DIR": str(tmp_path / "data"),
    }
    env.pop("GAC_DATABASE_URL", None)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (
        f"README block {index} failed:\n{block}\n--- stdout\n{done.stdout[-2000:]}\n--- stderr\n{done.stderr[-2000:]}")
    assert "Traceback" not in done.stdout + done.stderr
