"""The `gac` command line: one entry point, one sub-command group per component.

Each component registers its own commands; the commands that join components
(gac.commands: `gac align`, `gac profile`) are registered the same way. Imports
stay inside the functions that need them so an agent machine (no DB stack) and a
service machine (no torch) can both run the commands they have. A command whose component cannot be
imported says which extra to install instead of vanishing.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Annotated

import typer

from gac import DISTRIBUTION, __version__

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,  # plain help: no <bool> on switches, readable at 80 columns
    help="GAC: GPU-aligned compression.",
)

_SERVICE = ("fastapi", "sqlalchemy", "alembic", "cachetools", "ortools")
_AGENT = ("torch", "tenacity", "filelock")

# module with register(app) -> (the extra(s) it needs, the top-level commands it adds, what those extras install).
# The components register their own commands; gac.commands holds the commands that join components.
# In this order, so `gac --help` lists the commands as it always has.
COMPONENTS = {
    "gac.service.cli": ("service", ("serve", "db", "token"), _SERVICE),
    "gac.commands.align": ("service", ("align",), _SERVICE),
    "gac.commands.jobs": ("", ("jobs",), ()),  # an HTTP client of the service: the base install has it
    "gac.agent.cli": ("agent", ("agent", "ingest"), _AGENT),
    "gac.commands.profile": ("agent,service", ("profile",), _AGENT + _SERVICE),
    "gac.proof.cli": ("proof", ("proof",), ("torch", "safetensors", "tokenizers")),
    "gac.solver.cli": ("solver", ("import",), ("numpy",)),
}


def _missing_module(modules: tuple[str, ...]) -> str | None:
    """The first of modules this environment cannot import (found without importing it)."""
    for name in modules:
        try:
            if importlib.util.find_spec(name) is None:
                return name
        except (ImportError, ValueError):
            return name
    return None


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gac {__version__} ({DISTRIBUTION})")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="print the version and exit")] = False,
) -> None:
    """GAC: GPU-aligned compression."""


def _register() -> dict[str, tuple[str, str]]:
    """Register every component this install can run; the others' commands -> (extra, import error)."""
    unavailable: dict[str, tuple[str, str]] = {}
    for module, (extra, commands, needs) in COMPONENTS.items():
        missing = _missing_module(needs)
        if missing is None:
            try:
                importlib.import_module(module).register(app)
                continue
            except ImportError as exc:
                missing = exc.name or str(exc)
        for command in commands:
            unavailable.setdefault(command, (extra, f"no module {missing!r}"))
    return unavailable


def main() -> None:
    unavailable = _register()
    command = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
    if command in unavailable:
        extra, error = unavailable[command]
        typer.echo(
            f"`gac {command}` is not available in this install ({error}): pip install '{DISTRIBUTION}[{extra}]'",
            err=True,
        )
        raise SystemExit(2)
    app()
