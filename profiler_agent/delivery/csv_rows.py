"""Measurements in a CSV file as batches for `gac ingest`: points timed elsewhere (a curve downloaded
from another service, a table of another tool's) with the platform they were timed on.

Each row's id is derived from the platform and the row itself, and each run's from the platform
and the file's run column, so a file sent twice is stored once.
"""

from __future__ import annotations

import csv
import json
import math
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gac.contracts.measurement_csv import layout_problem, row_point
from gac.contracts.measurements import Batch, Measurement, PlatformDescriptor, RunInfo

CSV_BATCH_ROWS = 1000
# Fixed for ever: ids made from it must come out the same on every machine and release.
_IDS = uuid.UUID("6f1d3c1e-3b52-4c8e-9f0e-2a6b1b9f6c41")
_SPREAD = ("p10_us", "p90_us")  # optional for an alignment read from a file, needed in a stored row
_RUN_COLUMNS = ("run", "db_run")


class CsvError(ValueError):
    """A file that is not a measurements CSV, or a row of it that is not a measurement; says where."""


def platform_from_file(path: Path) -> PlatformDescriptor:
    """The platform JSON `gac agent platform` prints (its fingerprint, when present, must match)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CsvError(f"{path}: not a platform JSON document ({err})") from None
    if not isinstance(doc, dict):
        raise CsvError(f"{path}: a platform is a JSON object, as `gac agent platform` prints")
    said = doc.pop("fingerprint", None)
    try:
        platform = PlatformDescriptor.model_validate(doc)
    except ValidationError as err:
        e = err.errors(include_url=False)[0]
        raise CsvError(f"{path}: {'.'.join(str(p) for p in e['loc']) or 'the document'}: {e['msg']}") from None
    if said is not None and said != platform.fingerprint():
        raise CsvError(f"{path}: its fingerprint {str(said)[:16]} is not its fields' ({platform.fingerprint()[:16]}): edited by hand?")
    return platform


def _measurement(rec: dict[str, str], platform: str, when: datetime) -> Measurement:
    shape, axis, n = row_point(rec)
    if not n:
        raise ValueError("no sample count: a `samples` column (or `n`, where n is not the swept axis)")
    if rec.get("platform") and rec["platform"] != platform:
        raise ValueError(f"the row's platform {rec['platform'][:16]} is not --platform-file's ({platform[:16]})")
    median = float(rec["median_us"])
    fields: dict[str, Any] = {
        "op": rec["op"],
        "dtype": rec["dtype"],
        "shape": shape,
        "sweep_axis": axis,
        "median_us": median,
        "p10_us": float(rec["p10_us"]),
        "p90_us": float(rec["p90_us"]),
        "mean_us": float(rec.get("mean_us") or median),
        "n": int(n),
        "timer": rec.get("timer") or "csv",
    }
    for name in ("measured_at", "stop", "sm_clock_mhz", "backend", "kernel"):
        if rec.get(name):
            fields[name] = rec[name]
    # The id: the platform and what the row says (the shape in key order, each field as written), not the file's
    # time: a copy of the file is the same rows, and so is the same file read by another version of this code.
    key = json.dumps([platform, sorted({**fields, "shape": sorted(shape.items())}.items())], default=str)
    if "sm_clock_mhz" in fields:
        fields["sm_clock_mhz"] = _whole(fields["sm_clock_mhz"], "sm_clock_mhz")
    return Measurement.model_validate({"id": uuid.uuid5(_IDS, key), "measured_at": when, **fields})


def _whole(text: str, column: str) -> int:
    """A whole number as a CSV writes it: '1980', or '1980.0' (pandas writes an integer column with a gap so)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value.is_integer():
        raise ValueError(f"{column} must be a whole number, not {text!r}")
    return int(value)


def csv_batches(path: Path, platform: PlatformDescriptor, rows_per_batch: int = CSV_BATCH_ROWS) -> Iterator[Batch]:
    """The file's rows as batches, per run (a `run` or `db_run` column; else one run for the file), a row given twice
    once. Rows without a `measured_at` column take the file's modification time; a run starts at its first row's
    time and is named after its rows' commonest plan. Raises CsvError naming the line that is wrong."""
    fingerprint = platform.fingerprint()
    when = datetime.fromtimestamp(path.stat().st_mtime, UTC)
    runs: dict[str, tuple[RunInfo, list[Measurement]]] = {}
    plans: dict[str, Counter[str]] = {}  # per run: how many of its rows each plan gave
    seen: set[uuid.UUID] = set()
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in _SPREAD if c not in (reader.fieldnames or ())]
        if problem := layout_problem(reader.fieldnames):
            raise CsvError(f"{path}: {problem}")
        if missing:
            raise CsvError(f"{path}: a stored measurement needs its spread: no column {', '.join(missing)}")
        for raw in reader:
            lineno = reader.line_num  # the file's line (blank lines and quoted line breaks counted)
            rec = {k: v or "" for k, v in raw.items() if k is not None}  # a short row's missing cells read as empty
            run_key = next((rec[c] for c in _RUN_COLUMNS if rec.get(c)), "")
            if run_key not in runs:
                run_id = uuid.uuid5(_IDS, f"{fingerprint}|{run_key}")
                runs[run_key] = (RunInfo(id=run_id, agent=f"gac ingest {path.name}"[:200], started_at=when), [])
                plans[run_key] = Counter()
            try:
                row = _measurement(rec, fingerprint, when)
                if row.id not in seen:  # a row given twice is one measurement
                    seen.add(row.id)
                    runs[run_key][1].append(row)
                    plans[run_key][rec.get("plan") or "csv"] += 1
            except ValidationError as err:
                e = err.errors(include_url=False)[0]
                raise CsvError(f"{path}:{lineno}: {'.'.join(str(p) for p in e['loc'])}: {e['msg']}") from None
            except (ValueError, KeyError) as err:
                raise CsvError(f"{path}:{lineno}: {err}") from None
    for key, (run, rows) in runs.items():
        if rows:
            (plan, _), *others = plans[key].most_common()
            named = f"{plan} (+{len(others)} other plan{'s' if len(others) > 1 else ''})" if others else plan
            run = run.model_copy(update={"plan": named[:200], "started_at": min(row.measured_at for row in rows)})
        for at in range(0, len(rows), rows_per_batch):
            chunk = rows[at : at + rows_per_batch]
            yield Batch(id=batch_id(run.id, chunk), platform=platform, run=run, measurements=chunk)


def batch_id(run: uuid.UUID, rows: list[Measurement]) -> uuid.UUID:
    """A CSV batch's id: its run's and its rows' (other rows: another batch, so a re-send of the same rows is a replay)."""
    return uuid.uuid5(_IDS, f"{run}|{','.join(str(r.id) for r in rows)}")
