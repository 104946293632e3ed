"""POST one batch document to the service, with retries (tenacity): connection errors, 408, 429 and 5xx
are tried again after an exponential backoff with jitter, never sooner than the service's Retry-After;
any other 4xx is final. A service older than the column layout gets the batch by row."""

from __future__ import annotations

import json
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from gac.agent.delivery.codec import by_row, compact_json, is_by_column
from gac.agent.delivery.outcomes import DeliveryError, RejectedError
from gac.agent.delivery.spool import norm_server
from gac.agent.http_client import StopSafeClient
from gac.agent.interrupt import sleep_unless_stopped, stopping
from gac.contracts.columns import COLUMNS_MEDIA_TYPE
from gac.contracts.measurements import BatchReceipt

RETRYABLE_STATUS = {408, 429}  # the 4xx worth another try; every 5xx is
RETRY_AFTER_MAX_S = 60.0
ANSWERS_KEPT = 16  # the service's latest answer times, for answer_timeout


class _TryAgain(Exception):
    """One attempt failed in a way a later one may get past: connection error, 408, 429 or 5xx."""

    def __init__(self, message: str, retry_after: float | None = None, timed_out: bool = False) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.timed_out = timed_out  # no answer in time: the service hangs, or the network drops what it is sent


class _Backoff(wait_exponential):
    """tenacity's capped exponential backoff, times a jitter of +-50 %, and never shorter than Retry-After."""

    def __call__(self, state: RetryCallState) -> float:
        delay = super().__call__(state) * random.uniform(0.5, 1.5)
        failed = state.outcome.exception() if state.outcome is not None else None
        return max(delay, (failed.retry_after if isinstance(failed, _TryAgain) else None) or 0.0)


@dataclass(frozen=True)
class RetryPolicy:
    """`retries` more tries after the first, `backoff_s` before the first of them, doubling up to `max_backoff_s`."""

    retries: int = 4
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0

    def retrying(self, retries: int | None = None, retry_timeouts: bool = True) -> Retrying:
        """The tenacity loop for one batch (`retries` overrides the policy's count; retry_timeouts=False: a try that
        timed out is not repeated). On the way out of a stopped run, one try (StopSafeClient keeps it short): what it
        cannot send stays in the spool."""
        retries = 0 if stopping() else self.retries if retries is None else retries
        return Retrying(
            stop=stop_after_attempt(1 + retries),
            wait=_Backoff(multiplier=self.backoff_s, max=self.max_backoff_s),
            retry=retry_if_exception(lambda e: isinstance(e, _TryAgain) and (retry_timeouts or not e.timed_out)),
            reraise=True,  # the last _TryAgain, or a RejectedError at once
            sleep=sleep_unless_stopped,  # a run asked to stop does not wait to try again
        )


class BatchSender:
    """Sends batch documents to one service. Use close() (or a context) when done, unless the client was given."""

    def __init__(
        self,
        server: str,
        token: str,
        policy: RetryPolicy = RetryPolicy(),
        timeout_s: float = 30.0,
        client: httpx.Client | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.server = norm_server(server)
        self.policy = policy
        self.log = log or (lambda msg: None)
        self._client = client or StopSafeClient(timeout=timeout_s)
        self._own_client = client is None
        self._headers = {"Authorization": f"Bearer {token}"}
        self._rows_only = False  # set once the service turns down the column layout
        self._answers: deque[float] = deque(maxlen=ANSWERS_KEPT)  # seconds each of the latest answers took

    def answer_timeout(self, factor: float, floor_s: float) -> float | None:
        """How long to wait for an answer, from how long the service took lately: `factor` x the slowest of its latest
        answers, at least floor_s; None (the client's timeout) before it has answered."""
        return max(floor_s, factor * max(self._answers)) if self._answers else None

    def send_document(
        self, doc: dict[str, Any], retries: int | None = None, timeout_s: float | None = None, retry_timeouts: bool = True
    ) -> BatchReceipt:
        """POST one batch with retries; raises DeliveryError (retryable) or RejectedError. timeout_s: each try's, in
        place of the client's; retry_timeouts=False: a try that got no answer in time is not repeated.

        A service older than the column layout refuses it (422 naming body.schema, or 415):
        the batch is then re-sent by row, and so is every later one to that service.
        """
        how = (retries, timeout_s, retry_timeouts)
        by_columns = is_by_column(doc)
        if by_columns and self._rows_only:
            return self._post(by_row(doc), *how)
        try:
            return self._post(doc, *how)
        except RejectedError as err:
            if not by_columns or not (err.status == 415 or (err.status == 422 and "body.schema" in str(err))):
                raise
            self._rows_only = True
            self.log(f"{self.server} does not take batches by column ({err.status}); sending them by row")
            return self._post(by_row(doc), *how)

    def _post(self, doc: dict[str, Any], retries: int | None, timeout_s: float | None, retry_timeouts: bool) -> BatchReceipt:
        content_type = COLUMNS_MEDIA_TYPE if is_by_column(doc) else "application/json"
        try:
            headers = self._headers | {"content-type": content_type}
            return self.policy.retrying(retries, retry_timeouts)(self._post_once, compact_json(doc).encode(), headers, timeout_s)
        except _TryAgain as err:
            raise DeliveryError(f"could not deliver batch {doc.get('id')} to {self.server}: {err}") from err

    def _post_once(self, body: bytes, headers: dict[str, str], timeout_s: float | None) -> BatchReceipt:
        try:
            timeout = httpx.USE_CLIENT_DEFAULT if timeout_s is None else timeout_s
            asked = time.monotonic()
            resp = self._client.post(f"{self.server}/v1/batches", content=body, headers=headers, timeout=timeout)
            self._answers.append(time.monotonic() - asked)
        except httpx.TimeoutException as err:
            raise _TryAgain(f"{type(err).__name__}: {err}", timed_out=True) from err
        except httpx.TransportError as err:  # connect refused, reset...
            raise _TryAgain(f"{type(err).__name__}: {err}") from err
        if resp.status_code in (200, 201):
            return BatchReceipt.model_validate(resp.json())
        detail = _error_detail(resp)
        if 400 <= resp.status_code < 500 and resp.status_code not in RETRYABLE_STATUS:
            raise RejectedError(resp.status_code, detail)
        raise _TryAgain(f"HTTP {resp.status_code}: {detail}", _retry_after(resp))

    def close(self) -> None:
        if self._own_client:
            self._client.close()

    def __enter__(self) -> BatchSender:
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
    """Retry-After in seconds (capped); its HTTP-date form is not used by our service and is ignored."""
    value = resp.headers.get("retry-after")
    try:
        return min(RETRY_AFTER_MAX_S, float(value)) if value else None
    except ValueError:
        return None
