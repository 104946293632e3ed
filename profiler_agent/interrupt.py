"""Stopping a run without losing what it measured: Ctrl-C and SIGTERM take the same clean path.

While `stop_signals()` is active (one command's run), SIGINT and SIGTERM raise KeyboardInterrupt
in the main thread, so the command flushes what it has measured, says how many points it kept
and exits 130 (SIGINT) or 143 (SIGTERM). A signal that arrives inside `shielded()` (a commit of
measured rows) waits for the block's end: a commit is never cut in half. A block that only waits
(a batch already spooled, sent to the service) is marked `breakable`: a stop there waits for the
service's answer, so that what the run says it kept is true, and a second stop does not wait.
SIGKILL cannot be handled; what was committed before it stays, which is why rows are committed
every second or so (`commit_every_s`) rather than at the end.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}  # 128 + the signal's number, as a shell reports it
COMMIT_ROWS = 200  # rows that make a commit however little time has passed
# A stop held where the run only waits on the service is raised after this, answer or not: a supervisor's grace
# before SIGKILL (docker stop: 10 s) leaves room for the way out (one try of at most STOPPING_TIMEOUT_S per call).
WAIT_AT_MOST_S = 3.0


def commit_every_s() -> float:
    """GAC_COMMIT_EVERY_S (gac.agent.settings)."""
    from gac.agent.settings import AgentSettings

    return AgentSettings().commit_every_s


class Shield:
    """One open shielded() block. `breakable`: it only waits (on the service's answer), so a stop signal
    after the first one, or once the run is on its way out, is raised at once."""

    def __init__(self, breakable: bool) -> None:
        self._breakable = breakable

    @property
    def breakable(self) -> bool:
        return self._breakable

    @breakable.setter
    def breakable(self, value: bool) -> None:
        self._breakable = value
        if value:  # a commit's durable part done: a stop it held now only waits
            _Deadline.arm_if_waiting()


class _State:
    """Process-wide, as signal dispositions are."""

    open: list[Shield] = []  # shielded() blocks open, innermost last
    pending = False  # a stop signal arrived inside one of them
    stopping = False  # a stop signal was raised: the command is on its way out
    received: int | None = None  # the last stop signal (None: none, or a KeyboardInterrupt raised otherwise)
    depth = 0  # stop_signals() blocks open: the outermost is the command's, and its end ends the stop


def _only_waiting() -> bool:
    """Every open shielded() block only waits (none is a commit)."""
    return bool(_State.open) and all(s.breakable for s in _State.open)


def _raise_stop(cause: BaseException | None = None) -> None:
    _State.pending, _State.stopping = False, True  # raised now: not again at a block's end
    _Deadline.disarm()
    if cause is None:
        raise KeyboardInterrupt
    raise KeyboardInterrupt from cause


class _Deadline:
    """A stop held where the run only waits on the service is raised WAIT_AT_MOST_S later by SIGALRM, answer or
    not, as a second stop would be. Armed when the run comes to only wait with a stop held (the stop came in a
    wait, or the commit it came in is done), never over a timer someone else set (the stop then waits for the
    call's own timeout), and disarmed, SIGALRM's handler given back, once the stop is raised or the command ends."""

    armed = False
    saved: object = None

    @classmethod
    def arm_if_waiting(cls) -> None:
        if cls.armed or not stop_cuts_short() or threading.current_thread() is not threading.main_thread():
            return
        if signal.getitimer(signal.ITIMER_REAL)[0] > 0:
            return
        cls.saved = signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, WAIT_AT_MOST_S)
        cls.armed = True

    @classmethod
    def disarm(cls) -> None:
        if cls.armed and threading.current_thread() is threading.main_thread():
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, cls.saved)  # type: ignore[arg-type]  # what signal.signal returned
            cls.armed = False


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    """The deadline: still only waiting, the stop is raised now; in a commit begun since, it waits for its end."""
    _Deadline.disarm()
    if stop_cuts_short():
        _raise_stop()


def _on_stop(signum: int, frame: FrameType | None) -> None:
    _State.received = signum
    if not _State.open or (_only_waiting() and (_State.pending or _State.stopping)):
        _raise_stop()
    said, _State.pending = _State.pending, True
    if not said:  # said at once: the step may wait on a service for a while
        _Deadline.arm_if_waiting()
        again = "; again to stop without waiting" if _only_waiting() else ""
        if _Deadline.armed:
            again = f" (at most {WAIT_AT_MOST_S:g} s{again})"
        try:  # os.write, not print: a handler writing through sys.stderr's buffer while the command does can raise
            os.write(2, f"\n{signal.Signals(signum).name}: stopping once the step under way ends{again}\n".encode())
        except OSError:  # stderr closed, or a pipe whose reader the same Ctrl-C ended: the stop holds all the same
            pass


def stopping() -> bool:
    """A stop was raised: the command is on its way out (what it sends now gets one short try)."""
    return _State.stopping


def stop_pending() -> bool:
    """A stop signal arrived inside a shielded() block and waits for the block's end."""
    return _State.pending


def stop_cuts_short() -> bool:
    """A stop signal is held back, and every open shielded() block only waits: what is left of the
    waiting (a retry's backoff, the next spooled batch) is not worth doing."""
    return _State.pending and _only_waiting()


@contextmanager
def shielded(breakable: bool = False) -> Iterator[Shield]:
    """A stop signal that arrives inside the block is raised (as KeyboardInterrupt) at its end. A breakable
    block (set it on the yielded Shield once the block's durable part is done) gives in to a second one."""
    shield = Shield(breakable)
    if threading.current_thread() is not threading.main_thread():
        # Signals reach the main thread only: another thread's block (a job's heartbeat) holds none back,
        # and must not raise the main thread's stop in its own.
        yield shield
        return
    _State.open.append(shield)
    try:
        yield shield
    except BaseException:
        if _ends_holding_a_stop(shield):
            _State.stopping = True  # the error goes on as it is (a call to the service raises the stop instead: raise_held_stop)
        raise
    if _ends_holding_a_stop(shield):
        _raise_stop()


def raise_held_stop(cause: BaseException) -> None:
    """Raise a stop held back where the run only waits (KeyboardInterrupt from `cause`), if there is one: for a call to
    the service that failed while a stop waited for it, whose caller would handle the failure and go on (timing a whole
    plan after SIGTERM). Inside a commit's block the stop still waits for the block's end; in another thread (a
    heartbeat) nothing is raised: the stop is the main thread's."""
    if stop_cuts_short() and threading.current_thread() is threading.main_thread():
        _raise_stop(cause)


def _ends_holding_a_stop(shield: Shield) -> bool:
    """Close the block; True when it was the last one open and a stop waited for it (now no longer pending)."""
    _State.open.remove(shield)  # a signal from here on finds no block open: raised at once
    held = not _State.open and _State.pending
    _State.pending = _State.pending and not held
    if not held:
        _Deadline.arm_if_waiting()  # an inner commit ended with a stop held: what is left only waits
    return held


def sleep_unless_stopped(seconds: float) -> None:
    """time.sleep, cut short (KeyboardInterrupt) by a stop signal held back where the run only waits:
    a wait between tries is not worth finishing once the run was asked to stop."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if stop_cuts_short():
            _raise_stop()
        time.sleep(min(left, 0.05))
    if stop_cuts_short():
        _raise_stop()


class StopSignals:
    """SIGINT and SIGTERM as KeyboardInterrupt for one command (see stop_signals)."""

    def __init__(self) -> None:
        self._saved: dict[int, object] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread may set handlers; there the defaults stay
        if _State.depth == 0:
            _State.received, _State.pending, _State.stopping = None, False, False
        _State.depth += 1
        for sig in EXIT_CODES:
            self._saved[sig] = signal.signal(sig, _on_stop)

    def release(self) -> None:
        """Give the signals back their previous handlers; the command's own (the outermost) ends its stop,
        so that a process running several (a test, a notebook) starts the next one afresh."""
        if not self._saved:
            return
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]  # what signal.signal returned
        self._saved.clear()
        _State.depth -= 1
        if _State.depth == 0:
            _State.pending, _State.stopping = False, False
            _Deadline.disarm()

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


FIRST_PASS_MORE = "a first pass: what it measures may call for more points"
REFINING_MORE = "adaptive sweeps: what they measure may call for more points between their coarse ones"


def interrupted_line(kept: int, not_measured: int, where: str, more: str = "") -> str:
    """What an interrupted command says last, e.g. 'interrupted: kept 27 measured points (stored), 3 points not
    measured; run the same command again to continue'. `more`: why what is not measured may not be all that
    is left (FIRST_PASS_MORE, REFINING_MORE)."""
    return (
        f"interrupted: kept {kept} measured point{'s' if kept != 1 else ''} ({where}), {not_measured} "
        f"point{'s' if not_measured != 1 else ''} not measured; run the same command again to continue" + (f" ({more})" if more else "")
    )


__all__ = [
    "COMMIT_ROWS",
    "FIRST_PASS_MORE",
    "REFINING_MORE",
    "EXIT_CODES",
    "Shield",
    "StopSignals",
    "WAIT_AT_MOST_S",
    "commit_every_s",
    "interrupted_line",
    "raise_held_stop",
    "received_name",
    "shielded",
    "sleep_unless_stopped",
    "stop_cuts_short",
    "stopping",
    "stop_signals",
]
