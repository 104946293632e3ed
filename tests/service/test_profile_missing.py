"""`gac align --profile-missing`: the points an alignment lacks are timed for real on this CPU,
stored (local database, or the live service over HTTP), and the second alignment is complete;
another platform's points are queued as a job instead; a long profile is not started unasked."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import uuid

import httpx
import pytest

from gac.commands.profile_missing import PROBE_WARMUP
from gac.contracts.measurements import Batch, RunInfo
from tests import factories as f
from tests.fixtures.database import BACKENDS
from tests.fixtures.memory import HUGE, needs_refused_allocations, refused_rows

pytestmark = pytest.mark.slow

# Two small low-rank weights: every curve point is a GEMM of a few microseconds.
M, IN, OUT = 8, 48, 40


def tiny_manifest(target: str | None = None, dims: tuple[float, ...] = (11.3, 19.6)) -> dict:
    doc = {
        "schema": "gac.manifest/v1",
        "model": "tiny",
        "compressor": "asvd",
        "budget": {"params": int(sum(dims) * (IN + OUT))},
        "workload": {"tokens": [M], "dtype": "float32"},
        "weights": [
            {"name": f"layers.{i}.proj", "kind": "lowrank", "out_features": OUT, "in_features": IN, "dim": d, "importance": 1.0 + i}
            for i, d in enumerate(dims)
        ],
    }
    if target:
        doc["target"] = {"platform": target}
    return doc


def gac(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gac", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )


def this_fingerprint() -> str:
    out = subprocess.run([sys.executable, "-m", "gac", "agent", "platform", "--threads", "1"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["fingerprint"]


def points(result: dict) -> int:
    return sum(len(m["dims"]) for m in result["missing"])


# Real kernels are timed (about a minute each): the local run on the embedded default, the one
# through the service on Postgres; both backends store points through the same code, tested elsewhere.
LOCAL_BACKEND = "sqlite" if "sqlite" in BACKENDS else BACKENDS[0]
SERVICE_BACKEND = "postgres" if "postgres" in BACKENDS else BACKENDS[0]


@pytest.mark.parametrize("database", [LOCAL_BACKEND], indirect=True)
def test_local_profile_missing_measures_exactly_the_missing_points(app, settings, tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(tiny_manifest()))
    env = f.cli_env(settings, tmp_path)

    before = gac(["align", str(path), "--json"], env)
    assert before.returncode == 0, before.stderr
    first = json.loads(before.stdout)
    assert first["platform"] == "rules only" and first["latency"]["complete"] is False
    wanted = points(first)
    assert wanted > 0 and all(m["estimated_seconds"] > 0 for m in first["missing"])

    out = gac(["align", str(path), "--profile-missing", "--yes", "--threads", "1", "--json"], env)
    assert out.returncode == 0, out.stderr
    # Nothing measured on this platform: a few points are timed first, and the estimate is their rate.
    assert f"timing some of the {wanted} points first" in out.stderr
    rate = re.search(r"profiling (\d+) missing points .* at the rate of the last (\d+) of the (\d+) points just timed", out.stderr)
    assert rate, out.stderr
    left, probe, probed = (int(g) for g in rate.groups())
    assert probed == PROBE_WARMUP + probe and left == wanted - probed
    # A first pass on a CPU: its curves are no lattice, so the next round asks for the rest of the
    # windows, and the estimate counts them at the probe's rate.
    later = sum(m["later_dims"] or 0 for m in first["missing"])
    assert later > 0 and f"with the {later} points the next round should ask for" in out.stderr, out.stderr
    # Each round measures what the alignment still lacks (new points can move the look-ahead).
    rounds = [int(n) for n in re.findall(r"^measured (\d+) points in", out.stderr, re.M)]
    assert rounds and rounds[0] == wanted
    # The whole, against the estimate made before the first round: said after a second round, only then.
    whole = rf"in all: measured {sum(rounds)} points in .* over {len(rounds)} rounds \(estimated .* before the first\)"
    assert bool(re.search(whole, out.stderr)) == (len(rounds) > 1) and out.stderr.count("in all:") == (len(rounds) > 1), out.stderr
    doc = json.loads(out.stdout)
    assert doc["platform"] == this_fingerprint()
    assert doc["missing"] == [] and doc["latency"]["complete"] is True
    assert doc["latency"]["unaligned_us"] > 0 and doc["latency"]["speedup"] > 0

    # Exactly those points were stored: aligning again needs nothing, and the table holds them. A point
    # the quality gate timed again (a spike beside its neighbours, on a noisy machine) has a row per run.
    from sqlalchemy import create_engine, text

    engine = create_engine(settings.url)
    with engine.connect() as c:
        stored = c.execute(text("select count(*) from (select distinct curve_id, x from measurements) as p")).scalar_one()
        assert stored == sum(rounds)
    engine.dispose()
    again = gac(["align", str(path), "--platform", doc["platform"], "--json"], env)
    assert again.returncode == 0 and json.loads(again.stdout)["missing"] == []


@needs_refused_allocations
@pytest.mark.parametrize("database", [LOCAL_BACKEND], indirect=True)
def test_points_this_machine_cannot_time_are_not_timed_again_in_later_rounds(app, settings, tmp_path):
    """A rank's first GEMM here has an operand larger than the machine: each such point fails, and
    the alignment after the first round still lacks them. Another round would only fail them again."""
    m = refused_rows()
    doc = tiny_manifest(dims=(11.3,))
    doc["workload"]["tokens"] = [m]
    doc["weights"][0].update(in_features=HUGE, out_features=16)
    doc["budget"]["params"] = int(11.3 * (HUGE + 16))
    path = tmp_path / "m.json"
    path.write_text(json.dumps(doc))

    out = gac(["align", str(path), "--profile-missing", "--yes", "--threads", "1", "--json"], f.cli_env(settings, tmp_path))
    assert out.returncode == 0, out.stderr
    failed = re.findall(rf"failed on cpu \(.+\): gemm float32 (m={m},n=\d+,k={HUGE}): RuntimeError", out.stderr)
    assert failed and len(failed) == len(set(failed)), out.stderr  # each failing point tried once
    rounds = re.findall(r"measured (\d+) points in .*; (\d+) failed", out.stderr)
    # Failed in the first round, in none after it (a later round may time other points the new ones call for: this
    # CPU's small curve is noisy enough, some runs, that its lattice fit cannot rule a dim out).
    assert rounds and int(rounds[0][1]) == len(failed) and all(int(n) == 0 for _, n in rounds[1:]), out.stderr
    doc = json.loads(out.stdout)
    assert points(doc) == len(failed), doc["missing"]  # what is still missing is what failed
    assert f"the {len(failed)} points still missing could not be timed on" in out.stderr and "not timed again" in out.stderr


def test_a_long_profile_is_not_started_unasked(app, settings, tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(tiny_manifest()))
    env = f.cli_env(settings, tmp_path)
    # Nothing is measured on this database yet, so the estimate is the time-cap upper bound (minutes).
    out = gac(["align", str(path), "--profile-missing", "--threads", "1"], env)
    assert out.returncode == 2 and "pass --yes" in out.stderr
    from sqlalchemy import create_engine, text

    engine = create_engine(settings.url)
    with engine.connect() as c:
        assert c.execute(text("select count(*) from measurements")).scalar_one() == 0
    engine.dispose()


@pytest.mark.parametrize("database", [SERVICE_BACKEND], indirect=True)
def test_profile_missing_against_the_live_service(live_service, tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(tiny_manifest()))
    env = os.environ | {"GAC_AGENT_SPOOL_DIR": str(tmp_path / "spool")}
    args = ["align", str(path), "--server", live_service.url, "--token", live_service.ingest_token]
    out = gac([*args, "--profile-missing", "--yes", "--threads", "1", "--json"], env)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    fingerprint = this_fingerprint()
    assert doc["platform"] == fingerprint and doc["missing"] == [] and doc["latency"]["complete"] is True
    r = httpx.get(
        f"{live_service.url}/v1/measurements",
        params={"platform": fingerprint, "limit": 5000},
        headers={"Authorization": f"Bearer {live_service.read_token}"},
    )
    assert r.status_code == 200 and len(r.json()["items"]) > 0


@pytest.mark.parametrize("database", [LOCAL_BACKEND], indirect=True)
def test_another_platforms_points_without_a_service_are_not_measured_here(app, settings, tmp_path):
    """Without --server nothing can queue them: it says whose platform it is and what would measure it."""
    from gac.service.ingest.service import LocalDatabase

    elsewhere = f.platform(device_name="Some GPU", device_kind="cuda")
    with LocalDatabase(settings.url) as db:
        db.ingest(Batch(id=uuid.uuid4(), platform=elsewhere, run=RunInfo(id=uuid.uuid4(), agent="t"), measurements=[f.measurement(64)]))
    path = tmp_path / "m.json"
    path.write_text(json.dumps(tiny_manifest(elsewhere.fingerprint())))
    out = gac(["align", str(path), "--profile-missing", "--yes", "--threads", "1"], f.cli_env(settings, tmp_path))
    assert out.returncode == 2, out.stderr
    said = " ".join(out.stderr.split())
    assert f"the alignment's platform {elsewhere.fingerprint()[:16]} is not this machine's cpu" in said, said
    assert "(or on another --device here), or use --server to queue a profiling job for it" in said, said


def test_another_platforms_points_are_queued_not_measured_here(live_service, tmp_path):
    elsewhere = f.platform(device_name="Some GPU", device_kind="cuda")
    batch = Batch(id=uuid.uuid4(), platform=elsewhere, run=RunInfo(id=uuid.uuid4(), agent="t"), measurements=[f.measurement(64)])
    r = httpx.post(f"{live_service.url}/v1/batches", json=f.body(batch), headers=f.auth(live_service.ingest_token))
    assert r.status_code == 201, r.text
    path = tmp_path / "m.json"
    path.write_text(json.dumps(tiny_manifest(elsewhere.fingerprint())))
    out = gac(
        [
            "align",
            str(path),
            "--server",
            live_service.url,
            "--token",
            live_service.ingest_token,
            "--profile-missing",
            "--yes",
            "--threads",
            "1",
            "--json",
        ],
        os.environ.copy(),
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert "queued" in out.stderr and "measured" not in out.stderr
    assert doc["platform"] == elsewhere.fingerprint() and doc["missing"]
    jobs = httpx.get(f"{live_service.url}/v1/jobs", headers=f.auth(live_service.admin_token))
    assert jobs.status_code == 200, jobs.text
    assert any(j["source"] == "align-missing" for j in jobs.json()["items"])


def test_enqueue_missing_is_sized_before_it_is_queued(live_service, tmp_path):
    # Its agent measured float32 GEMMs at 2.5x bfloat16's time: the service keeps that (not identity).
    elsewhere = f.platform(
        device_name="Unsized GPU", device_kind="cuda", fast_dtype="bfloat16", dtype_speed={"bfloat16": 0.4, "float32": 1.0}
    )
    batch = Batch(id=uuid.uuid4(), platform=elsewhere, run=RunInfo(id=uuid.uuid4(), agent="t"), measurements=[f.measurement(64)])
    assert httpx.post(f"{live_service.url}/v1/batches", json=f.body(batch), headers=f.auth(live_service.ingest_token)).status_code == 201
    path = tmp_path / "m.json"
    path.write_text(json.dumps(tiny_manifest(elsewhere.fingerprint())))
    args = ["align", str(path), "--server", live_service.url, "--token", live_service.ingest_token, "--enqueue-missing"]

    def queued() -> int:
        r = httpx.get(f"{live_service.url}/v1/jobs", headers=f.auth(live_service.admin_token))
        return sum(j["source"] == "align-missing" for j in r.json()["items"])

    unasked = gac(args, os.environ.copy())  # nothing measured at these shapes: minutes, as an upper bound
    assert unasked.returncode == 2 and "queueing" in unasked.stderr and "pass --yes to queue without asking" in unasked.stderr
    assert queued() == 0
    asked = gac([*args, "--yes", "--json"], os.environ.copy())
    assert asked.returncode == 0, asked.stderr
    assert queued() == 1
    # The platform was profiled in bfloat16, the manifest is float32: said before it is queued.
    said = " ".join(asked.stderr.split())
    assert f"platform {elsewhere.fingerprint()[:16]} was profiled in bfloat16, the manifest asks for float32" in said, said
    assert "float32 kernels there, whose GEMMs its agent measured at 2.5x the time of bfloat16's (far slower)" in said, said
    assert "--dtype bfloat16 aligns in what it measured" in said


def test_the_estimate_says_what_its_at_most_figure_covers(capsys):
    """A first pass's estimate counts the points it calls for next; its 'at most' counts these points
    only: said as such, the two figures do not contradict each other (2.4 min about, 57 s at most)."""
    from gac.commands import profile_missing as pm

    pm.confirm(28, 2, 144.0, "as a job", yes=True)
    said = capsys.readouterr().err
    assert "about 2.4 min" in said and "these 28 at most about 57 s" in said, said
    assert "the rest of the estimate is for the points they call for next" in said, said
    pm.confirm(28, 2, 30.0, "as a job", yes=True)  # under the bound: nothing else to account for
    assert "the rest of the estimate" not in capsys.readouterr().err


def test_the_points_a_first_pass_calls_for_are_expected_by_device():
    """A CPU's curves are no lattice: every other dim of the windows follows; a GPU's lattice rules most out."""
    from gac.commands import profile_missing as pm
    from gac.solver.profile_time import LATER_PASSES

    missing = [{"later_dims": 300}, {"later_dims": None}, {"later_dims": 100}]
    assert pm.later_points_expected(missing, 200, "cpu") == 400
    assert pm.later_points_expected(missing, 200, "cuda") == math.ceil(LATER_PASSES * 200)
    assert pm.later_points_expected([{"later_dims": 3}], 200, "cuda") == 3  # never more than the windows hold


def test_the_missing_data_line_says_a_bound_where_nothing_is_measured():
    from gac.commands.align import _missing_line
    from gac.contracts.alignment import MissingCurve

    def curve(dims, capped, later=None, seconds=100.0):
        return MissingCurve(op="gemm", dtype="float32", fixed_shape={"m": 8, "k": 64}, axis="n", dims=dims,
                            estimated_seconds=seconds, capped_dims=capped, later_dims=later)  # fmt: skip

    bound = _missing_line([curve([1, 2, 3], 3, later=40), curve([5, 6], 2)])
    assert bound.startswith("5 points on 2 curves: at most about 3.3 min to profile, with the up to 40 more of their windows"), bound
    assert "each point to its time cap" in bound
    estimate = _missing_line([curve([1, 2, 3], 0), curve([5, 6], 1)])
    assert "about 3.3 min to profile (1 of the points at their time cap: a bound)" in estimate and "at most" not in estimate, estimate
    assert "more of their windows" not in estimate
