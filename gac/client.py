"""A typed Python client of the GAC service's HTTP API (`/v1/...`).

    from gac.client import Client

    with Client("http://127.0.0.1:8000", token="gac_...") as gac:   # or Client(): $GAC_SERVER, $GAC_TOKEN
        stored = gac.align(Path("manifest.json"), platform="3f2a9c01", dtype="float32")  # id, fingerprint or prefix
        print(stored.result.latency.speedup, [w.dim for w in stored.result.weights])
        for p in gac.platforms():
            print(p.id, p.label)

Answers are the shared contract models (gac/contracts) where one exists (AlignmentResult,
BatchReceipt, PlatformDescriptor, Manifest and Batch going out), and the small models below for
the service's own read shapes. They ignore fields they do not know, so a newer service that adds
optional fields does not break an older client.

Every refusal of the service is raised as GacApiError(status, error, detail), carrying its
documented body {"error": ..., "detail": ...}; detail is a message, or for bad input a list of
FieldError(field, message). A service that cannot be reached (refused, reset, timed out, a bad
address) is raised as GacConnectionError, naming the URL. Both derive from GacClientError.

This module is part of the base install: it needs httpx and pydantic only, never the service,
the solver or the agent.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Generic, TypeVar
from urllib.parse import quote, urlsplit
from uuid import UUID

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError

from gac.contracts.api import (
    AlignmentSummary,
    Curve,
    CurveCliffs,
    CurvePoint,
    CurveSummary,
    DeviceKind,
    Job,
    JobMatch,
    JobStatus,
    Modulus,
    Platform,
    PlatformQuality,
    Step,
    StoredAlignment,
    StoredMeasurement,
)
from gac.contracts.columns import COLUMNS_MEDIA_TYPE, COLUMNS_SCHEMA, ColumnBatch
from gac.contracts.goal import Objective, Window
from gac.contracts.manifest import Manifest, dtype_named
from gac.contracts.measurements import DTYPE_FIELDS, Batch, BatchReceipt, Dtype, Op, PlatformDescriptor

__all__ = [
    "AlignmentSummary",
    "Client",
    "Curve",
    "CurveCliffs",
    "CurvePoint",
    "CurveSummary",
    "FieldError",
    "GacApiError",
    "GacClientError",
    "GacConnectionError",
    "Job",
    "JobMatch",
    "Listing",
    "Modulus",
    "Platform",
    "PlatformQuality",
    "Step",
    "StoredAlignment",
    "StoredMeasurement",
    "same_machine",
]

DEFAULT_URL = "http://127.0.0.1:8000"  # `gac serve`'s default address
DEFAULT_TIMEOUT_S = 30.0
ALIGN_TIMEOUT_S = 600.0  # a large manifest with a cross-check can take minutes
POLL_FIRST_S, POLL_MAX_S = 0.05, 1.0  # following a 202: the first wait, and the longest (or the service's Retry-After)


# -- errors


class GacClientError(Exception):
    """Anything this client raises on purpose: the service refused (GacApiError) or could not be reached."""


@dataclass(frozen=True)
class FieldError:
    """One bad input, as the service names it: field is a dotted path such as 'body.budget.params'."""

    field: str
    message: str
    type: str = ""

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


class GacApiError(GacClientError):
    """The service answered with an error status; its {"error", "detail"} body, parsed.

    status: the HTTP status (401, 404, 422, 503, ...)
    error: the service's kind of error ("ValidationError", "NotFound", "Unauthorized", ...)
    detail: a message, or for bad input a list of FieldError naming each field
    """

    def __init__(
        self,
        status: int,
        error: str,
        detail: str | list[FieldError],
        *,
        method: str = "",
        url: str = "",
        retry_after: float | None = None,
    ) -> None:
        self.status = status
        self.error = error
        self.detail = detail
        self.method = method
        self.url = url
        self.retry_after = retry_after  # seconds, when the service said when to try again (503)
        super().__init__(self._message())

    @property
    def transient(self) -> bool:
        """Whether asking again later may succeed: the service busy or failing (408, 429, 5xx), not a refusal."""
        return self.status in (408, 429) or self.status >= 500

    @property
    def field_errors(self) -> list[FieldError]:
        """The per-field errors (empty when detail is a plain message)."""
        return list(self.detail) if isinstance(self.detail, list) else []

    @property
    def fields(self) -> list[str]:
        """The names of the bad fields, e.g. ['body.target.platform']."""
        return [e.field for e in self.field_errors]

    def _message(self) -> str:
        where = f" ({self.method} {self.url})" if self.url else ""
        if isinstance(self.detail, list):
            text = "; ".join(str(e) for e in self.detail) or "invalid input"
        else:
            text = self.detail
        return f"{self.status} {self.error}: {text}{where}"

    @classmethod
    def from_response(cls, response: httpx.Response) -> GacApiError:
        status = response.status_code
        error = f"HTTP{status}"
        detail: str | list[FieldError] = response.text[:1000] or response.reason_phrase
        try:
            body = response.json()
        except ValueError:
            body = None  # not JSON: a proxy's page, say; keep its text
        if isinstance(body, dict) and "detail" in body:
            error = str(body.get("error") or error)
            detail = _detail(body["detail"])
        request = response.request
        return cls(status, error, detail, method=request.method, url=str(request.url), retry_after=_retry_after(response))


class GacConnectionError(GacClientError):
    """The service could not be reached or did not answer in time; nothing was received from it."""

    def __init__(self, message: str, *, url: str) -> None:
        self.url = url
        super().__init__(message)


def _detail(raw: Any) -> str | list[FieldError]:
    if isinstance(raw, list):
        out = []
        for item in raw:
            if isinstance(item, Mapping):
                out.append(FieldError(str(item.get("field", "")), str(item.get("message", "")), str(item.get("type", ""))))
            else:
                out.append(FieldError("", str(item)))
        return out
    return raw if isinstance(raw, str) else json.dumps(raw)


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return float(value) if value else None
    except ValueError:
        return None


# -- what the service answers: the shared read shapes (gac/contracts/api.py)


class _Page(BaseModel):
    model_config = ConfigDict(extra="ignore")

    items: list[Any]
    total: int
    next_cursor: str | None = None


T = TypeVar("T", bound=BaseModel)


class Listing(Generic[T]):
    """A paginated listing: iterate it for every item across all pages (each iteration starts over).

    `total` is the service's count of matching items, as of the last page read (the first page is
    read for it if none was).
    """

    def __init__(self, fetch: Callable[[str | None], tuple[list[T], int, str | None]]) -> None:
        self._fetch = fetch
        self._total: int | None = None

    def __iter__(self) -> Iterator[T]:
        cursor: str | None = None
        while True:
            items, total, cursor = self._fetch(cursor)
            self._total = total
            yield from items
            if cursor is None:
                return

    @property
    def total(self) -> int:
        if self._total is None:
            self._total = self._fetch(None)[1]
        return self._total


# -- the client


ManifestLike = Manifest | Mapping[str, Any] | str | os.PathLike[str]
BatchLike = Batch | ColumnBatch | Mapping[str, Any]


class Client:
    """The GAC service at `url` (default: $GAC_SERVER, else http://127.0.0.1:8000), optionally with
    an API token (read, ingest or admin; default: $GAC_TOKEN), both as the CLI reads them.
    Alignments need a token unless the service runs with GAC_OPEN_ALIGN.

    Use it as a context manager, or call close(), to release its connections.
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
        http: httpx.Client | None = None,
        token_hint: str = "Client(url, token) or $GAC_TOKEN",
    ) -> None:
        """timeout: seconds per request (align has its own, longer one). transport: an httpx
        transport to send through (e.g. httpx.ASGITransport over an app in-process). http: an
        httpx.Client to share with other code; it is left open by close(). token_hint: how its user
        gives a token, said when the service asks for one (a command line says its option)."""
        url = url or os.environ.get("GAC_SERVER") or DEFAULT_URL
        self.url = url.rstrip("/")
        self._headers = {"Accept": "application/json"}
        token = token if token is not None else os.environ.get("GAC_TOKEN")
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._timeout = timeout
        self._token_hint = token_hint
        self._own_http = http is None
        self._closed = False
        self._http = http if http is not None else httpx.Client(timeout=timeout, transport=transport)

    def __repr__(self) -> str:
        return f"Client({self.url!r})"

    def close(self) -> None:
        self._closed = True
        if self._own_http:
            self._http.close()

    @property
    def closed(self) -> bool:
        """True once close() was called (or a with block ended)."""
        return self._closed

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        content: bytes | None = None,
        content_type: str | None = None,
        timeout: float | None = None,
    ) -> httpx.Response:
        # A dtype reads as a manifest reads it ("bf16", "fp16"): the service takes the canonical names.
        given = {k: v for k, v in (params or {}).items() if v is not None}
        query = {k: _query_value(dtype_named(v) if k == "dtype" and isinstance(v, str) else v) for k, v in given.items()}
        headers = (self._headers | {"Content-Type": content_type}) if content_type else self._headers
        try:
            response = self._http.request(
                method,
                f"{self.url}{path}",
                params=query,
                content=content,
                headers=headers,
                timeout=timeout if timeout is not None else self._timeout,
            )
        except httpx.TimeoutException as exc:
            target = f"{self.url}{path}"
            raise GacConnectionError(f"{method} {target}: no answer in time ({type(exc).__name__})", url=target) from exc
        except (httpx.TransportError, httpx.InvalidURL) as exc:  # refused, reset, unknown host, a bad URL...
            target = f"{self.url}{path}"
            why = str(exc) or type(exc).__name__
            raise GacConnectionError(f"cannot reach the GAC service at {self.url} ({method} {path}): {why}", url=target) from exc
        if response.status_code >= 400:
            error = GacApiError.from_response(response)
            if error.status == 401 and "Authorization" not in self._headers and isinstance(error.detail, str):
                # The service asks for a header; a client's user sets a token.
                error.detail += f" (this client has no token: {self._token_hint})"
                error.args = (error._message(),)
            raise error
        return response

    def _get(self, path: str, model: type[T], params: Mapping[str, Any] | None = None) -> T:
        return _parse(self._request("GET", path, params=params), model)

    def _get_list(self, path: str, model: type[T], params: Mapping[str, Any] | None = None) -> list[T]:
        response = self._request("GET", path, params=params)
        return [_parse_obj(response, model, item) for item in _json(response, list)]

    def _listing(self, path: str, model: type[T], params: Mapping[str, Any]) -> Listing[T]:
        def fetch(cursor: str | None) -> tuple[list[T], int, str | None]:
            response = self._request("GET", path, params={**params, "cursor": cursor})
            page = _parse(response, _Page)
            return [_parse_obj(response, model, item) for item in page.items], page.total, page.next_cursor

        return Listing(fetch)

    # -- health

    def ready(self, timeout: float | None = None) -> dict[str, str]:
        """GET /readyz: the service is up, its database reachable and its schema current (else GacApiError 503).
        timeout: this call's, in place of the client's."""
        return _json(self._request("GET", "/readyz", timeout=timeout), dict)

    def wait_ready(self, timeout: float = 60.0, alive: Callable[[], bool] | None = None, every_s: float = 0.1) -> dict[str, str]:
        """ready(), asked every `every_s` until it answers (a service just started has no event to wait on).
        Raises GacClientError when `alive` (say, that the service's process still runs) turns False, or at the
        timeout with the last failure's message."""
        deadline = time.monotonic() + timeout
        while True:
            if alive is not None and not alive():
                raise GacClientError(f"{self.url}: the service stopped before it was ready")
            try:  # each ask waits no longer than what is left (a port that takes connections and never answers)
                return self.ready(timeout=min(self._timeout, max(0.5, deadline - time.monotonic())))
            except (GacConnectionError, GacApiError) as exc:  # not listening yet, or its database not yet ready (503)
                if isinstance(exc, GacApiError) and not exc.transient:
                    raise GacClientError(f"{self.url}: no GAC service answers there ({exc})") from exc
                if time.monotonic() >= deadline:
                    raise GacClientError(f"{self.url}: not ready after {timeout:g} s ({exc})") from exc
            time.sleep(every_s)

    # -- align

    def align(
        self,
        manifest: ManifestLike,
        platform: str | int | None = None,
        enqueue_missing: bool = False,
        *,
        dtype: Dtype | str | None = None,
        objective: Objective | str | None = None,
        epsilon: float | None = None,
        window: Window | str | None = None,
        no_slower: bool | None = None,
        min_gain: float | None = None,
        timeout: float | None = ALIGN_TIMEOUT_S,
    ) -> StoredAlignment:
        """POST /v1/align: align a manifest (a Manifest, its JSON document as a dict, or a path, as a
        str or Path, to a .json, .yaml or .yml file).

        platform (id, fingerprint or unique prefix) overrides the manifest's target; without
        either the alignment uses rules only. dtype overrides the manifest's workload dtype (as
        `gac align --dtype`): a platform is profiled in the dtype it runs fast, and a prediction
        needs curves in the alignment's dtype. objective, epsilon, window, no_slower and min_gain override
        the manifest's entries of those names (as `gac align`'s flags do). enqueue_missing queues a
        profiling job for the curves the platform lacks (needs an ingest token); their ids are in
        the answer's jobs. The manifest is checked by the service: bad fields come back as
        GacApiError 422 naming them. A large manifest is aligned off the request (the service
        answers 202): this call polls the stored alignment until it is done, within timeout seconds.
        """
        body = _manifest_body(manifest)
        goal = {"objective": objective, "epsilon": epsilon, "window": window, "no_slower": no_slower, "min_gain": min_gain}
        if dtype is not None or any(v is not None for v in goal.values()):
            body = _with_fields(body, Dtype(dtype_named(dtype)) if dtype is not None else None, goal)  # "bf16" as a manifest may write it
        response = self._request(
            "POST",
            "/v1/align",
            params={"platform": platform, "enqueue_missing": enqueue_missing},
            content=body,
            content_type="application/json",
            timeout=timeout,
        )
        if response.status_code == 202:  # a large manifest: aligned off the request, stored under the URL to poll
            response = self._follow(response, timeout)
        return _parse(response, StoredAlignment)

    def _follow(self, accepted: httpx.Response, timeout: float | None) -> httpx.Response:
        """GET the Location of a 202 until it answers otherwise (the stored alignment, or its error)."""
        location = accepted.headers.get("location") or str(_json(accepted, dict).get("poll") or "")
        if not location:
            raise _unexpected(accepted, "202 without a Location to poll")
        path = urlsplit(location).path  # relative to this client's URL, like every route
        deadline = time.monotonic() + (timeout if timeout is not None else ALIGN_TIMEOUT_S)
        wait, response = POLL_FIRST_S, accepted
        while response.status_code == 202:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise GacConnectionError(f"GET {self.url}{path}: the alignment was not done in time", url=f"{self.url}{path}")
            time.sleep(min(wait, remaining))
            wait = min(wait * 1.5, _retry_after(response) or POLL_MAX_S, POLL_MAX_S)
            response = self._request("GET", path, timeout=self._timeout)
        return response

    def alignment(self, alignment_id: UUID | str) -> StoredAlignment:
        """GET /v1/alignments/{id}: a stored alignment with its whole result."""
        return self._get(f"/v1/alignments/{_path_part(alignment_id)}", StoredAlignment)

    def alignments(self, platform: str | int | None = None, *, page_size: int = 50) -> Listing[AlignmentSummary]:
        """GET /v1/alignments, newest first, every page: summaries (Client.alignment for the whole result)."""
        return self._listing("/v1/alignments", AlignmentSummary, {"platform": platform, "limit": page_size})

    # -- platforms, curves, cliffs

    def platforms(self, device_kind: DeviceKind | None = None, name: str | None = None, *, page_size: int = 50) -> Listing[Platform]:
        """GET /v1/platforms, most recently seen first, every page; name matches a substring of the device name."""
        return self._listing("/v1/platforms", Platform, {"device_kind": device_kind, "name": name, "limit": page_size})

    def platform(self, ref: str | int) -> Platform:
        """GET /v1/platforms/{ref}: by id, fingerprint, or a unique fingerprint prefix (8+ characters)."""
        return self._get(f"/v1/platforms/{_path_part(ref)}", Platform)

    def platform_of(self, machine: PlatformDescriptor) -> Platform:
        """The stored platform of the machine `machine` describes (what the agent's
        `gac.agent.platform.detect_platform()` or `gac agent platform` says of it).

        The platform with its fingerprint where it has curves, else the most recently seen one with curves
        that differs only in its thread count (a profile timed with --threads 1 on a busy machine is
        still this machine's; an agent taking jobs at another count registers a platform with none
        yet); where none has curves, its own, else the most recently seen. Its descriptor carries
        `machine`'s native and fast dtypes, which the service does not keep. GacApiError 404 when the
        service has no such platform.
        """
        exact: Platform | None = None
        try:
            exact = self.platform(machine.fingerprint())
        except GacApiError as exc:
            if exc.status != 404:
                raise
        found = exact
        if exact is None or not exact.curves:
            listed = self.platforms(device_kind=machine.device_kind, name=machine.device_name)
            kin = [p for p in listed if p.fingerprint != machine.fingerprint() and same_machine(p.descriptor, machine)]
            found = profiled_first([*([exact] if exact else []), *kin], lambda p: p.curves > 0)
        if found is None:
            raise GacApiError(
                404,
                "NotFound",
                f"no platform on {self.url} is this machine ({machine.label()}, "
                f"fingerprint {machine.fingerprint()[:16]}): profile it first (`gac agent run --server "
                f"{self.url} --token T --plan quick`)",
                method="GET",
                url=f"{self.url}/v1/platforms",
            )
        dtypes = {f: getattr(machine, f) for f in DTYPE_FIELDS if getattr(machine, f) is not None}
        return found.model_copy(update={"descriptor": found.descriptor.model_copy(update=dtypes)})

    def platform_quality(self, ref: str | int) -> PlatformQuality:
        """GET /v1/platforms/{ref}/quality: points flagged by the agents' quality gate, timing threads, load while profiling."""
        return self._get(f"/v1/platforms/{_path_part(ref)}/quality", PlatformQuality)

    def curves(
        self, platform: str | int, op: Op | str | None = None, dtype: Dtype | str | None = None, axis: str | None = None
    ) -> list[CurveSummary]:
        """GET /v1/platforms/{ref}/curves: every curve measured on a platform."""
        return self._get_list(f"/v1/platforms/{_path_part(platform)}/curves", CurveSummary, {"op": op, "dtype": dtype, "axis": axis})

    def curve(self, platform: str | int, op: Op | str, dtype: Dtype | str, shape: Mapping[str, int] | str, axis: str) -> Curve:
        """GET /v1/platforms/{ref}/curve: one curve, latency against `axis` with the other shape fields fixed.

        shape holds the fixed fields ({"m": 2048, "k": 128}, or "k=128,m=2048"); a value for the
        swept axis itself, if present, is ignored.
        """
        return self._get(
            f"/v1/platforms/{_path_part(platform)}/curve", Curve, {"op": op, "dtype": dtype, "axis": axis, "fixed": _fixed_key(shape, axis)}
        )

    def curve_by_id(self, curve_id: int) -> Curve:
        """GET /v1/curves/{id}."""
        return self._get(f"/v1/curves/{int(curve_id)}", Curve)

    def cliffs(
        self, platform: str | int, op: Op | str | None = None, dtype: Dtype | str | None = None, axis: str | None = None
    ) -> list[CurveCliffs]:
        """GET /v1/platforms/{ref}/cliffs: the cliff analysis of each of a platform's curves (filtered)."""
        return self._get_list(f"/v1/platforms/{_path_part(platform)}/cliffs", CurveCliffs, {"op": op, "dtype": dtype, "axis": axis})

    def curve_cliffs(self, curve: int | Curve | CurveSummary) -> CurveCliffs:
        """GET /v1/curves/{id}/cliffs: one curve's steps, cliff-free frontier and modulus."""
        curve_id = curve.curve.id if isinstance(curve, Curve) else curve.id if isinstance(curve, CurveSummary) else int(curve)
        return self._get(f"/v1/curves/{curve_id}/cliffs", CurveCliffs)

    # -- measurements

    def upload(self, batch: BatchLike, *, by_columns: bool = False) -> BatchReceipt:
        """POST /v1/batches (an ingest token): store a batch whole or not at all; re-sending it is safe.

        A Batch goes by row (application/json), or by column with by_columns=True (the agent's
        layout: half the bytes); a ColumnBatch goes by column; a dict is sent as the document it
        is, by its "schema". The receipt counts new rows and duplicates; replay is true when the
        batch had been stored before.
        """
        if isinstance(batch, Batch) and by_columns:
            batch = ColumnBatch.of(batch)
        if isinstance(batch, ColumnBatch):
            body = batch.model_dump_json(by_alias=True, exclude_none=True).encode()
            media = COLUMNS_MEDIA_TYPE
        elif isinstance(batch, Batch):
            body, media = batch.model_dump_json(by_alias=True).encode(), "application/json"
        elif isinstance(batch, Mapping):
            body = json.dumps(batch, separators=(",", ":"), default=str).encode()
            media = COLUMNS_MEDIA_TYPE if batch.get("schema") == COLUMNS_SCHEMA else "application/json"
        else:
            raise TypeError(f"upload takes a Batch, a ColumnBatch or a batch document (dict), not {type(batch).__name__}")
        return _parse(self._request("POST", "/v1/batches", content=body, content_type=media), BatchReceipt)

    def measurements(
        self,
        platform: str | int | None = None,
        op: Op | str | None = None,
        dtype: Dtype | str | None = None,
        axis: str | None = None,
        run: UUID | str | None = None,
        *,
        page_size: int = 500,
    ) -> Listing[StoredMeasurement]:
        """GET /v1/measurements in id order, every page (keyset pagination: stable while rows arrive)."""
        params = {"platform": platform, "op": op, "dtype": dtype, "axis": axis, "run": run, "limit": page_size}
        return self._listing("/v1/measurements", StoredMeasurement, params)

    # -- jobs

    def jobs(self, status: JobStatus | Sequence[JobStatus] | None = None, *, page_size: int = 100) -> Listing[Job]:
        """GET /v1/jobs, every page, optionally only those in one status or any of several."""
        statuses = [status] if isinstance(status, str) else list(status or [])
        return self._listing("/v1/jobs", Job, {"status": statuses or None, "limit": page_size})

    def job(self, job_id: int) -> Job:
        """GET /v1/jobs/{id}."""
        return self._get(f"/v1/jobs/{int(job_id)}", Job)

    def cancel_job(self, job_id: int) -> Job:
        """DELETE /v1/jobs/{id} (admin token): a queued or leased job is cancelled (GacApiError 409 once finished)."""
        return _parse(self._request("DELETE", f"/v1/jobs/{int(job_id)}"), Job)

    def requeue_job(self, job_id: int) -> Job:
        """POST /v1/jobs/{id}/requeue (admin token): a leased job back in the queue before its lease ends
        (its agent was killed, or is stuck); GacApiError 409 unless it is leased."""
        return _parse(self._request("POST", f"/v1/jobs/{int(job_id)}/requeue"), Job)


# -- helpers


def _query_value(value: Any) -> str | list[str]:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):  # a parameter given once per value
        return [str(v) for v in value]
    return str(value)  # Op and Dtype are str enums: str() is their value


def _path_part(value: Any) -> str:
    """A value placed in a URL path, escaped so that it stays one segment."""
    return quote(str(value), safe="")


def _fixed_key(shape: Mapping[str, int] | str, axis: str) -> str:
    if isinstance(shape, str):
        return shape
    return ",".join(f"{k}={int(v)}" for k, v in sorted(shape.items()) if k != axis)


def _manifest_body(manifest: ManifestLike) -> bytes:
    if isinstance(manifest, Manifest):
        return manifest.model_dump_json(by_alias=True, exclude_none=True).encode()
    if isinstance(manifest, Mapping):
        return json.dumps(manifest, separators=(",", ":")).encode()
    if isinstance(manifest, str | os.PathLike):  # a str is a file's path, as `gac align FILE` takes one
        path = Path(manifest)
        try:
            text = path.read_bytes()
        except OSError as exc:
            raise GacClientError(f"cannot read manifest {path}: {exc}") from exc
        if path.suffix.lower() in (".yaml", ".yml"):  # as `gac align` reads a manifest
            import yaml

            from gac.documents import DuplicateKey, load_yaml

            try:
                doc = load_yaml(text)  # YAML 1.2's numbers (1e-3 is one), a key twice refused, as `gac align` reads it
            except yaml.YAMLError as exc:
                raise GacClientError(f"manifest {path} is not YAML: {exc}") from exc
            except DuplicateKey as exc:
                raise GacClientError(f"manifest {path}: {exc}") from exc
            if not isinstance(doc, dict):
                raise GacClientError(f"manifest {path} is not a mapping (a manifest's fields), but {type(doc).__name__}")
            try:
                return json.dumps(doc, separators=(",", ":")).encode()
            except (TypeError, ValueError) as exc:  # a YAML date or the like, which JSON has no type for
                raise GacClientError(f"manifest {path} holds a value JSON cannot carry: {exc}") from exc
        try:
            json.loads(text)
        except ValueError as exc:
            raise GacClientError(f"manifest {path} is not JSON: {exc}") from exc
        return text
    raise TypeError(f"align takes a Manifest, its document (dict) or a file's path, not {type(manifest).__name__}")


def _with_fields(body: bytes, dtype: Dtype | None, goal: Mapping[str, Any]) -> bytes:
    """The manifest document with its workload in `dtype` (a workload is added if it had none) and
    the goal's entries (objective, epsilon, ...) given in place of its own; the service checks them."""
    doc = json.loads(body)
    if not isinstance(doc, dict):
        raise GacClientError(f"a manifest is a JSON object, not a {type(doc).__name__}")
    if dtype is not None:
        workload = doc.get("workload")
        doc["workload"] = {**(workload if isinstance(workload, dict) else {"tokens": [1024]}), "dtype": dtype.value}
    doc.update({k: (str(v) if isinstance(v, StrEnum) else v) for k, v in goal.items() if v is not None})
    return json.dumps(doc, separators=(",", ":")).encode()


P = TypeVar("P")


def profiled_first(candidates: Sequence[P], has_curves: Callable[[P], bool]) -> P | None:
    """This machine's platform among `candidates` (its own fingerprint's first, then the others of the same
    machine, most recently seen first): the first with curves, else the first. An agent taking jobs at
    another thread count registers a platform with no curves; the profile with curves is the one meant."""
    return next((c for c in candidates if has_curves(c)), candidates[0] if candidates else None)


def same_machine(a: PlatformDescriptor, b: PlatformDescriptor) -> bool:
    """Whether two descriptors are one machine and software stack, whatever thread count each
    was timed with (threads are part of the fingerprint: a profile timed with another count is
    another platform of the same machine)."""
    ignore = {"threads", *DTYPE_FIELDS}
    return a.model_dump(mode="json", exclude=ignore, exclude_none=True) == b.model_dump(mode="json", exclude=ignore, exclude_none=True)


def _json(response: httpx.Response, kind: type) -> Any:
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, kind):
        raise _unexpected(response, f"expected a JSON {kind.__name__}, got {response.text[:200]!r}")
    return body


def _parse(response: httpx.Response, model: type[T]) -> T:
    try:
        return model.model_validate_json(response.content)
    except ValidationError as exc:
        raise _unexpected(response, f"not a {model.__name__}: {exc}") from exc


def _parse_obj(response: httpx.Response, model: type[T], item: Any) -> T:
    try:
        return model.model_validate(item)
    except ValidationError as exc:
        raise _unexpected(response, f"not a {model.__name__}: {exc}") from exc


def _unexpected(response: httpx.Response, why: str) -> GacApiError:
    """A success status with a body this client cannot read: not the GAC service, or an incompatible one."""
    request = response.request
    return GacApiError(response.status_code, "UnexpectedResponse", why, method=request.method, url=str(request.url))
