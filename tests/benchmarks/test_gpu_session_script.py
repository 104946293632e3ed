"""benchmarks/gpu_session.sh runs on a lent GPU for a few minutes, never in CI: a flag it passes that a
command no longer takes would spend the lease on a usage error. Every `gac` and benchmark call it makes
is checked here against the commands as they are."""

from __future__ import annotations

import importlib
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

from gac.cli import COMPONENTS

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_session.sh"


def _calls(marker: str) -> list[list[str]]:
    """Each call after `marker` in the script (continuation lines joined), split into words; shell
    variables stay as written."""
    text = re.sub(r"\\\n\s*", " ", SCRIPT.read_text())
    calls = []
    for line in text.splitlines():
        if line.lstrip().startswith("#") or marker not in line:
            continue
        rest = line.split(marker, 1)[1]
        rest = re.split(r"\s(?:>|2>|&&|\|\||;|&$)", rest)[0]  # the call, not its redirections or what follows
        calls.append(shlex.split(rest, posix=True))
    return calls


def _options(command: Any) -> set[str]:
    return {opt for p in command.params for opt in (*p.opts, *p.secondary_opts) if opt.startswith("-")}


def test_every_gac_call_names_a_command_and_its_options():
    gac = typer.Typer()
    for module in COMPONENTS:  # every component's commands, as `gac` registers them
        importlib.import_module(module).register(gac)
    root = typer.main.get_command(gac)
    calls = _calls('"${GAC[@]}"')
    assert len(calls) >= 15, calls  # the parse found the script's calls
    for words in calls:
        command, path = root, []
        while hasattr(command, "commands") and words and not words[0].startswith("-"):
            name = words.pop(0)
            assert name in command.commands, f"gac {' '.join(path)}: no command {name!r}"
            command, path = command.commands[name], [*path, name]
        assert not hasattr(command, "commands"), f"gac {' '.join(path)}: a group, not a command"
        unknown = [w.split("=")[0] for w in words if w.startswith("--") and w.split("=")[0] not in _options(command)]
        assert not unknown, f"gac {' '.join(path)} takes no {unknown}"


@pytest.mark.parametrize("script", sorted({c[0] for c in _calls('"$PY" ') if c[0].startswith("benchmarks/")}))
def test_every_benchmark_call_names_options_the_benchmark_takes(script):
    flags = {w.split("=")[0] for c in _calls('"$PY" ') if c[0] == script for w in c[1:] if w.startswith("--")}
    shown = subprocess.run([sys.executable, script, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    unknown = sorted(f for f in flags if not re.search(rf"{re.escape(f)}\b", shown.stdout))
    assert not unknown, f"{script} takes no {unknown}"


def test_a_stop_sent_to_the_script_ends_the_step_under_way_and_returns_its_log(tmp_path):
    """The lease's limit may come before DEADLINE_S: the step under way is stopped at once (not at its own limit) and
    the archive holds its log so far. A fake Python stands in: every `-c` check passes, every command sleeps."""
    import os
    import signal
    import tarfile
    import time

    fake = tmp_path / "python"
    fake.write_text('#!/bin/sh\n[ "$1" = -c ] && exit 0\necho "started $*"\nexec sleep 60\n')
    fake.chmod(0o755)
    env = {**os.environ, "PYTHON": str(fake), "OUT": str(tmp_path / "out"), "LOGS": str(tmp_path / "logs"), "DEADLINE_S": "300"}
    proc = subprocess.Popen(["bash", str(SCRIPT), "timer"], env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None
    for line in proc.stdout:  # the first step is under way...
        if line.startswith("== platform"):
            break
    log = tmp_path / "logs" / "platform.log"
    for _ in range(3000):  # ...and its command has started (its log says so)
        if log.exists() and "started" in log.read_text():
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    try:
        assert proc.wait(timeout=30) == 143  # a hang check: the step's own limit is 60 s
    finally:
        os.killpg(proc.pid, signal.SIGKILL) if proc.poll() is None else None
    with tarfile.open(tmp_path / "out" / "gpu-session.tgz") as tar:
        assert "./platform.log" in tar.getnames()
