"""A CSV of measurements read into batches (what `gac ingest` sends): its runs say when they were timed and what."""

from __future__ import annotations

import csv
import os
from datetime import datetime
from pathlib import Path

import pytest

from gac.agent.delivery.csv_rows import CsvError, csv_batches
from gac.contracts.measurements import PlatformDescriptor

H100_ROWS = Path(__file__).resolve().parents[1] / "solver" / "data" / "h100_small_bf16.csv"
H100 = PlatformDescriptor(device_kind="cuda", device_name="NVIDIA H100 80GB HBM3", driver_version="580.159.04", cuda_runtime="13.0")


def test_a_run_starts_at_its_first_rows_time_and_is_named_after_its_commonest_plan(tmp_path):
    with H100_ROWS.open() as fh:
        rows = list(csv.DictReader(fh))
    for row in rows[:3]:  # three of the first run's rows come from another plan
        row["plan"] = "missing for a model"
    path = tmp_path / "h100.csv"
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    os.utime(path, (1.0e9, 1.0e9))  # the file's time (2001) is not when its rows were timed
    runs = {b.run.id: b.run for b in csv_batches(path, H100)}
    for db_run in sorted({r["db_run"] for r in rows}):
        mine = [r for r in rows if r["db_run"] == db_run]
        run = next(run for run in runs.values() if run.started_at == min(datetime.fromisoformat(r["measured_at"] + "+00:00") for r in mine))
        plans = sorted({r["plan"] for r in mine}, key=lambda p: -sum(r["plan"] == p for r in mine))
        assert run.plan == (plans[0] if len(plans) == 1 else f"{plans[0]} (+1 other plan)")
    assert len(runs) == len({r["db_run"] for r in rows})


def test_a_file_read_again_by_another_version_makes_the_same_batches():
    """A row's id is made from the row as written: these are the ids the bundled file's batches had before the
    sm_clock_mhz column was read as an integer (reading it first made every id new, and a re-ingest stored every row twice)."""
    ids = [str(b.id) for b in csv_batches(H100_ROWS, H100)]
    assert ids == ["7facda43-046b-5a06-bf66-9c69f71398ae", "6bd51021-ebee-5083-9a92-4ba609920259"]


def test_a_whole_number_written_as_a_float_is_read_and_a_word_is_named(tmp_path):
    lines = H100_ROWS.read_text().splitlines()
    path = tmp_path / "pandas.csv"
    path.write_text("\n".join([lines[0], lines[1].replace(",1980,", ",1980.0,")]) + "\n")
    (batch,) = csv_batches(path, H100)
    assert batch.measurements[0].sm_clock_mhz == 1980
    path.write_text("\n".join([lines[0], lines[1].replace(",1980,", ",fast,")]) + "\n")
    with pytest.raises(CsvError, match=r"pandas.csv:2: sm_clock_mhz must be a whole number, not 'fast'"):
        list(csv_batches(path, H100))
