"""A small per-process LRU of values that belong to one version of a row (a curve's points,
its cliff analysis): a lookup with another version is a miss, so new data is never served stale."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from cachetools import LRUCache

V = TypeVar("V")


class VersionedCache(Generic[V]):
    """Keys should name the database too (one process may serve several in tests)."""

    def __init__(self, size: int = 20_000) -> None:
        self._data: LRUCache[Hashable, tuple[int, V]] = LRUCache(maxsize=size)
        self._lock = threading.Lock()  # an LRUCache reorders on reads too: not thread-safe alone

    def get(self, key: Hashable, version: int) -> V | None:
        with self._lock:
            hit = self._data.get(key)
        return hit[1] if hit is not None and hit[0] == version else None

    def put(self, key: Hashable, version: int, value: V) -> V:
        with self._lock:
            self._data[key] = (version, value)
        return value


@dataclass(slots=True)
class _Body:
    """One cached body. Confirming it updates it in place: a new object per entry per poll
    (several a second, thousands of entries) was what aged into the collector's oldest
    generation and set off its full passes every few seconds."""

    version: int
    body: bytes
    checked: float  # when this version was last confirmed current
    generation: int


class ResponseCache:
    """Rendered bodies of per-curve reads (a curve, its cliffs), each with the curve version it
    was built from and when that version was last confirmed against the database.

    A body confirmed within `freshness` seconds is served with no database round trip, and a
    poller confirms every cached curve in one query each third of `freshness` (`stamp`/`confirm_all`),
    so under load reads cost only the HTTP layer; a read past `freshness` checks the version
    itself. Writes made through this process call `expire_all` and are seen at once; writes
    through other workers or replicas within `freshness` seconds. Bounded by the total size of
    the bodies, least recently used out first.

    Keys are (kind, curve id).
    """

    def __init__(self, freshness: float, max_bytes: int) -> None:
        self._data: OrderedDict[tuple[str, int], _Body] = OrderedDict()
        self._lock = threading.Lock()
        self._freshness = freshness
        self._max_bytes = max_bytes
        self._bytes = 0
        self._generation = 0  # bumped by expire_all: every entry must be confirmed again
        self._polled = threading.Condition(self._lock)
        self.polls = 0  # confirm_all calls so far: lets a caller wait for the poller, not the clock

    def fresh(self, key: tuple[str, int], now: float) -> tuple[int, bytes] | None:
        with self._lock:
            hit = self._data.get(key)
            if hit is None or hit.generation != self._generation or now - hit.checked > self._freshness:
                return None
            self._data.move_to_end(key)
            return hit.version, hit.body

    def confirm(self, key: tuple[str, int], version: int, now: float) -> bytes | None:
        """The body if it was built from this version (now confirmed current), else None."""
        with self._lock:
            hit = self._data.get(key)
            if hit is None or hit.version != version:
                return None
            hit.checked, hit.generation = now, self._generation
            self._data.move_to_end(key)
            return hit.body

    def put(self, key: tuple[str, int], version: int, body: bytes, now: float) -> bytes:
        with self._lock:
            old = self._data.pop(key, None)
            self._bytes -= len(old.body) if old else 0
            if len(body) <= self._max_bytes:
                self._data[key] = _Body(version, body, now, self._generation)
                self._bytes += len(body)
            while self._bytes > self._max_bytes:
                _, evicted = self._data.popitem(last=False)
                self._bytes -= len(evicted.body)
        return body

    def stamp(self) -> tuple[set[int], int]:
        """The cached curve ids and the generation, taken before their versions are read."""
        with self._lock:
            return {key[1] for key in self._data}, self._generation

    def confirm_all(self, ids: set[int], versions: dict[int, int], generation: int, now: float) -> None:
        """Versions read (at `now` or later) for the curve `ids` of `stamp`: matching entries are
        confirmed, moved or vanished curves dropped. A write since the stamp keeps them expired."""
        with self._lock:
            stale = []
            for key, hit in self._data.items():
                if key[1] not in ids:
                    continue
                current = versions.get(key[1])
                if current is None or current != hit.version:
                    stale.append(key)
                elif hit.checked < now:
                    hit.checked, hit.generation = now, generation
            for key in stale:
                self._bytes -= len(self._data.pop(key).body)
            self._count_poll()

    def polled_nothing(self) -> None:
        """A poll that found no cached curve to confirm still counts as a poll."""
        with self._lock:
            self._count_poll()

    def _count_poll(self) -> None:  # with the lock held
        self.polls += 1
        self._polled.notify_all()

    def wait_for_polls(self, polls: int, timeout: float) -> bool:
        """Block until confirm_all has run `polls` times in all (True) or the timeout passed."""
        with self._polled:
            return self._polled.wait_for(lambda: self.polls >= polls, timeout)

    def expire_all(self) -> None:
        with self._lock:
            self._generation += 1
