"""A user's mistakes end in one clear line and a non-zero exit, never a traceback; a results file
with a bad line still delivers every valid batch in it; the service's own curve download is a
measurements file `gac align` reads."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests import factories as f

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "examples" / "cpu-demo-lowrank.json"


def gac(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gac", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env or os.environ.copy(),
        stdin=subprocess.DEVNULL,
    )


def assert_clean_failure(out: subprocess.CompletedProcess, *needles: str) -> None:
    text = out.stdout + out.stderr
    assert out.returncode != 0, text
    assert "Traceback" not in text and "╭─" not in text, text  # rich's traceback frame
    for n in needles:
        assert n in text, text


def test_bad_files_and_settings(tmp_path):
    (tmp_path / "list.jsonl").write_text("[1, 2, 3]\n")
    (tmp_path / "bad.csv").write_text("x,y\n1,2\n")
    (tmp_path / "broken.json").write_text('{"schema": "gac.manifest/v1"')
    (tmp_path / "list.json").write_text("[]")
    cases = [
        (("align", str(MANIFEST), "--measurements", str(tmp_path / "nope.jsonl")), ("cannot read", "nope.jsonl")),
        (("align", str(MANIFEST), "--measurements", str(tmp_path / "bad.csv")), ("bad.csv", "CSV needs the columns op, dtype")),
        (("align", str(MANIFEST), "--measurements", str(tmp_path / "list.jsonl")), ("list.jsonl:1",)),
        (("align", str(tmp_path / "broken.json")), ("broken.json", "not valid JSON")),
        (("align", str(tmp_path / "list.json")), ("list.json", "object")),
        (("align", str(MANIFEST), "--objective", "fastest"), ("--objective",)),
        (("align", str(MANIFEST), "--window", "wide"), ("--window", "gac or paper")),
        (("align", str(MANIFEST), "--enqueue-missing", "--wait"), ("--wait", "give --server")),
        (("align", str(MANIFEST), "--server", "http://127.0.0.1:9", "--wait"), ("--wait", "--enqueue-missing")),
        (("ingest", str(tmp_path / "list.jsonl"), "--server", "http://127.0.0.1:9", "--token", "t"), ("line 1", "JSON object")),
        (("ingest", str(tmp_path / "list.jsonl")), ("--server",)),
    ]
    for args, needles in cases:
        assert_clean_failure(gac(*args), *needles)
    env = os.environ | {"GAC_DATABASE_URL": "postgresql+psycopg://postgres@127.0.0.1:5432/postgres", "GAC_DATA_DIR": str(tmp_path)}
    env.pop("GAC_SECRET_KEY", None)
    assert_clean_failure(gac("serve", env=env), "GAC_SECRET_KEY must be set")
    from tests.fixtures.database import BACKENDS

    if "postgres" in BACKENDS:  # migrations hash no tokens: `gac db current` needs no key (this database has no schema)
        current = gac("db", "current", env=env)
        assert "GAC_SECRET_KEY" not in current.stderr and "127.0.0.1:5432/postgres: " in current.stdout, current


def test_align_names_an_unwritable_out_a_missing_gpu_and_a_queue_with_no_platform(tmp_path):
    env = os.environ | {"GAC_DATA_DIR": str(tmp_path / "empty")}  # nothing profiled: the alignment is rules only
    assert_clean_failure(gac("align", str(MANIFEST), "--out", str(tmp_path / "no" / "x.json"), env=env), "no such directory")
    unwritable = gac("align", str(MANIFEST), "--out", str(tmp_path), env=env)  # a folder: found only when written
    assert_clean_failure(unwritable, f"--out {tmp_path}: Is a directory (the alignment is stored as ")
    assert_clean_failure(gac("align", str(MANIFEST), "--device", "cuda:7", env=env), "--device: cuda:7 is not here: torch ")
    queued = gac("align", str(MANIFEST), "--enqueue-missing", env=env)  # a job is one platform's: none is named
    assert_clean_failure(queued, "--enqueue-missing: no platform to queue the missing points for")
    # A service's platform id named without --server: the local database is the one that lacks it.
    elsewhere = gac("align", str(MANIFEST), "--platform", "9", "--enqueue-missing", env=env)
    assert_clean_failure(elsewhere, "no platform '9' in the local database sqlite:///", "(--server aligns on a service)")


@pytest.mark.slow
def test_ingest_reports_a_bad_line_and_sends_the_rest(live_service, tmp_path):
    good = f.batch(rows=5, plat=f.platform(device_name="After the bad line"))
    path = tmp_path / "results.jsonl"
    path.write_text("[1, 2, 3]\n" + json.dumps(f.body(good)) + "\n")
    out = gac("ingest", str(path), "--server", live_service.url, "--token", live_service.ingest_token)
    assert_clean_failure(out, "line 1")
    page = httpx.get(
        f"{live_service.url}/v1/measurements", params={"platform": good.platform.fingerprint()}, headers=f.auth(live_service.read_token)
    ).json()
    assert page["total"] == 5
    assert out.returncode == 1  # some lines sent
    # A text file none of whose lines is a batch is the wrong file: exit 2, as for a binary one.
    path.write_text("not json\n" + json.dumps({"schema": "gac.batch/v1"}) + "\n")
    wrong = gac("ingest", str(path), "--server", live_service.url, "--token", live_service.ingest_token)
    assert_clean_failure(wrong, "line 1", "none of its lines is a batch this gac reads")
    assert wrong.returncode == 2
    path.write_text("")  # what a run stopped before its first batch leaves
    empty = gac("ingest", str(path), "--server", live_service.url, "--token", live_service.ingest_token)
    assert empty.returncode == 0 and f"{path} holds no batches: nothing sent" in empty.stderr, empty.stdout + empty.stderr


@pytest.mark.slow
def test_ingest_with_a_token_the_service_refuses_stops_at_the_first_line(live_service, tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(f.body(f.batch(rows=2))) + "\n" for _ in range(6)))
    for token, status in (("not-a-token", "401"), (live_service.read_token, "403")):
        out = gac("ingest", str(path), "--server", live_service.url, "--token", token)
        assert_clean_failure(out, f"line 1: HTTP {status}", "stopping: check --token / GAC_TOKEN")
        assert "line 2" not in out.stdout + out.stderr and "more bad line" not in out.stdout + out.stderr


def test_a_curve_download_is_a_measurements_file(client, ingest_token, tmp_path):
    from gac.solver.lookup import FileLookup
    from tests.service.test_align_api import manifest, measured_platform

    plat = measured_platform(client, ingest_token)
    for c in client.get(f"/v1/platforms/{plat.fingerprint()}/curves").json():  # axis n (a GEMM's N) and k
        curve = client.get(f"/v1/curves/{c['id']}").json()
        download = client.get(f"/v1/curves/{c['id']}/download")
        assert download.status_code == 200
        (tmp_path / "curve.csv").write_text(download.text)
        meta = curve["curve"]
        lookup = FileLookup.from_csv(tmp_path / "curve.csv")
        assert lookup.platform == plat.fingerprint()  # the file names its platform
        read = lookup.curve(meta["op"], meta["dtype"], curve_fixed(meta), meta["axis"])
        assert {x: p.latency_us for x, p in read.items()} == {p["x"]: p["median_us"] for p in curve["points"]}
        assert {p.n for p in read.values()} == {p["n"] for p in curve["points"]}
    path = tmp_path / "m.json"
    path.write_text(json.dumps(manifest()))
    out = gac("align", str(path), "--measurements", str(tmp_path / "curve.csv"), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["schema"] == "gac.alignment/v1"


def curve_fixed(meta: dict) -> dict[str, int]:
    from gac.contracts.measurements import parse_shape_key

    return meta["fixed"] if isinstance(meta.get("fixed"), dict) else parse_shape_key(meta["fixed_key"])


def test_a_compressors_config_is_not_a_manifest_and_says_which_import_makes_one():
    config = MANIFEST.parent / "llama3-8b-asvd-config.json"
    out = gac("align", str(config))
    assert_clean_failure(out, "not a GAC manifest", f"`gac import asvd {config}`")
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr  # not a line per key it does not know


def test_an_unknown_dtype_or_device_is_named_with_the_choices():
    out = gac("profile", "--dtype", "fp8")
    assert_clean_failure(out, "'fp8' is not a dtype GAC times: choose from float16, bfloat16, float32")
    assert "plan error" not in out.stderr
    assert_clean_failure(gac("agent", "selftest", "--device", "gpu"), "unknown device 'gpu' (use cpu, cuda:N or auto)")
    empty = gac("align", "examples/cpu-demo-lowrank.json", "--device", "")  # --device "$DEVICE", the variable unset
    assert_clean_failure(empty, "--device: empty device name (use cpu, cuda:N or auto)")


def test_serve_refuses_a_bad_port_and_a_missing_database_in_one_line(tmp_path):
    env = {**os.environ, "GAC_DATA_DIR": str(tmp_path)}
    assert_clean_failure(gac("serve", "--port", "99999", env=env), "--port", "65535")
    assert_clean_failure(gac("serve", env={**env, "GAC_PORT": "0"}), "GAC_PORT")
    missing = {**env, "GAC_SECRET_KEY": "k", "GAC_DATABASE_URL": "postgresql+psycopg://postgres@127.0.0.1:5432/gac_no_such_db"}
    out = gac("serve", env=missing)
    assert_clean_failure(out, "refusing to start", "gac_no_such_db")
    assert len((out.stdout + out.stderr).strip().splitlines()) <= 2, out.stderr


def test_serve_on_a_port_in_use_says_so_in_one_line_before_starting(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = gac("serve", "--port", str(port), env={**os.environ, "GAC_DATA_DIR": str(tmp_path)})
    assert_clean_failure(out, f"refusing to start: cannot listen on 127.0.0.1:{port}")
    assert "starting on" not in out.stdout and len((out.stdout + out.stderr).strip().splitlines()) == 1, out.stdout + out.stderr
    assert not (tmp_path / "gac.db").exists()  # refused before the database was made


def test_db_current_on_a_new_data_directory_looks_without_making_it(tmp_path):
    out = gac("db", "current", env={**os.environ, "GAC_DATA_DIR": str(tmp_path / "new")})
    assert out.returncode == 1 and "no database yet" in out.stdout, out.stdout + out.stderr
    assert not (tmp_path / "new").exists()


def test_a_database_a_newer_gac_migrated_is_said_so_and_a_revision_alembic_lacks_in_one_line(tmp_path):
    """Restored from a newer version, or rolled back: `gac db upgrade` cannot help, and alembic's traceback would not say why."""
    import sqlite3

    env = {**os.environ, "GAC_DATA_DIR": str(tmp_path)}
    assert gac("db", "upgrade", env=env).returncode == 0
    nowhere = gac("db", "upgrade", "nosuchrev", env=env)
    assert_clean_failure(nowhere, "cannot migrate:", "nosuchrev")
    with sqlite3.connect(tmp_path / "gac.db") as db:
        db.execute("UPDATE alembic_version SET version_num = '0099'")
    with socket.socket() as s:  # a free port: the port is checked first
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    for args in (("db", "upgrade"), ("serve", "--port", port), ("token", "list")):
        out = gac(*args, env=env)
        assert_clean_failure(out, "0099, newer than this version of GAC knows", "a newer GAC migrated it")
        assert "run `gac db upgrade`" not in out.stdout + out.stderr


def test_serve_names_a_database_it_cannot_open_and_where_its_url_came_from(tmp_path):
    (tmp_path / "a-file").write_text("")
    with socket.socket() as s:  # a free port: the port is checked first
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    for url, said in (
        (f"sqlite:///{tmp_path}/nope/gac.db", "no folder"),
        (f"sqlite:///{tmp_path}/a-file/gac.db", "is a file, not a folder"),
    ):
        out = gac("serve", "--port", port, env={**os.environ, "GAC_DATA_DIR": str(tmp_path), "GAC_DATABASE_URL": url})
        assert_clean_failure(out, "refusing to start: cannot open the database", "(set by GAC_DATABASE_URL)", said)
        assert len((out.stdout + out.stderr).strip().splitlines()) == 1, out.stdout + out.stderr


def test_a_database_a_command_cannot_open_is_one_line_naming_where_its_url_came_from(tmp_path):
    """`gac align --db`, `gac token`, `gac profile`: a URL we do not speak, a folder that is a file or is not there, a
    file that is no database. Each is one line naming --db or the GAC_ setting, exit 2 (each was a traceback)."""
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "gac.db").write_bytes(b"x\xff")
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    env = {**os.environ, "GAC_DATA_DIR": str(tmp_path / "data")}
    env.pop("GAC_DATABASE_URL", None)
    cases = [
        (("align", str(MANIFEST), "--db", "garbage://x"), env, ("configuration error: --db: must be sqlite:///PATH", "not garbage")),
        (("align", str(MANIFEST), "--db", f"sqlite:///{a_file}/x.db"), env, ("(set by --db)", "is a file, not a folder")),
        (("align", str(MANIFEST), "--db", f"sqlite:///{tmp_path}/typo/gac.db"), env, ("(set by --db): no folder", "typo")),
        (("align", str(MANIFEST), "--db", "sqlite:///:memory:"), env, ("--db: sqlite:///PATH needs a file",)),
        (("align", str(MANIFEST), "--db", f"sqlite:///{damaged}/gac.db"), env, ("(set by --db): file is not a database",)),
        (("token", "list"), {**env, "GAC_DATA_DIR": str(damaged)}, ("(set by GAC_DATA_DIR): file is not a database",)),
        (("token", "list"), {**env, "GAC_DATA_DIR": str(a_file)}, ("(set by GAC_DATA_DIR)", "File exists")),
        (("profile", "--plan", "quick"), {**env, "GAC_DATA_DIR": str(damaged)}, ("(set by GAC_DATA_DIR): file is not a database",)),
    ]
    for args, environment, needles in cases:
        out = gac(*args, env=environment)
        assert_clean_failure(out, *needles)
        assert out.returncode == 2, out.stderr
    assert not (tmp_path / "typo").exists()  # a mistyped path is said, not made (the data directory is ours: made)
    (tmp_path / "my dir").mkdir()  # the folder as SQLAlchemy reads the URL: %20 is a space
    spaced = gac("align", str(MANIFEST), "--db", f"sqlite:///{tmp_path}/my%20dir/gac.db", env=env)
    assert spaced.returncode == 0 and (tmp_path / "my dir" / "gac.db").exists(), spaced.stderr


def test_a_binary_file_and_bare_measurements_are_not_results_files(tmp_path):
    binary = tmp_path / "a.out"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 8 + b"\n\xd0\xff\n")
    out = gac("ingest", str(binary), "--server", "http://127.0.0.1:9", "--token", "t")
    assert_clean_failure(out, "a.out is not a results file", "each line must be a batch")
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert_clean_failure(gac("align", str(binary)), "a.out is not a manifest", "not UTF-8")
    assert_clean_failure(gac("align", str(MANIFEST), "--measurements", str(binary)), "a.out is not a measurements file")
    row = f.body(f.batch(rows=1))["measurements"][0]
    bare = tmp_path / "rows.jsonl"
    bare.write_text("".join(json.dumps(row) + "\n" for _ in range(10)))
    out = gac("ingest", str(bare), "--server", "http://127.0.0.1:9", "--token", "t")
    assert_clean_failure(out, "line 1: a single measurement, not a batch", "each line must be a batch", "7 more bad line")
    assert "validation error" not in out.stderr and len(out.stderr.strip().splitlines()) <= 5, out.stderr


def test_an_unreachable_server_stops_the_agent_before_it_times_anything(tmp_path):
    out = gac(
        "agent",
        "run",
        "--server",
        "http://127.0.0.1:1",
        "--token",
        "t",
        "--plan",
        "quick",
        "--threads",
        "1",
        "--spool-dir",
        str(tmp_path / "spool"),
    )
    assert_clean_failure(out, "cannot reach http://127.0.0.1:1", "nothing timed", "--spool", "--out")
    assert "fingerprint" not in out.stderr and "plan quick" not in out.stderr  # no session opened, no plan begun
    assert not (tmp_path / "spool").exists() or not any((tmp_path / "spool").iterdir())
    assert_clean_failure(gac("agent", "run", "--spool", "--out", str(tmp_path / "r.jsonl")), "--spool", "--server")


def test_align_names_the_manifests_budget_not_an_http_path(tmp_path):
    """The budget check happens in the service's code on every path; the CLI names the file's entry."""
    small = tmp_path / "small.json"
    small.write_text(json.dumps({**json.loads(MANIFEST.read_text()), "budget": {"params": 100_000}}))
    env = {**os.environ, "GAC_DATA_DIR": str(tmp_path)}
    measurements = tmp_path / "m.jsonl"
    measurements.write_text(json.dumps(f.body(f.batch(rows=3))) + "\n")
    for args in ((), ("--measurements", str(measurements))):
        out = gac("align", str(small), *args, env=env)
        assert_clean_failure(out, f"{small}: budget:", "raise the budget to at least", "the compressor's own dims")
        assert "body." not in out.stderr and out.returncode == 2, out.stderr
    bad = tmp_path / "bad.json"
    doc = json.loads(MANIFEST.read_text())
    doc["weights"][2]["dim"] = -3
    bad.write_text(json.dumps(doc))
    out = gac("align", str(bad), "--epsilon", "0.1", env=env)
    assert_clean_failure(out, f"{bad}: weights[2]")


@pytest.mark.slow
def test_align_through_a_server_names_the_manifests_budget(live_service, tmp_path):
    small = tmp_path / "small.json"
    small.write_text(json.dumps({**json.loads(MANIFEST.read_text()), "budget": {"params": 100_000}}))
    out = gac("align", str(small), "--server", live_service.url, "--token", live_service.admin_token)
    assert_clean_failure(out, f"{small}: budget:", "raise the budget to at least")
    assert "body." not in out.stderr and out.returncode == 2, out.stderr


def test_align_through_a_server_says_which_token_it_needs(live_service):
    env = {k: v for k, v in os.environ.items() if k != "GAC_TOKEN"}
    out = gac("align", str(MANIFEST), "--server", live_service.url, env=env)
    assert_clean_failure(out, "401", "no token was sent: aligning on a service needs any token (read scope or above)", "--scope read")
    assert "(this client has no token: --token or $GAC_TOKEN)" in out.stderr and "Client(url, token)" not in out.stderr  # the CLI's words
    read = ["--token", live_service.read_token]
    out = gac("align", str(MANIFEST), "--server", live_service.url, *read, "--enqueue-missing", "--yes", env=env)
    needs = "check the token: aligning needs any token, queueing jobs (--enqueue-missing) an ingest or admin one"
    assert_clean_failure(out, "403", needs, "--scope ingest")


def test_import_reads_yaml_as_align_does(tmp_path):
    import yaml

    config = ROOT / "examples" / "llama3-8b-asvd-config.json"
    importance = ROOT / "examples" / "llama3-8b-asvd-importance.json"
    as_yaml = tmp_path / "config.yaml"
    as_yaml.write_text(yaml.safe_dump(json.loads(config.read_text()), sort_keys=False))  # the weights in file order
    scores = tmp_path / "importance.yml"
    scores.write_text(yaml.safe_dump(json.loads(importance.read_text()), sort_keys=False))
    from_json = gac("import", "asvd", str(config), "--importance", str(importance), "-o", str(tmp_path / "a.json"))
    from_yaml = gac("import", "asvd", str(as_yaml), "--importance", str(scores), "-o", str(tmp_path / "b.json"))
    assert from_json.returncode == 0 and from_yaml.returncode == 0, from_yaml.stderr
    assert json.loads((tmp_path / "a.json").read_text()) == json.loads((tmp_path / "b.json").read_text())
    (tmp_path / "dup.yaml").write_text("truncation_ranks: {}\ntruncation_ranks: {}\n")
    assert_clean_failure(gac("import", "asvd", str(tmp_path / "dup.yaml")), "appears twice")


def _one_weight_manifest(tmp_path: Path) -> Path:
    """A bf16 manifest of one linear (out 128 of 256 in), its dim 100.3: what the CSVs below are aligned against."""
    weight = {"name": "w", "kind": "linear_out", "out_features": 128, "in_features": 256, "dim": 100.3, "importance": 1}
    doc = {"model": "m", "budget": {"params": 100 * 256}, "workload": {"tokens": [256], "dtype": "bfloat16"}, "weights": [weight]}
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps(doc))
    return manifest


def test_a_measurements_file_of_two_platforms_is_aligned_on_the_one_named(tmp_path):
    """Curve downloads name their platform; concatenated, they hold several: --platform picks one, as with the service."""
    rows = "".join(f'gemm,bfloat16,n,"k=256,m=256",{x},{10.0 + x / 8},{p}\n' for p in ("a" * 64, "b" * 64) for x in range(64, 129))
    path = tmp_path / "two.csv"
    path.write_text("op,dtype,axis,fixed,x,median_us,platform\n" + rows)
    manifest = _one_weight_manifest(tmp_path)
    assert_clean_failure(gac("align", str(manifest), "--measurements", str(path)), "holds 2 platforms, pick one")
    out = gac("align", str(manifest), "--measurements", str(path), "--platform", "b" * 8, "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["platform"] == "b" * 64


def test_a_measurements_file_in_another_dtype_says_which_it_holds(tmp_path):
    """A CSV without a platform column is named after its file; a dtype it lacks is named beside those it holds."""
    rows = "".join(f'gemm,float16,n,"k=256,m=256",{x},{10.0 + x / 8}\n' for x in range(64, 129))
    path = tmp_path / "h100.csv"
    path.write_text("op,dtype,axis,fixed,x,median_us\n" + rows)
    manifest = _one_weight_manifest(tmp_path)
    out = gac("align", str(manifest), "--measurements", str(path))
    assert out.returncode == 0, out.stderr
    said = " ".join(out.stderr.split())
    assert "h100.csv holds curves in float16, the manifest asks for bfloat16: --dtype float16 aligns in what it measured" in said, said
    out = gac("align", str(manifest), "--measurements", str(path), "--dtype", "fp16", "--json")
    assert out.returncode == 0 and "holds curves" not in out.stderr, out.stderr
    assert json.loads(out.stdout)["platform"] == "h100.csv"


def test_a_key_given_twice_is_named_not_overwritten(tmp_path):
    """JSON and YAML readers keep the last of two equal keys; a manifest's author meant one of them."""
    doc = json.loads(MANIFEST.read_text())
    text = json.dumps(doc)
    (tmp_path / "dup.json").write_text(text.replace('"model": ', '"model": "first", "model": ', 1))
    assert_clean_failure(gac("align", str(tmp_path / "dup.json")), "dup.json: key 'model' appears twice")
    (tmp_path / "nested.json").write_text(text.replace('"dim": ', '"dim": 1, "dim": ', 1))  # said with the object that gives it
    assert_clean_failure(gac("align", str(tmp_path / "nested.json")), "nested.json: in weights.0: key 'dim' appears twice")
    (tmp_path / "dup.yaml").write_text("model: a\nmodel: b\n")
    assert_clean_failure(gac("align", str(tmp_path / "dup.yaml")), "dup.yaml: key 'model' appears twice")


def test_a_yaml_manifests_exponents_are_numbers(tmp_path):
    """YAML 1.1 (PyYAML's) reads 1e-3 as text; a manifest's importance written so is a number, as in JSON."""
    import yaml

    doc = json.loads(MANIFEST.read_text())
    text = yaml.safe_dump(doc, sort_keys=False).replace(f"importance: {doc['weights'][0]['importance']}", "importance: 2e-5", 1)
    assert "importance: 2e-5" in text
    (tmp_path / "m.yaml").write_text(text)
    out = gac("align", str(tmp_path / "m.yaml"), "--json", env=os.environ | {"GAC_DATA_DIR": str(tmp_path / "d")})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["weights"]
