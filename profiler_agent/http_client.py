"""The agent's HTTP client: a stop signal never cuts a call to the service in half.

Raised inside httpx, a KeyboardInterrupt can land between a lock's acquire and the block that
releases it (httpcore's connection pool); the command then hangs on its way out, closing the client.
So a call runs inside a breakable `shielded()` block: a first Ctrl-C or SIGTERM is raised once the
answer is in (or WAIT_AT_MOST_S passed, or the timeout), a second one at once. On the way out (a stop
raised: the last rows sent, a job given back) a call waits at most STOPPING_TIMEOUT_S, so that a
service that hangs does not outlast the grace a supervisor gives before SIGKILL (docker stop's 10 s).
"""

from __future__ import annotations

from typing import Any

import httpx

from gac.agent.interrupt import raise_held_stop, shielded, stopping

STOPPING_TIMEOUT_S = 3.0
# A connection takes well under a second to a service that is up; past this, the network drops packets (or the
# service's backlog is full), and a run that waited out a 30 s timeout per call would time nothing meanwhile.
CONNECT_AT_MOST_S = 5.0


class StopSafeClient(httpx.Client):
    """httpx.Client whose calls a first stop signal waits for (see the module's docstring)."""

    _cut = False  # a stop was raised inside a call (a second one, or the deadline): its pool may hold a lock

    def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        if stopping():
            request.extensions["timeout"] = httpx.Timeout(STOPPING_TIMEOUT_S).as_dict()
        timeout = dict(request.extensions.get("timeout") or {})
        timeout["connect"] = min(timeout.get("connect") or CONNECT_AT_MOST_S, CONNECT_AT_MOST_S)
        request.extensions["timeout"] = timeout
        with shielded(breakable=True):
            try:
                return super().send(request, **kwargs)
            except httpx.HTTPError as err:
                raise_held_stop(err)  # a stop waited for this call: it is not dropped with the failure
                raise
            except KeyboardInterrupt:
                self._cut = True
                raise

    def close(self) -> None:
        """Close the connections, unless a stop cut a call: its connection pool may then hold a lock that nothing will
        release, and closing would wait on it for ever. The process is on its way out; the system closes the sockets."""
        if not self._cut:
            super().close()

    def __exit__(self, *exc: Any) -> None:  # httpx's own closes the transport without close(): the same rule here
        if not self._cut:
            super().__exit__(*exc)


__all__ = ["CONNECT_AT_MOST_S", "STOPPING_TIMEOUT_S", "StopSafeClient"]
