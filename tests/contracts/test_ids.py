"""Agent-made ids are UUIDv7: time-ordered, so rows reach the unique index in order."""

from __future__ import annotations

import threading
import time
import uuid

from gac.contracts.ids import new_id


def test_layout_is_rfc_9562_version_7():
    before = time.time_ns() // 1_000_000
    made = new_id()
    after = time.time_ns() // 1_000_000
    assert made.version == 7
    assert made.variant == uuid.RFC_4122
    millis = int.from_bytes(made.bytes[:6], "big")
    assert before <= millis <= after


def test_strictly_increasing_within_a_millisecond_and_across_threads():
    per_thread: list[list[uuid.UUID]] = [[] for _ in range(4)]

    def make(out: list[uuid.UUID]) -> None:
        out.extend(new_id() for _ in range(20_000))

    threads = [threading.Thread(target=make, args=(out,)) for out in per_thread]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for ids in per_thread:  # many share a millisecond: the counter keeps them ordered
        assert all(a < b for a, b in zip(ids, ids[1:]))
    every = [i for ids in per_thread for i in ids]
    assert len(set(every)) == len(every)
    assert all(i.version == 7 and i.variant == uuid.RFC_4122 for i in every)
