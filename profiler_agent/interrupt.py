"""Stopping a run without losing what it measured: Ctrl-C and SIGTERM take the same clean path.

While `stop_signals()` is active (one command's run), SIGINT and SIGTERM raise KeyboardInterrupt
in the main thread, so the command flushes what it has measured, says how many points it kept
and exits 130 (SIGINT) or 143 (SIGTERM). A signal that arrives inside `shielded()` (a commit of
measured rows) waits for the block's end: a commit is never cut in half. SIGKILL cannot be
handled; what was committed before it stays, which is why rows are committed every second or
so (`commit_every_s`) rather than at the end.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}  # 128 + the signal's number, as a shell reports it
COMMIT_ROWS = 200  # rows that make a commit however little time has passed


def commit_every_s() -> float:
    """GAC_COMMIT_EVERY_S (gac.agent.settings)."""
    from gac.agent.settings import AgentSettings

    return AgentSettings().commit_every_s


class _State:
    """Process-wide, as signal dispositions are."""

    depth = 0  # shielded() blocks open
    pending = False  # a stop signal arrived inside one of them
    received: int | None = None  # the last stop signal (None: none, or a KeyboardInterrupt raised otherwise)


def _on_stop(signum: int, frame: FrameType | None) -> None:
    _State.received = signum
    if _State.depth:
        _State.pending = True
        return
    raise KeyboardInterrupt


@contextmanager
def shielded() -> Iterator[None]:
    """A stop signal that arrives inside the block is raised (as KeyboardInterrupt) at its end."""
    _State.depth += 1
    try:
        yield
    finally:
        _State.depth -= 1
        deliver = _State.depth == 0 and _State.pending
        if deliver:
            _State.pending = False
    if deliver:
        raise KeyboardInterrupt


class StopSignals:
    """SIGINT and SIGTERM as KeyboardInterrupt for one command (see stop_signals)."""

    def __init__(self) -> None:
        self._saved: dict[int, object] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread may set handlers; there the defaults stay
        _State.received, _State.pending = None, False
        for sig in EXIT_CODES:
            self._saved[sig] = signal.signal(sig, _on_stop)

    def release(self) -> None:
        """Give the signals back their previous handlers."""
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]  # what signal.signal returned
        self._saved.clear()

    @property
    def name(self) -> str:
        return received_name()

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(signal.Signals(_State.received or signal.SIGINT), 130)


def received_name() -> str:
    """The stop signal received, SIGTERM or SIGINT (a KeyboardInterrupt raised without one counts as Ctrl-C)."""
    return signal.Signals(_State.received or signal.SIGINT).name


@contextmanager
def stop_signals() -> Iterator[StopSignals]:
    """Install the handlers for the duration of a command's run; the previous ones come back after."""
    stop = StopSignals()
    stop.install()
    try:
        yield stop
    finally:
        stop.release()


def interrupted_line(kept: int, not_measured: int, where: str, first_pass: bool = False) -> str:
    """What an interrupted command says last, e.g. 'interrupted: kept 27 measured points (stored), 3 points not
    measured; run the same command again to continue'. `first_pass`: what is not measured is a first pass's,
    whose measurements decide what else to measure."""
    return (
        f"interrupted: kept {kept} measured point{'s' if kept != 1 else ''} ({where}), {not_measured} "
        f"point{'s' if not_measured != 1 else ''} not measured; run the same command again to continue"
        + (" (a first pass: what it measures may call for more points)" if first_pass else "")
    )


__all__ = ["COMMIT_ROWS", "EXIT_CODES", "StopSignals", "commit_every_s", "interrupted_line", "received_name", "shielded", "stop_signals"]
