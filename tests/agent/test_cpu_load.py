"""The busy-machine warning reads the cores in use now, not the minute-long load average."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gac.agent.cpu_load import Busy, busy_now, contention_warning

SPIN = "import sys; print('spinning', flush=True)\nwhile True: pass"


@pytest.mark.serial  # spins a core: it would slow the tests beside it
def test_a_core_spinning_now_reads_as_busy():
    spinner = subprocess.Popen([sys.executable, "-c", SPIN], stdout=subprocess.PIPE, text=True)
    try:
        assert spinner.stdout is not None and spinner.stdout.readline().strip() == "spinning"
        busy = busy_now(0.5)
    finally:
        spinner.kill()
        spinner.wait()
    assert busy is not None and busy.cores >= 0.6, busy
    assert "cores busy with other work" in busy.how


def test_without_proc_stat_the_load_average_stands_in(tmp_path):
    busy = busy_now(0.01, path=str(tmp_path / "no-such-stat"))
    assert busy is not None and busy.how.startswith("load average")


def test_more_threads_than_idle_cores_warn():
    text = contention_warning(Busy(0.9, "0.9 cores busy with other work"), cores=2, threads=2)
    assert text is not None and text.startswith("0.9 cores busy with other work on 2 cores: 2 timing threads")
    assert contention_warning(Busy(0.1, "0.1 cores busy with other work"), cores=2, threads=2) is None
    assert contention_warning(Busy(3.0, "load average 3.0"), cores=2, threads=1) is None  # one thread never waits on another
    assert contention_warning(None, cores=2, threads=2) is None
