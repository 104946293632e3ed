"""The layering holds: contracts <- solver <- service, contracts <- agent (the import contracts in
pyproject.toml, checked by import-linter over the `gac` namespace as installed: a folder of links,
scripts/namespace_tree.py). A forbidden import anywhere fails here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept(tmp_path):
    tree = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "namespace_tree.py"), str(tmp_path / "tree")], capture_output=True, text=True, check=True
    ).stdout.strip()
    lint = Path(sys.executable).parent / "lint-imports"
    env = {**os.environ, "PYTHONPATH": tree}
    done = subprocess.run(
        [str(lint), "--no-cache", str(ROOT / "pyproject.toml")], cwd=tree, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout and "BROKEN" not in done.stdout
