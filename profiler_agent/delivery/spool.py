"""The spool: batches that could not be sent, kept on disk (JSONL) until a later run or `gac agent flush` sends them."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

import httpx
from filelock import FileLock

from gac.agent.delivery.codec import batch_document, compact_json, document_rows
from gac.agent.delivery.outcomes import DeliveryError, DeliveryStats, RejectedError
from gac.agent.interrupt import shielded, stop_cuts_short
from gac.contracts.measurements import Batch, BatchReceipt


def default_spool_dir() -> Path:
    """$GAC_AGENT_SPOOL_DIR, else $GAC_DATA_DIR/spool (by default the user data dir, e.g. ~/.local/share/gac/spool)."""
    from gac.agent.settings import AgentSettings

    return AgentSettings().spool_dir


_DEFAULT_PORTS = {"http": 80, "https": 443}


def norm_server(url: str) -> str:
    """One spelling of a service's URL, that spooled batches are matched by: scheme and host in lower case, without
    the scheme's default port or a trailing slash (HTTP://Host:80/ is http://host). Names are not resolved:
    localhost and 127.0.0.1 stay two servers."""
    try:
        u = httpx.URL(url.strip())
    except httpx.InvalidURL:
        return url.rstrip("/")
    if not u.host or u.userinfo or u.query or u.fragment or "%" in url:  # read as written: nothing of it dropped or decoded
        return url.rstrip("/")
    scheme = u.scheme.lower()
    port = "" if u.port in (None, _DEFAULT_PORTS.get(scheme)) else f":{u.port}"
    host = f"[{u.host}]" if ":" in u.host else u.host
    return f"{scheme}://{host}{port}{u.path.rstrip('/')}"


def _read_at(fh: BinaryIO, offset: int, size: int) -> bytes:
    fh.seek(offset)
    return fh.read(size)


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _append(path: Path, record: dict[str, Any]) -> SpoolEntry:
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (compact_json(record) + "\n").encode()
    with open(path, "ab") as fh:
        start = fh.tell()
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())
    return SpoolEntry(str(record.get("batch", {}).get("id")), start, line)


@dataclass(frozen=True)
class SpoolEntry:
    """One spooled record: its batch id, and where its line was written (to take it out again cheaply)."""

    batch_id: str
    offset: int
    line: bytes


class Spool:
    """Undelivered batches, one JSON line each: {"server", "spooled_at", "batch"}."""

    def __init__(self, directory: Path | str | None = None) -> None:
        self.dir = Path(directory) if directory is not None else default_spool_dir()
        self.path = self.dir / "spool.jsonl"
        self.rejected_path = self.dir / "rejected.jsonl"
        self._lock_path = self.dir / "spool.lock"

    def lock(self) -> FileLock:
        """So two agents on one machine never rewrite the spool at once."""
        self.dir.mkdir(parents=True, exist_ok=True)
        return FileLock(self._lock_path)

    def add(self, server: str, batch: Batch) -> SpoolEntry:
        with self.lock():
            return _append(self.path, {"server": server, "spooled_at": _now(), "batch": batch_document(batch)})

    def remove(self, entry: SpoolEntry) -> None:
        """Take a record out once the service has it: cut off the file's tail when the record is still
        its last line (the usual case: written just before the send), else rewrite the spool without it."""
        with self.lock():
            end = entry.offset + len(entry.line)
            try:
                with open(self.path, "r+b") as fh:
                    if os.fstat(fh.fileno()).st_size == end and _read_at(fh, entry.offset, len(entry.line)) == entry.line:
                        fh.truncate(entry.offset)
                        os.fsync(fh.fileno())
                        return
            except FileNotFoundError:
                return  # drained and removed by someone else
            records = self.records()
            keep = [r for r in records if str(r.get("batch", {}).get("id")) != entry.batch_id]
            if len(keep) != len(records):
                self._rewrite(keep)

    def reject(self, server: str, batch_doc: dict[str, Any], error: str) -> None:
        _append(self.rejected_path, {"server": server, "rejected_at": _now(), "error": error, "batch": batch_doc})

    def records(self) -> list[dict[str, Any]]:
        """Spooled records; a torn last line (crash mid-write) is skipped, not fatal."""
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return out

    def rows(self) -> int:
        return sum(document_rows(r.get("batch", {})) for r in self.records())

    def _rewrite(self, records: list[dict[str, Any]]) -> None:
        tmp = self.path.with_suffix(".jsonl.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            for r in records:
                fh.write(compact_json(r) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)  # atomic: the spool is either the old or the new list

    def drain(self, send: Callable[[dict[str, Any]], BatchReceipt], server: str, stats: DeliveryStats, all_servers: bool = False) -> int:
        """Re-send spooled batches for `server`; keep what still fails. Returns batches delivered.

        It only waits on the service: a stop keeps the rest from the next batch on (a second one cuts the call under
        way), and what the service took leaves the spool all the same."""
        with self.lock(), shielded(breakable=True):
            records = self.records()
            if not records:
                return 0
            keep: list[dict[str, Any]] = []
            delivered = 0
            offline = False
            for i, rec in enumerate(records):
                # Down, or the run was asked to stop while it only waits on the service: the rest stays, in order.
                if offline or stop_cuts_short() or (not all_servers and norm_server(rec.get("server", "")) != norm_server(server)):
                    keep.append(rec)
                    continue
                try:
                    stats.count_drained(rec["batch"].get("id"), send(rec["batch"]))
                    delivered += 1
                except KeyboardInterrupt:
                    self._rewrite(keep + records[i:])  # this batch and the rest stay; those sent leave
                    raise
                except RejectedError as err:
                    if err.about_the_token:  # kept, in order: flushed again with a token the service takes
                        keep.append(rec)
                        offline = True
                        stats.errors.append(f"{err}: the service refuses this token; nothing set aside, flush again with an ingest token")
                        continue
                    self.reject(server, rec["batch"], str(err))
                    stats.count_rejected(rec["batch"].get("id"), document_rows(rec["batch"]), err)
                except DeliveryError as err:
                    keep.append(rec)
                    offline = True  # the service is down: stop trying, keep the rest in order
                    stats.errors.append(str(err))
            if len(keep) != len(records):
                self._rewrite(keep)
            return delivered
