"""Client for the service's profiling-job queue: claim, heartbeat, complete, fail.

A claimed job carries a lease; a background heartbeat extends it while the
agent runs the job's plan, and an expired lease sends the job back to the queue.
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict

from gac.contracts.measurements import PlatformDescriptor
from gac.contracts.plans import SweepPlan


class Job(BaseModel):
    """What /v1/jobs/claim returns (extra fields the service adds are kept)."""

    model_config = ConfigDict(extra="allow")

    id: int | str
    plan: SweepPlan
    lease_expires_at: datetime | None = None
    attempts: int | None = None


class JobError(Exception):
    """The job endpoints answered with an error."""


class JobClient:
    """One agent's view of the queue; `agent` names it in every call (lease owner)."""

    def __init__(
        self, server: str, token: str, agent: str = "agent", client: httpx.Client | None = None, timeout_s: float = 30.0
    ) -> None:
        self.server = server.rstrip("/")
        self.agent = agent
        self._client = client or httpx.Client(timeout=timeout_s)
        self._own = client is None
        self._headers = {"Authorization": f"Bearer {token}"}

    def _post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        resp = self._client.post(f"{self.server}{path}", json=body, headers=self._headers)
        if resp.status_code >= 400:
            raise JobError(f"POST {path}: HTTP {resp.status_code}: {resp.text[:500]}")
        return resp

    def claim(self, platform: PlatformDescriptor, lease_seconds: int | None = None) -> Job | None:
        """The next job matching this platform, or None when the queue has nothing for it."""
        body: dict[str, Any] = {"platform": platform.model_dump(mode="json"), "agent": self.agent}
        if lease_seconds is not None:
            body["lease_seconds"] = lease_seconds
        resp = self._post("/v1/jobs/claim", body)
        if resp.status_code == 204 or not resp.content:
            return None
        return Job.model_validate(resp.json())

    def heartbeat(self, job_id: int | str, lease_seconds: int | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"agent": self.agent}
        if lease_seconds is not None:
            body["lease_seconds"] = lease_seconds
        return self._post(f"/v1/jobs/{job_id}/heartbeat", body).json()

    def complete(self, job_id: int | str, points: int, run_id: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"agent": self.agent, "points": points}
        if run_id is not None:
            body["run_id"] = str(run_id)
        return self._post(f"/v1/jobs/{job_id}/complete", body).json()

    def fail(self, job_id: int | str, error: str) -> dict[str, Any]:
        return self._post(f"/v1/jobs/{job_id}/fail", {"agent": self.agent, "error": (error or "unknown error")[:2000]}).json()

    def close(self) -> None:
        if self._own:
            self._client.close()


class Heartbeat:
    """Extends a job's lease every `interval_s` until stopped (a context manager)."""

    def __init__(self, jobs: JobClient, job_id: int | str, interval_s: float, lease_seconds: int | None = None) -> None:
        self.jobs, self.job_id, self.interval_s, self.lease_seconds = jobs, job_id, interval_s, lease_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"heartbeat-{job_id}", daemon=True)
        self._counted = threading.Condition()
        self.sent = 0
        self.failures = 0

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.jobs.heartbeat(self.job_id, self.lease_seconds)
                ok = True
            except (httpx.HTTPError, JobError):
                ok = False  # the service may be briefly down; the lease covers a few misses
            with self._counted:
                self.sent += ok
                self.failures += not ok
                self._counted.notify_all()

    def wait_for(self, beats: int, timeout: float) -> bool:
        """Block until `beats` heartbeats were acknowledged (True) or the timeout passed (False)."""
        with self._counted:
            return self._counted.wait_for(lambda: self.sent >= beats, timeout)

    def __enter__(self) -> "Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


__all__ = ["Heartbeat", "Job", "JobClient", "JobError"]
