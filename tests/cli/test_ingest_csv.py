"""`gac ingest FILE.csv --platform-file P.json`: measurements timed elsewhere, sent to the real service over HTTP;
a second send stores nothing twice, and a bad file or row is named before anything is sent."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import httpx
import pytest

from gac.contracts.measurements import PlatformDescriptor
from tests import factories as f
from tests.cli.test_user_mistakes import gac

pytestmark = pytest.mark.slow  # the real service under uvicorn

H100_ROWS = Path(__file__).resolve().parents[1] / "solver" / "data" / "h100_small_bf16.csv"
H100 = PlatformDescriptor(device_kind="cuda", device_name="NVIDIA H100 80GB HBM3", driver_version="580.159.04", cuda_runtime="13.0")


def platform_file(tmp_path: Path, platform: PlatformDescriptor) -> Path:
    """As `gac agent platform` prints it: the descriptor and its fingerprint."""
    path = tmp_path / "platform.json"
    path.write_text(json.dumps({**platform.model_dump(mode="json", exclude_none=True), "fingerprint": platform.fingerprint()}))
    return path


def stored(svc, fingerprint: str) -> list[dict]:
    page = httpx.get(f"{svc.url}/v1/measurements", params={"platform": fingerprint, "limit": 5000}, headers=f.auth(svc.read_token))
    if page.status_code == 404 and "no platform" in page.text:  # nothing was ever stored for it
        return []
    assert page.status_code == 200, page.text
    return page.json()["items"]


def test_a_csv_of_measurements_is_stored_once_however_often_it_is_sent(live_service, tmp_path):
    svc, plat = live_service, platform_file(tmp_path, H100)
    args = ("--platform-file", str(plat), "--server", svc.url, "--token", svc.ingest_token)
    lines = H100_ROWS.read_text().splitlines()
    path = tmp_path / "h100.csv"
    path.write_text("\n".join([*lines, lines[7]]) + "\n")  # a row given twice is one measurement
    with path.open() as fh:
        rows = list(csv.DictReader(fh))
    distinct = {tuple(r.values()) for r in rows}
    assert len(distinct) == len(rows) - 1

    first = gac("ingest", str(path), *args)
    assert first.returncode == 0, first.stdout + first.stderr
    items = stored(svc, H100.fingerprint())
    assert len(items) == len(distinct)
    by_run = {(r["run_id"], r["sweep_axis"]) for r in items}
    assert len({run for run, _ in by_run}) == len({r["db_run"] for r in rows})  # the file's runs stay apart
    some = next(r for r in items if r["sweep_axis"] == "k" and r["shape"]["k"] == 104)
    assert (some["shape"], some["dtype"], some["n"], some["timer"]) == (
        {"m": 256, "n": 256, "k": 104},
        "bfloat16",
        2000,
        "cuda-events+l2-flush",
    )

    import os

    os.utime(path, (1.0e9, 1.0e9))  # a copy of the file, downloaded again: another time, the same rows
    again = gac("ingest", str(path), *args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"0 new, {len(distinct)} duplicate" in again.stderr, again.stderr
    assert len(stored(svc, H100.fingerprint())) == len(distinct)


def test_a_curve_download_laid_out_by_axis_reads_its_samples_column(live_service, tmp_path):
    """A download names the swept column after the axis (here n) and the sample count `samples`."""
    cpu = f.platform(device_name="Elsewhere CPU")
    path = tmp_path / "curve.csv"
    path.write_text(
        "op,dtype,axis,fixed,n,median_us,p10_us,p90_us,mean_us,samples,measurements,platform\n"
        + "".join(
            f'gemm,float32,n,"k=64,m=8",{n},{1 + n / 64},{n / 64},{2 + n / 64},{1 + n / 64},40,1,{cpu.fingerprint()}\n' for n in (8, 16, 24)
        )
    )
    out = gac(
        "ingest",
        str(path),
        "--platform-file",
        str(platform_file(tmp_path, cpu)),
        "--server",
        live_service.url,
        "--token",
        live_service.ingest_token,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert sorted((r["shape"]["n"], r["n"]) for r in stored(live_service, cpu.fingerprint())) == [(8, 40), (16, 40), (24, 40)]


def test_a_curve_downloaded_from_the_service_and_sent_back_counts_nothing_twice(live_service, tmp_path):
    """A download holds each point's summary, not its rows: the points the service shows figure for figure are not sent."""
    svc, plat = live_service, platform_file(tmp_path, H100)
    args = ("--platform-file", str(plat), "--server", svc.url, "--token", svc.ingest_token)
    assert gac("ingest", str(H100_ROWS), *args).returncode == 0
    before = len(stored(svc, H100.fingerprint()))
    (curve, *_) = httpx.get(f"{svc.url}/v1/platforms/{H100.fingerprint()}/curves").json()
    download = tmp_path / "download.csv"
    download.write_bytes(httpx.get(f"{svc.url}/v1/curves/{curve['id']}/download").content)
    for _ in range(2):  # and again: nothing is sent either time
        back = gac("ingest", str(download), *args)
        assert back.returncode == 0, back.stdout + back.stderr
        said = back.stdout + back.stderr
        assert f"{curve['points']} points of the curve download {download} are what {svc.url} shows already" in said, said
        assert "nothing sent" not in said, said
    assert len(stored(svc, H100.fingerprint())) == before
    # A point the service shows otherwise (here a new dim) is sent.
    with download.open() as fh:
        rows = list(csv.DictReader(fh))
    rows[0][curve["axis"]] = "4000"
    with download.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    assert gac("ingest", str(download), *args).returncode == 0
    assert len(stored(svc, H100.fingerprint())) == before + 1
    # A table's rows are measurements, whatever their figures: the same figures measured again are stored again.
    again = tmp_path / "again.csv"
    with H100_ROWS.open() as fh:
        table = list(csv.DictReader(fh))
    table[0]["measured_at"] = "2026-11-30 06:00:00"  # another measurement, with the first one's figures
    with again.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerow(table[0])
    assert gac("ingest", str(again), *args).returncode == 0
    assert len(stored(svc, H100.fingerprint())) == before + 2


def test_a_csv_without_its_platform_or_with_a_bad_row_sends_nothing_and_says_why(live_service, tmp_path):
    svc = live_service
    server = ("--server", svc.url, "--token", svc.ingest_token)
    no_platform = gac("ingest", str(H100_ROWS), *server)
    assert no_platform.returncode == 2 and "--platform-file" in no_platform.stdout + no_platform.stderr

    bad = tmp_path / "bad.csv"
    lines = H100_ROWS.read_text().splitlines()
    bad.write_text("\n".join([*lines[:5], lines[5].replace("bfloat16", "bfloat17"), *lines[6:]]) + "\n")
    out = gac("ingest", str(bad), "--platform-file", str(platform_file(tmp_path, H100)), *server)
    said = " ".join((out.stdout + out.stderr).split())
    assert out.returncode == 2 and "bad.csv:6: dtype" in said, said
    # A blank line is a line of the file; a short row's missing cells are empty, not a crash.
    bad.write_text("\n".join([*lines[:3], "", lines[3], lines[4][: lines[4].index("bfloat16") + 9]]) + "\n")
    out = gac("ingest", str(bad), "--platform-file", str(platform_file(tmp_path, H100)), *server)
    said = " ".join((out.stdout + out.stderr).split())
    assert out.returncode == 2 and "bad.csv:6:" in said and "Traceback" not in said, said
    assert stored(svc, H100.fingerprint()) == []  # the rows before it were not sent either

    other = f.platform(device_name="Not the H100")
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({**other.model_dump(mode="json", exclude_none=True), "fingerprint": H100.fingerprint()}))
    out = gac("ingest", str(H100_ROWS), "--platform-file", str(wrong), *server)
    assert out.returncode == 2 and "edited by hand" in out.stdout + out.stderr
