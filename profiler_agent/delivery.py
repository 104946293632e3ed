"""Deliver measurements to the service: batches, retries, spool, drain.

Rows are cut into batches (<= batch_size) with client-made ids; each batch is
POSTed with retries (exponential backoff + jitter) on connection errors, 408,
429 and 5xx. A batch that cannot be delivered is appended to a local spool
(JSONL) and re-sent on the next run or by `gac agent flush`. The service's
ingest is idempotent by batch id and by measurement id, so re-sending after a
crash or a lost answer is safe: nothing is lost and nothing is stored twice.
A 4xx other than 408/429 is permanent: the batch goes to a rejected file.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError

from gac.contracts.columns import COLUMNS_MEDIA_TYPE, COLUMNS_SCHEMA, ColumnBatch
from gac.contracts.ids import new_id
from gac.contracts.measurements import Batch, BatchReceipt, Measurement, PlatformDescriptor, RunInfo

DEFAULT_BATCH_SIZE = 1000
RETRYABLE_STATUS = {408, 429}


def default_spool_dir() -> Path:
    """$GAC_AGENT_SPOOL_DIR, else $GAC_DATA_DIR/spool (by default the user data dir, e.g. ~/.local/share/gac/spool)."""
    from profiler_agent.settings import AgentSettings

    return AgentSettings().spool_dir


class DeliveryError(Exception):
    """A batch could not be delivered now (retryable): it belongs in the spool."""


class RejectedError(Exception):
    """The service refused a batch for good (4xx other than 408/429)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


@dataclass
class DeliveryStats:
    sent_batches: int = 0
    inserted: int = 0
    duplicates: int = 0
    spooled_batches: int = 0
    spooled_rows: int = 0
    drained_batches: int = 0
    rejected_batches: int = 0
    rejected_rows: int = 0
    errors: list[str] = field(default_factory=list)

    def merge_receipt(self, r: BatchReceipt) -> None:
        self.sent_batches += 1
        self.inserted += r.inserted
        self.duplicates += r.duplicates


def make_batches(
    platform: PlatformDescriptor, run: RunInfo, rows: Iterable[Measurement], batch_size: int = DEFAULT_BATCH_SIZE
) -> Iterator[Batch]:
    """Cut rows into batches with fresh client-made ids."""
    if not 1 <= batch_size <= 10_000:
        raise ValueError(f"batch_size must be in 1..10000, got {batch_size}")
    chunk: list[Measurement] = []
    for m in rows:
        chunk.append(m)
        if len(chunk) >= batch_size:
            yield Batch(id=new_id(), platform=platform, run=run, measurements=chunk)
            chunk = []
    if chunk:
        yield Batch(id=new_id(), platform=platform, run=run, measurements=chunk)


def batch_document(batch: Batch) -> dict[str, Any]:
    """The batch as the agent sends and spools it: laid out by column, unset optional fields
    left out (the service fills their defaults), so the service parses it about four times
    faster than the same rows one object each, and it is about half the bytes."""
    return ColumnBatch.of(batch).model_dump(mode="json", by_alias=True, exclude_none=True)


def _by_row(doc: dict[str, Any]) -> dict[str, Any]:
    """A column-layout document as the same batch by row, for services older than the column layout."""
    return read_document(doc).model_dump(mode="json", by_alias=True, exclude_none=True)


def document_rows(doc: dict[str, Any]) -> int:
    """Rows in a batch document of either layout (spools may hold both)."""
    measurements = doc.get("measurements", [])
    return len(measurements.get("id", [])) if isinstance(measurements, dict) else len(measurements)


def read_document(doc: dict[str, Any]) -> Batch:
    """A batch document of either layout, validated, as a Batch."""
    if doc.get("schema") == COLUMNS_SCHEMA:
        return ColumnBatch.model_validate(doc).to_batch()
    return Batch.model_validate(doc)


class _FileLock:
    """An advisory lock so two agents on one machine never rewrite the spool at once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: Any = None

    def __enter__(self) -> "_FileLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a+")
        try:
            import fcntl

            fcntl.flock(self._fh.fileno(), fcntl.LOCK_EX)
        except ImportError:  # pragma: no cover - Windows: best effort, single agent assumed
            pass
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            import fcntl

            fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
        except ImportError:  # pragma: no cover
            pass
        self._fh.close()


class Spool:
    """Undelivered batches, one JSON line each: {"server", "spooled_at", "batch"}."""

    def __init__(self, directory: Path | str | None = None) -> None:
        self.dir = Path(directory) if directory is not None else default_spool_dir()
        self.path = self.dir / "spool.jsonl"
        self.rejected_path = self.dir / "rejected.jsonl"
        self._lock_path = self.dir / "spool.lock"

    def lock(self) -> _FileLock:
        return _FileLock(self._lock_path)

    @staticmethod
    def _append(path: Path, record: dict[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, separators=(",", ":")) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def add(self, server: str, batch: Batch) -> None:
        with self.lock():
            self._append(self.path, {"server": server, "spooled_at": _now(), "batch": batch_document(batch)})

    def reject(self, server: str, batch_doc: dict[str, Any], error: str) -> None:
        self._append(self.rejected_path, {"server": server, "rejected_at": _now(), "error": error, "batch": batch_doc})

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
                fh.write(json.dumps(r, separators=(",", ":")) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)  # atomic: the spool is either the old or the new list

    def drain(
        self, send: Callable[[dict[str, Any]], BatchReceipt], server: str, stats: DeliveryStats, all_servers: bool = False
    ) -> int:
        """Re-send spooled batches for `server`; keep what still fails. Returns batches delivered."""
        with self.lock():
            records = self.records()
            if not records:
                return 0
            keep: list[dict[str, Any]] = []
            delivered = 0
            offline = False
            for rec in records:
                if offline or (not all_servers and _norm(rec.get("server", "")) != _norm(server)):
                    keep.append(rec)
                    continue
                try:
                    stats.merge_receipt(send(rec["batch"]))
                    delivered += 1
                except RejectedError as err:
                    self.reject(server, rec["batch"], str(err))
                    stats.rejected_batches += 1
                    stats.rejected_rows += document_rows(rec["batch"])
                    stats.errors.append(f"batch {rec['batch'].get('id')} rejected: {err}")
                except DeliveryError as err:
                    keep.append(rec)
                    offline = True  # the service is down: stop trying, keep the rest in order
                    stats.errors.append(str(err))
            if len(keep) != len(records):
                self._rewrite(keep)
            stats.drained_batches += delivered
            return delivered


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _norm(url: str) -> str:
    return url.rstrip("/")


class Deliverer:
    """Sends measurements as they come; spools what cannot be sent.

    Use as a context manager, or call close() at the end: it sends the last
    partial batch and tries to drain the spool once more.
    """

    def __init__(
        self,
        server: str,
        token: str,
        platform: PlatformDescriptor,
        run: RunInfo,
        spool: Spool | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        retries: int = 4,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        timeout_s: float = 30.0,
        client: httpx.Client | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        if not 1 <= batch_size <= 10_000:
            raise ValueError(f"batch_size must be in 1..10000, got {batch_size}")
        self.server = _norm(server)
        self.platform = platform
        self.run = run
        self.spool = spool or Spool()
        self.batch_size = batch_size
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.stats = DeliveryStats()
        self.log = log or (lambda msg: None)
        self._client = client or httpx.Client(timeout=timeout_s)
        self._own_client = client is None
        self._headers = {"Authorization": f"Bearer {token}"}
        self._pending: list[Measurement] = []
        self._online = True
        self._rows_only = False  # set once the service turns down the column layout

    # -- sending one batch document

    def send_document(self, doc: dict[str, Any], retries: int | None = None) -> BatchReceipt:
        """POST one batch with retries; raises DeliveryError (retryable) or RejectedError.

        A service older than the column layout refuses it (422 naming body.schema, or 415):
        the batch is then re-sent by row, and so is every later one to that service.
        """
        by_columns = doc.get("schema") == COLUMNS_SCHEMA
        if by_columns and self._rows_only:
            return self._post(_by_row(doc), retries)
        try:
            return self._post(doc, retries)
        except RejectedError as err:
            if not by_columns or not (err.status == 415 or (err.status == 422 and "body.schema" in str(err))):
                raise
            self._rows_only = True
            self.log(f"{self.server} does not take batches by column ({err.status}); sending them by row")
            return self._post(_by_row(doc), retries)

    def _post(self, doc: dict[str, Any], retries: int | None) -> BatchReceipt:
        attempts = 1 + (self.retries if retries is None else retries)
        by_columns = doc.get("schema") == COLUMNS_SCHEMA
        headers = self._headers | {"content-type": COLUMNS_MEDIA_TYPE if by_columns else "application/json"}
        body = json.dumps(doc, separators=(",", ":")).encode()
        last = ""
        for attempt in range(attempts):
            retry_after: float | None = None
            try:
                resp = self._client.post(f"{self.server}/v1/batches", content=body, headers=headers)
            except httpx.TransportError as err:  # connect refused, reset, timeout...
                last = f"{type(err).__name__}: {err}"
            else:
                if resp.status_code in (200, 201):
                    return BatchReceipt.model_validate(resp.json())
                detail = _error_detail(resp)
                if 400 <= resp.status_code < 500 and resp.status_code not in RETRYABLE_STATUS:
                    raise RejectedError(resp.status_code, detail)
                last = f"HTTP {resp.status_code}: {detail}"
                retry_after = _retry_after(resp)
            if attempt + 1 < attempts:
                delay = min(self.max_backoff_s, self.backoff_s * 2**attempt) * random.uniform(0.5, 1.5)
                time.sleep(max(delay, retry_after or 0.0))
        raise DeliveryError(f"could not deliver batch {doc.get('id')} to {self.server}: {last}")

    # -- streaming rows

    def add(self, m: Measurement) -> None:
        self._pending.append(m)
        if len(self._pending) >= self.batch_size:
            self._flush_pending()

    def add_many(self, rows: Iterable[Measurement]) -> None:
        for m in rows:
            self.add(m)

    def flush(self) -> None:
        if self._pending:
            self._flush_pending()

    def _flush_pending(self) -> None:
        batch = Batch(id=new_id(), platform=self.platform, run=self.run, measurements=self._pending)
        self._pending = []
        self.deliver(batch)

    def deliver(self, batch: Batch) -> bool:
        """Send a batch (spooling it if that fails); True when the service has it."""
        doc = batch_document(batch)
        try:
            # Once the service was found down, each later batch gets one quick try:
            # the run goes on at full speed and notices when the service is back.
            receipt = self.send_document(doc, retries=None if self._online else 0)
        except DeliveryError as err:
            self.spool.add(self.server, batch)
            self.stats.spooled_batches += 1
            self.stats.spooled_rows += len(batch.measurements)
            if self._online:
                self.log(f"service unreachable, spooling to {self.spool.path}: {err}")
            self._online = False
            return False
        except RejectedError as err:
            self.spool.reject(self.server, doc, str(err))
            self.stats.rejected_batches += 1
            self.stats.rejected_rows += len(batch.measurements)
            self.stats.errors.append(f"batch {batch.id} rejected: {err}")
            self.log(
                f"batch {batch.id} rejected ({err}); kept in {self.spool.rejected_path}: once the cause is fixed, "
                f"resend with `gac ingest {self.spool.rejected_path} --server {self.server} --token ...`"
            )
            return False
        self.stats.merge_receipt(receipt)
        if not self._online:
            self._online = True
            self.log("service reachable again, draining the spool")
            self.drain()
        return True

    def drain(self) -> int:
        """Re-send spooled batches for this server."""
        n = self.spool.drain(self.send_document, self.server, self.stats)
        if n:
            self.log(f"drained {n} spooled batch(es)")
        return n

    def close(self) -> None:
        """Send the last partial batch, drain the spool if the service is up."""
        self.flush()
        if self._online:
            self.drain()
        self.close_client()

    def close_client(self) -> None:
        if self._own_client:
            self._client.close()

    def __enter__(self) -> "Deliverer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _error_detail(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:500]
    if isinstance(body, dict):
        return json.dumps({k: body[k] for k in ("error", "detail") if k in body} or body)[:1000]
    return str(body)[:1000]


def _retry_after(resp: httpx.Response) -> float | None:
    value = resp.headers.get("retry-after")
    try:
        return min(60.0, float(value)) if value else None
    except ValueError:
        return None


# -- offline files (--out / gac ingest)


class BatchFileWriter:
    """Appends batches to a JSONL file (one Batch document per line) for later upload."""

    def __init__(self, path: Path | str, platform: PlatformDescriptor, run: RunInfo, batch_size: int = DEFAULT_BATCH_SIZE) -> None:
        self.path = Path(path)
        self.platform = platform
        self.run = run
        self.batch_size = batch_size
        self._pending: list[Measurement] = []
        self.rows = 0
        self.batches = 0
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def add(self, m: Measurement) -> None:
        self._pending.append(m)
        if len(self._pending) >= self.batch_size:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        batch = Batch(id=new_id(), platform=self.platform, run=self.run, measurements=self._pending)
        self._pending = []
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(batch.model_dump_json(by_alias=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        self.rows += len(batch.measurements)
        self.batches += 1

    def close(self) -> None:
        self.flush()


def read_batch_file(path: Path | str) -> Iterator[tuple[int, Batch | None, str | None]]:
    """(line number, batch, error) for each non-empty line of a results file.

    Accepts a batch document of either layout per line, or a spool record ({"batch": ...}).
    """
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                if isinstance(data, dict) and "batch" in data and "measurements" not in data:
                    data = data["batch"]
                if not isinstance(data, dict):
                    yield lineno, None, f"line {lineno}: a batch is a JSON object, not {type(data).__name__}"
                    continue
                yield lineno, read_document(data), None
            except (json.JSONDecodeError, ValidationError) as err:
                yield lineno, None, f"line {lineno}: {err}".splitlines()[0][:500] + _first_error(err)


def _first_error(err: Exception) -> str:
    if isinstance(err, ValidationError):
        e = err.errors(include_url=False)[0]
        return f" ({'.'.join(str(p) for p in e['loc'])}: {e['msg']})"
    return ""


__all__ = [
    "DEFAULT_BATCH_SIZE",
    "BatchFileWriter",
    "Deliverer",
    "DeliveryError",
    "DeliveryStats",
    "RejectedError",
    "Spool",
    "batch_document",
    "default_spool_dir",
    "document_rows",
    "make_batches",
    "read_batch_file",
    "read_document",
]
