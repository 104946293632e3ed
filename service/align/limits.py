"""How many alignments each token may run at once in this worker process (the rest get 429)."""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterator
from contextlib import contextmanager

from service.errors import TooManyRequests

RETRY_AFTER_S = 5  # an alignment takes seconds: come back after a few


class AlignSlots:
    def __init__(self, per_token: int) -> None:
        self.per_token = per_token
        self._running: dict[Hashable, int] = {}
        self._lock = threading.Lock()

    @contextmanager
    def slot(self, holder: Hashable) -> Iterator[None]:
        """Run one alignment for `holder` (a token id, or None for anonymous callers)."""
        with self._lock:
            running = self._running.get(holder, 0)
            if running >= self.per_token:
                raise TooManyRequests(
                    f"this token already runs {running} alignments here (GAC_ALIGN_CONCURRENCY_PER_TOKEN={self.per_token}); "
                    "retry when one finishes", RETRY_AFTER_S,
                )
            self._running[holder] = running + 1
        try:
            yield
        finally:
            with self._lock:
                self._running[holder] -= 1
                if not self._running[holder]:
                    del self._running[holder]
