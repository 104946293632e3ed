"""The HTTP protocol and uvicorn options that `gac serve` runs: limits a client cannot talk its
way around before the application sees a request.

- A connection must send a whole request head within GAC_HEADER_TIMEOUT_SECONDS of opening
  (or of its last answer), and at most GAC_MAX_HEADER_BYTES of it: a half-open or dribbling
  socket is closed, so 40,000 of them cannot pin a worker's file descriptors.
- Each worker holds at most GAC_MAX_CONNECTIONS (and fewer than its file-descriptor limit).
  At the cap a new connection closes the one that has been idle (no request in flight) the
  longest, and is itself refused only when every held connection is busy: idle sockets can
  never crowd out a client with work to do.

The body's limits (token first, then size and time) are the application's: service/limits.py.
Uvicorn's own keep-alive timeout still closes a connection idle between requests.
"""

from __future__ import annotations

import asyncio
import resource
from typing import Any

from gac.service.settings import get_settings

try:  # uvicorn's "auto": httptools when installed (uvicorn[standard]), else h11
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _Base
except ImportError:  # pragma: no cover - the [standard] extra is a dependency of the service
    from uvicorn.protocols.http.h11_impl import H11Protocol as _Base  # type: ignore[assignment]

# File descriptors kept for everything that is not a client: database connections, the log, imports.
_FD_RESERVE = 128
_HEAD_TOO_LARGE = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


def connection_cap(wanted: int) -> int:
    """wanted, lowered to what this process's file-descriptor limit allows."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(8, min(wanted, soft - _FD_RESERVE))


def raise_fd_limit() -> int:
    """Lift this process's soft file-descriptor limit to its hard one (workers inherit it); the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft


def head_part(tail: bytes, data: bytes) -> tuple[int, bytes]:
    """How many bytes of a read are request head, given the head's last bytes before it (`tail`): up to and with the
    blank line that ends the head (which may begin in the tail), else all of it; and the tail after it."""
    seen = tail + data
    end = seen.find(b"\r\n\r\n")
    return (len(data) if end < 0 else max(0, end + 4 - len(tail))), seen[-3:]


class GuardedHttp(_Base):
    """uvicorn's HTTP/1.1 protocol with a request-head deadline, a head-size limit and a connection cap."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        settings = get_settings()  # this worker's GAC_ environment
        self._head_timeout = settings.header_timeout_seconds
        self._max_head = settings.max_header_bytes
        self._cap = connection_cap(settings.max_connections)
        self._head_timer: asyncio.TimerHandle | None = None
        self._armed_cycle: object = None
        self._head_bytes = 0
        self._head_tail = b""  # the last bytes of the head so far: its end may be split between two reads
        self._idle_since = 0.0

    def _idle(self) -> bool:
        """No request in flight: waiting for a request head (the first, or the next)."""
        return self.cycle is None or self.cycle.response_complete

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._idle_since = self.loop.time()
        if len(self.connections) > self._cap and not self._make_room():
            transport.close()  # every held connection is busy: this one waits for nothing
            return
        self._arm()

    def _make_room(self) -> bool:
        """Close the connection idle longest; False when none is idle."""
        idle = [c for c in self.connections if c is not self and isinstance(c, GuardedHttp) and c._idle() and not c.transport.is_closing()]
        if not idle:
            return False
        min(idle, key=lambda c: c._idle_since).transport.close()
        return True

    def _arm(self) -> None:
        """From now, the next request head must be complete within the header timeout."""
        if self._head_timer is not None:
            self._head_timer.cancel()
        self._armed_cycle = self.cycle
        self._head_bytes = 0
        self._head_tail = b""
        self._head_timer = self.loop.call_later(self._head_timeout, self._head_late)

    def _head_late(self) -> None:
        self._head_timer = None
        # A head completed since arming made a new cycle: that request is the body timeout's (service/limits.py).
        if self.cycle is self._armed_cycle and self._idle() and not self.transport.is_closing():
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self._idle() and not self.transport.is_closing():  # a request head, whole in this read or not
            head, self._head_tail = head_part(self._head_tail, data)
            self._head_bytes += head
            if self._head_bytes > self._max_head:  # before the parser reads it
                self.transport.write(_HEAD_TOO_LARGE)
                self.transport.close()
                return
        super().data_received(data)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._idle_since = self.loop.time()
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)


# What `gac serve` hands uvicorn (by import string: each worker process imports it).
PROTOCOL = "gac.service.server:GuardedHttp"
