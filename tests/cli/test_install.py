"""What a new user installs and first types: the distribution name everywhere, `gac --version`,
and a command whose component is not installed says which extra to add."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from gac import DISTRIBUTION, __version__

ROOT = Path(__file__).resolve().parents[2]


def install_lines() -> list[tuple[str, str]]:
    out = []
    for name in ("README.md", "Dockerfile", "docker-compose.yml", "examples/README.md", "Makefile"):
        path = ROOT / name
        if path.exists():
            out += [(name, m.group(0)) for m in re.finditer(r"pip install [^\n`;&|#]+", path.read_text())]
    return out


def test_pyproject_names_the_distribution():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["name"] == DISTRIBUTION != "gac"
    assert meta["scripts"]["gac"] == "gac.cli:main"
    assert all(dep.startswith(DISTRIBUTION) for dep in meta["optional-dependencies"]["dev"] if "[" in dep)


def test_every_install_line_installs_this_project():
    lines = install_lines()
    assert any(DISTRIBUTION in line for _, line in lines)
    for where, line in lines:
        words = [w for w in shlex.split(line.replace("$(", "(").replace('"$(TORCH)"', "torch"))[2:] if not w.startswith("-")]
        for spec in words:
            name = re.split(r"[\[<>=! ]", spec, maxsplit=1)[0]
            if name == "gac":
                pytest.fail(f"{where}: `{line}` installs the unrelated PyPI project `gac`")
            if name.startswith(("http", "(", ".", "/")) or name in ("torch", "pip"):
                continue  # a URL, a make variable, this checkout, torch itself, or pip
            assert name == DISTRIBUTION, f"{where}: `{line}` installs {name!r}, not {DISTRIBUTION!r}"


def test_version():
    out = subprocess.run([sys.executable, "-m", "gac", "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == f"gac {__version__} ({DISTRIBUTION})"


def test_help_shows_no_type_clutter_on_switches():
    out = subprocess.run([sys.executable, "-m", "gac", "align", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "--wide" in out.stdout
    assert "<bool>" not in out.stdout


BLOCK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "fastapi" or name.startswith("fastapi."):
            raise ImportError("No module named 'fastapi'")
sys.meta_path.insert(0, Block())
sys.argv = ["gac", "serve"]
from gac.cli import main
main()
"""


def test_a_missing_extra_is_named_not_hidden():
    out = subprocess.run([sys.executable, "-c", BLOCK], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert f"pip install '{DISTRIBUTION}[service]'" in out.stderr and "fastapi" in out.stderr
    assert "Traceback" not in out.stderr


def test_every_package_folder_is_in_the_namespace():
    """pyproject lists the installed packages by hand (folders map into `gac`): none may be left out."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from namespace_tree import package_dirs
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    listed = {folder.resolve() for folder in package_dirs().values()}
    on_disk = {
        init.parent.resolve()
        for top in ("gac", "service", "solver", "profiler_agent", "proof", "migrations")
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert on_disk - listed == set(), f"folders with an __init__.py missing from [tool.setuptools] packages: {on_disk - listed}"
    assert all(folder.is_dir() for folder in listed)


@pytest.mark.slow
def test_a_wheel_installs_one_top_level_package(tmp_path):
    """Nothing but `gac` lands in site-packages: no generic `service` or `migrations` to clash with."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"gac"}, tops
    for module in (
        "gac/service/app.py",
        "gac/agent/timing.py",
        "gac/solver/align.py",
        "gac/proof/pipeline.py",
        "gac/migrations/env.py",
        "gac/migrations/script.py.mako",
        "gac/service/ui/static/app.js",
        "gac/py.typed",
    ):
        assert module in names, module
    assert any(n.startswith("gac/migrations/versions/") for n in names)
