"""An outage is one line in the log, however many requests fail during it."""

from __future__ import annotations

from gac.service.errors import OutageLog


def test_one_line_per_outage_with_the_quiet_count_in_the_next():
    now = [0.0]
    log = OutageLog(clock=lambda: now[0])
    lines = []
    for t in [0.0, 0.5, 1.0, 4.0, 8.5, 9.0]:  # one outage: each failure within QUIET_S of the last
        now[0] = t
        lines.append(log.failed())
    assert lines[0] == "" and lines[1:] == [None] * 5
    now[0] = 9.0 + OutageLog.QUIET_S + 0.1  # a new outage after a quiet spell
    assert log.failed() == " (the last outage failed 5 more requests)"
    now[0] += 1
    assert log.failed() is None
