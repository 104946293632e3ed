"""Ids of platforms, agents and runs that this process has stored (committed), so that a stream
of batches from one agent skips their upserts: eight of the twelve statements of a batch.
Entries last STAMP_EVERY, so a database restored or emptied under a running service is
written to correctly again within that time."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

from cachetools import LRUCache

from gac.contracts.measurements import DTYPE_FIELDS, PlatformDescriptor

# "Last seen" stamps are refreshed at most this often, so that concurrent batches from one
# platform do not queue on one row lock; within it, a known id needs no statement at all.
STAMP_EVERY = timedelta(seconds=30)


class KnownIds:
    """At most `size` ids, the least recently used forgotten first. How fresh an id is stays the
    caller's to say (`now`: its transaction's clock, the one the stamps are written with), so
    this is an LRU, not a TTL cache on a clock of its own."""

    def __init__(self, size: int = 10_000) -> None:
        self._ids: LRUCache[tuple, tuple[int, datetime]] = LRUCache(maxsize=size)
        self._lock = threading.Lock()  # an LRUCache reorders on reads too: not thread-safe alone

    def get(self, key: tuple, now: datetime) -> int | None:
        """The id, if stored within the last STAMP_EVERY."""
        with self._lock:
            hit = self._ids.get(key)
        return hit[0] if hit is not None and now - hit[1] < STAMP_EVERY else None

    def clear(self) -> None:
        with self._lock:
            self._ids.clear()

    def put(self, key: tuple, value: int, now: datetime) -> None:
        """Only after the transaction that wrote or read it committed: a rolled-back id may not exist."""
        with self._lock:
            self._ids[key] = (value, now)


KNOWN = KnownIds()


def platform_key(db: str, platform: PlatformDescriptor) -> tuple:
    """Its fingerprint and its dtype facts (not identity, but stored): other facts miss, so they are written.
    Two agents of one platform reporting different facts by turns can each hit their own entry, so the
    stored facts may be the other's for up to STAMP_EVERY: the latest report wins within that."""
    return (db, "platform", platform.fingerprint(), platform.model_dump_json(include=set(DTYPE_FIELDS), exclude_none=True))


def agent_key(db: str, name: str) -> tuple:
    return (db, "agent", name)


def run_key(db: str, run_id: uuid.UUID) -> tuple:
    return (db, "run", run_id)


class IdResolver:
    """Platform, agent and run ids for one transaction: from KNOWN, else stored (an upsert).
    Those stored are put in KNOWN by remember(), once the transaction commits: a rolled-back id
    may not exist."""

    def __init__(self, now: datetime) -> None:
        self._now = now
        self._stored: list[tuple[tuple, int]] = []

    def resolve(self, key: tuple, store: Callable[[], int]) -> int:
        value = KNOWN.get(key, self._now)
        if value is None:
            value = store()
            self._stored.append((key, value))
        return value

    def remember(self) -> None:
        for key, value in self._stored:
            KNOWN.put(key, value, self._now)
