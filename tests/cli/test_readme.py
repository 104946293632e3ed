"""The README's examples run as written: every shell block marked `<!-- runnable ... -->` is run
with bash (errexit, pipefail) in a scratch directory that sees the repository's examples/, on an
empty data directory, and must exit 0 without a traceback. Every Python block so marked (the
client's, in the README and docs/client.md) runs against the real service holding this machine's
platform, with $GAC_SERVER and $GAC_TOKEN set as the text says."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.database import BACKENDS

ROOT = Path(__file__).resolve().parents[2]
MARK = re.compile(r"<!-- runnable[^>]*-->\s*\n```(?:bash|sh)\n(.*?)```", re.S)
PY_MARK = re.compile(r"<!-- runnable[^>]*-->\s*\n```python\n(.*?)```", re.S)
PY_DOCS = ("README.md", "docs/client.md")


def runnable_blocks() -> list[str]:
    return MARK.findall((ROOT / "README.md").read_text())


def python_blocks() -> list[tuple[str, str]]:
    return [(doc, block) for doc in PY_DOCS for block in PY_MARK.findall((ROOT / doc).read_text())]


def test_the_readme_marks_runnable_blocks():
    blocks = runnable_blocks()
    assert blocks, "no block in README.md is marked <!-- runnable -->"
    assert all(block.strip() for block in blocks)
    assert {doc for doc, _ in python_blocks()} == set(PY_DOCS), "the client examples are not marked <!-- runnable -->"


@pytest.mark.slow
@pytest.mark.parametrize("database", [BACKENDS[0]], indirect=True)  # the client's path is the same on either backend
@pytest.mark.parametrize("doc,index", [(doc, i) for doc in PY_DOCS for i in range(len(PY_MARK.findall((ROOT / doc).read_text())))])
def test_client_example_runs_as_written(doc, index, live_service, tmp_path):
    """On this machine's real platform, stored with what the example's alignment needs in its fast
    dtype (tests/cli/machine.py): the example finds the platform itself and predicts a speed-up."""
    from gac.agent.platform import detect_platform
    from gac.client import Client
    from tests.cli.machine import batches, needed_measurements

    block = PY_MARK.findall((ROOT / doc).read_text())[index]
    machine = detect_platform()
    assert machine.fast_dtype is not None
    manifest = json.loads((ROOT / "examples/cpu-demo-lowrank.json").read_text())
    # Stored as if profiled with one thread: the example's own detection (every core) must still find it.
    stored_as = machine.model_copy(update={"threads": 1 if machine.threads != 1 else 2})
    # In every dtype the example's own detection may call fast here (it times a probe GEMM per dtype,
    # in another process): which one is detection's business (tests/agent/test_platform.py), not this test's.
    candidates = sorted({machine.fast_dtype.value, "float32", *(str(d) for d in machine.native_dtypes or [])})
    with Client(live_service.url, live_service.ingest_token) as gac:
        for dtype in candidates:
            for batch in batches(stored_as, needed_measurements(manifest, stored_as.fingerprint(), dtype)):
                gac.upload(batch, by_columns=True)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {**os.environ, "GAC_SERVER": live_service.url, "GAC_TOKEN": live_service.read_token}
    done = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "Traceback" not in out, f"{doc} block {index} failed:\n{block}\n--- output\n{out[-3000:]}"
    used = re.search(r"^platform: .* in (\w+)$", done.stdout, re.MULTILINE)
    assert used and used.group(1) in candidates, (done.stdout, machine.dtype_speed)
    speedup = re.search(r"predicted speed-up: (\S+)", done.stdout)
    assert speedup and float(speedup.group(1)) > 0, done.stdout
    assert stored_as.fingerprint()[:12] in done.stdout


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
        f"README block {index} failed:\n{block}\n--- stdout\n{done.stdout[-2000:]}\n--- stderr\n{done.stderr[-2000:]}"
    )
    assert "Traceback" not in done.stdout + done.stderr
