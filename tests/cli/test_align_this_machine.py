"""`gac align` as a one-machine user runs it: after `gac profile`, an alignment that names no
platform uses this machine's and says so; an objective that needs latency data it lacks says so
on the terminal, also under --json."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.database import BACKENDS

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "examples/cpu-demo-lowrank.json"  # in bfloat16


def gac(*args: str, data: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "GAC_DATA_DIR": str(data), "COLUMNS": "200"}
    env.pop("GAC_DATABASE_URL", None)
    return subprocess.run([str(Path(sys.executable).parent / "gac"), *args], env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_after_a_profile_align_uses_this_machine_and_says_so(tmp_path):
    from gac.agent.platform import detect_platform
    from gac.service.ingest.service import LocalDatabase
    from tests.cli.machine import batches, needed_measurements

    # This machine as `gac profile --threads 1` stores it on a busy machine, profiled in float32.
    machine = detect_platform(dtypes=False)
    stored_as = machine.model_copy(update={"threads": 1 if machine.threads != 1 else 2})
    db = LocalDatabase(f"sqlite:///{tmp_path / 'gac.db'}")
    try:
        for batch in batches(stored_as, needed_measurements(json.loads(MANIFEST.read_text()), stored_as.fingerprint(), "float32")):
            db.ingest(batch)
    finally:
        db.close()

    # The manifest's bfloat16 was not profiled here: the platform is still this machine's, and the
    # line after it says how to align in what it measured.
    done = gac("align", str(MANIFEST), "--json", data=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"platform: this machine, {machine.device_name}" in done.stderr and stored_as.fingerprint()[:16] in done.stderr
    assert "profiled in float32, the manifest asks for bfloat16: --dtype float32" in done.stderr, done.stderr
    assert json.loads(done.stdout)["platform"] == stored_as.fingerprint()

    done = gac("align", str(MANIFEST), "--dtype", "float32", "--json", data=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "platform: this machine" in done.stderr and "the manifest asks for" not in done.stderr
    result = json.loads(done.stdout)
    assert result["platform"] == stored_as.fingerprint()
    assert result["latency"]["complete"] and result["latency"]["speedup"] > 0 and not result["missing"]

    # --dtype set what is asked: the line names the flag, not the manifest.
    done = gac("align", str(MANIFEST), "--dtype", "float16", data=tmp_path)
    assert "profiled in float32, --dtype asks for float16: --dtype float32" in " ".join(done.stderr.split()), done.stderr

    # --threads naming another count than the profile's: this machine all the same, and the count that is it is named.
    other = 2 if stored_as.threads == 1 else 1
    done = gac("align", str(MANIFEST), "--profile-missing", "--yes", "--threads", str(other), data=tmp_path)
    said = " ".join(done.stderr.split())
    assert done.returncode == 2 and f"is this machine timed with {stored_as.threads} thread(s), not {other}" in said, said
    assert f"pass --threads {stored_as.threads}" in said and "points in" not in said  # nothing timed

    # An agent taking jobs at this machine's own count registered that platform, with no curves yet: the
    # profile with curves is still the one aligned against.
    from datetime import UTC, datetime

    from gac.service.db import make_engine, make_sessionmaker
    from gac.service.ingest.repository import upsert_platform

    engine = make_engine(f"sqlite:///{tmp_path / 'gac.db'}")
    try:
        with make_sessionmaker(engine)() as session:
            upsert_platform(session, machine, datetime.now(UTC))
            session.commit()
    finally:
        engine.dispose()
    done = gac("align", str(MANIFEST), "--dtype", "float32", "--json", data=tmp_path)
    assert done.returncode == 0 and stored_as.fingerprint()[:16] in done.stderr, done.stderr
    assert json.loads(done.stdout)["latency"]["complete"]

    # --platform still chooses: the rules alone here, as before any profile.
    done = gac("align", str(MANIFEST), "--platform", "0" * 64, data=tmp_path)
    assert done.returncode != 0 and "platform: this machine" not in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("database", [BACKENDS[-1]], indirect=True)
def test_against_a_service_align_uses_this_machines_platform_there(live_service, tmp_path):
    from gac.agent.platform import detect_platform
    from gac.client import Client
    from tests.cli.machine import batches, needed_measurements

    machine = detect_platform(dtypes=False)
    with Client(live_service.url, live_service.ingest_token) as client:
        for batch in batches(machine, needed_measurements(json.loads(MANIFEST.read_text()), machine.fingerprint(), "float32")):
            client.upload(batch, by_columns=True)
    done = gac(
        "align",
        str(MANIFEST),
        "--server",
        live_service.url,
        "--token",
        live_service.read_token,
        "--dtype",
        "float32",
        "--json",
        data=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert f"platform: this machine, {machine.device_name}" in done.stderr
    result = json.loads(done.stdout)
    assert result["platform"] == machine.fingerprint() and result["latency"]["complete"]


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["frontier", "latency", "importance"])
def test_an_objective_without_latency_data_says_so_on_the_terminal(objective, tmp_path):
    """On a machine never profiled: rules only, no platform line, and a line when the objective asked for needed latency."""
    done = gac("align", str(MANIFEST), "--objective", objective, "--json", data=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)  # stdout stays the document alone
    assert result["platform"] == "rules only" and result["objective_kind"] == "importance" and result["frontier"] == []
    assert "platform: this machine" not in done.stderr
    said = f"objective {objective}: not computed, no latency data (rules only); the answer is importance-only"
    assert (said in done.stderr) == (objective != "importance"), done.stderr


def test_a_cpu_profiled_with_other_threads_is_found_by_its_thread_count():
    # A run stopped on a busy machine (timed with one thread) and resumed on a quiet one (two): the
    # platform it measured is this machine at one thread, and the resumed run must time with one.
    from gac.contracts.measurements import PlatformDescriptor

    now = PlatformDescriptor(device_kind="cpu", device_name="AMD EPYC", cores=4, threads=2, torch_version="2.13.0")
    busy = now.model_copy(update={"threads": 1}).fingerprint()
    assert now.threads_for(busy) == 1
    assert now.threads_for(now.fingerprint()) is None  # already the target
    assert now.threads_for("0" * 64) is None  # another machine altogether
    gpu = PlatformDescriptor(device_kind="cuda", device_name="NVIDIA H100 80GB HBM3", torch_version="2.11.0")
    assert gpu.threads_for(gpu.model_copy(update={"threads": 1}).fingerprint(), cores=16) is None  # threads name CPUs only
