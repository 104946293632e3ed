"""Failed authentication, rate-limited per client and summed up in one log line.

A client that keeps sending bad tokens gets 429 with Retry-After once its allowance is spent,
answered before any database lookup; the log gets one line per interval that counts the
failures and names the worst client, instead of one line per request. The allowance is per
worker process: N workers let a client fail N times as often.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from cachetools import LRUCache

log = logging.getLogger("gac.auth")


@dataclass
class _Bucket:
    tokens: float
    at: float


class AuthFailures:
    """A token bucket per client address: `burst` failures at once, then `per_second`."""

    def __init__(
        self,
        burst: int,
        per_second: float,
        summary_every_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        clients: int = 10_000,
    ) -> None:
        self.burst, self.per_second, self.summary_every_s = burst, per_second, summary_every_s
        self._clock = clock
        self._buckets: LRUCache[str, _Bucket] = LRUCache(maxsize=clients)  # an address flood forgets the oldest
        self._lock = threading.Lock()  # called from the event loop and from the thread pool
        self._failed: Counter[str] = Counter()
        self._refused: Counter[str] = Counter()
        self._since: float | None = None  # start of the interval the next summary covers

    def _bucket(self, client: str, now: float) -> _Bucket:
        bucket = self._buckets.get(client)
        if bucket is None:
            bucket = self._buckets[client] = _Bucket(float(self.burst), now)
        else:
            bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.at) * self.per_second)
            bucket.at = now
        return bucket

    def retry_after(self, client: str) -> int:
        """0 when client may try a token now; else whole seconds until it may (and it is counted)."""
        with self._lock:
            now = self._clock()
            bucket = self._bucket(client, now)
            if bucket.tokens >= 1:
                return 0
            self._refused[client] += 1
            self._summarize(now)
            return max(1, math.ceil((1 - bucket.tokens) / self.per_second))

    def failed(self, client: str) -> None:
        with self._lock:
            now = self._clock()
            bucket = self._bucket(client, now)
            bucket.tokens = max(0.0, bucket.tokens - 1)
            self._failed[client] += 1
            self._summarize(now)

    def _summarize(self, now: float) -> None:
        """One line for the first failure after a quiet interval, then at most one per interval."""
        if self._since is not None and now - self._since < self.summary_every_s:
            return
        self.flush(now)

    def flush(self, now: float | None = None) -> None:
        """Log what the current interval counted (if anything) and start the next one."""
        now = self._clock() if now is None else now
        failed, refused = sum(self._failed.values()), sum(self._refused.values())
        if failed or refused:
            clients = set(self._failed) | set(self._refused)
            worst, worst_n = (self._failed + self._refused).most_common(1)[0]
            span = 0.0 if self._since is None else now - self._since
            log.warning(
                "authentication failed %d times from %d clients in the last %.0f s (%d more refused by the rate limit); most from %s (%d)",
                failed,
                len(clients),
                span,
                refused,
                worst,
                worst_n,
            )
        self._failed.clear()
        self._refused.clear()
        self._since = now


class QuietRefusals(logging.Filter):
    """Drops the access-log line of each refused token (401, and the 429 of the rate limit above):
    AuthFailures sums them up instead. Alignment 429s (/v1/align) keep their lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5:  # uvicorn's: client, method, path, version, status
            status, path = args[4], str(args[2])
            return not (status == 401 or (status == 429 and not path.startswith("/v1/align")))
        return True


def quiet_access_log() -> None:
    """Install QuietRefusals on uvicorn's access log, once per process."""
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, QuietRefusals) for f in access.filters):
        access.addFilter(QuietRefusals())
