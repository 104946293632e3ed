"""The `gac` namespace as installed, laid out as a folder of links, for tools that read files.

pyproject.toml maps the repository's top-level folders into one installed package (`service/`
is `gac.service`, `profiler_agent/` is `gac.agent`, ...). Python's import system follows that
mapping through the editable install; mypy and import-linter read the file system instead, so
they read this tree: real folders, each file a link to the repository's own.

    python scripts/namespace_tree.py [OUT]    # default build/namespace; prints OUT
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def package_dirs() -> dict[str, Path]:
    """Each installed package -> the folder it comes from (pyproject's package-dir, else its own path)."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapped = {name: ROOT / folder for name, folder in cfg.get("package-dir", {}).items()}
    out = {}
    for package in cfg["packages"]:
        parent = max((m for m in mapped if package == m or package.startswith(m + ".")), key=len, default=None)
        if parent is None:
            out[package] = ROOT.joinpath(*package.split("."))
        else:
            out[package] = mapped[parent].joinpath(*package[len(parent) :].split(".")[1:])
    return out


MARKER = ".namespace-tree"  # what this script wrote: it deletes no folder holding anything else


def _links_only(out: Path) -> bool:
    """A tree built before the marker: gac/ of folders and links (mypy's cache beside it), nothing else."""
    tree = out / "gac"
    return (
        tree.is_dir()
        and {entry.name for entry in out.iterdir()} <= {"gac", ".mypy_cache"}
        and all(p.is_dir() or p.is_symlink() for p in tree.rglob("*"))
    )


def build(out: Path) -> Path:
    if out.exists():
        if not (out / MARKER).exists() and not _links_only(out) and any(out.iterdir()):
            sys.exit(f"{out} is not empty and not a tree this script built: not deleting it")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / MARKER).touch()
    for package, folder in package_dirs().items():
        target = out.joinpath(*package.split("."))
        target.mkdir(parents=True, exist_ok=True)
        for source in folder.iterdir():
            if source.is_file() and source.suffix in (".py", ".pyi", ".typed"):
                (target / source.name).symlink_to(source)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=ROOT / "build" / "namespace", help="the folder to build")
    print(build(parser.parse_args().out))
