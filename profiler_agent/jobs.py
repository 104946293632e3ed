"""Client for the service's profiling-job queue: claim, heartbeat, complete, fail, release.

A claimed job carries a lease; a background heartbeat extends it while the
agent runs the job's plan, and an expired lease sends the job back to the queue.
While a job runs, its progress is one line: which job of how many, points done
of the total, and the ETA from the rate measured so far (ProgressLine). An agent that
follows the queue (`gac agent run --jobs --follow`) waits between claims as Poll says.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict

from gac.agent.http_client import StopSafeClient
from gac.agent.interrupt import stopping
from gac.contracts.measurements import PlatformDescriptor
from gac.contracts.plans import SweepPlan


class Job(BaseModel):
    """What /v1/jobs/claim returns (extra fields the service adds are kept)."""

    model_config = ConfigDict(extra="allow")

    id: int | str
    plan: SweepPlan
    points: int | None = None  # the points in its plan, as the service counts them
    lease_expires_at: datetime | None = None
    attempts: int | None = None


class JobError(Exception):
    """The job endpoints answered with an error (`status`: its HTTP status)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class JobClient:
    """One agent's view of the queue; `agent` names it in every call (lease owner)."""

    def __init__(self, server: str, token: str, agent: str = "agent", client: httpx.Client | None = None, timeout_s: float = 30.0) -> None:
        self.server = server.rstrip("/")
        self.agent = agent
        self._client = client or StopSafeClient(timeout=timeout_s)
        self._own = client is None
        self._headers = {"Authorization": f"Bearer {token}"}
        self._progress_taken = True  # False once a service older than heartbeat's points_done refused it

    def _post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        resp = self._client.post(f"{self.server}{path}", json=body, headers=self._headers)
        if resp.status_code >= 400:
            raise JobError(f"POST {path}: HTTP {resp.status_code}: {resp.text[:500]}", resp.status_code)
        return resp

    def claim(self, platform: PlatformDescriptor, lease_seconds: int | None = None, skip: Sequence[int | str] = ()) -> Job | None:
        """The next job matching this platform, other than those in `skip`; None when the queue has nothing for it."""
        body: dict[str, Any] = {"platform": platform.model_dump(mode="json"), "agent": self.agent}
        if lease_seconds is not None:
            body["lease_seconds"] = lease_seconds
        if skip:  # only then: a service older than the field refuses it
            body["skip"] = [int(i) for i in skip][-1000:]
        resp = self._post("/v1/jobs/claim", body)
        if resp.status_code == 204 or not resp.content:
            return None
        return Job.model_validate(resp.json())

    def heartbeat(self, job_id: int | str, lease_seconds: int | None = None, points_done: int | None = None) -> dict[str, Any]:
        """Extend the lease; `points_done`: the job's points measured so far, shown in the queue while it runs.
        A service older than that field refuses it (422): the beat is sent again without it, and so are the next."""
        body: dict[str, Any] = {"agent": self.agent}
        if lease_seconds is not None:
            body["lease_seconds"] = lease_seconds
        if points_done is not None and self._progress_taken:
            try:
                return self._post(f"/v1/jobs/{job_id}/heartbeat", {**body, "points_done": points_done}).json()
            except JobError as err:
                if err.status != 422 or "points_done" not in str(err):
                    raise
                self._progress_taken = False
        return self._post(f"/v1/jobs/{job_id}/heartbeat", body).json()

    def complete(self, job_id: int | str, points: int, run_id: str | None = None, failures: str | None = None) -> dict[str, Any]:
        """Report the job done; `failures`: what could not be timed (sent only when some could not, so that a
        service older than the field still takes every other report)."""
        body: dict[str, Any] = {"agent": self.agent, "points": points}
        if run_id is not None:
            body["run_id"] = str(run_id)
        if not failures:
            return self._post(f"/v1/jobs/{job_id}/complete", body).json()
        # A service older than the field refuses it: the job is done all the same, as that service knew it.
        return self._post_newer(f"/v1/jobs/{job_id}/complete", body, "failures", failures[:2000])

    def job(self, job_id: int | str) -> dict[str, Any]:
        """The job as the service holds it now (its status and lease owner)."""
        resp = self._client.get(f"{self.server}/v1/jobs/{job_id}", headers=self._headers, timeout=10)
        if resp.status_code >= 400:
            raise JobError(f"GET /v1/jobs/{job_id}: HTTP {resp.status_code}: {resp.text[:500]}", resp.status_code)
        return dict(resp.json())

    def fail(self, job_id: int | str, error: str) -> dict[str, Any]:
        return self._post(f"/v1/jobs/{job_id}/fail", {"agent": self.agent, "error": (error or "unknown error")[:2000]}).json()

    def release(self, job_id: int | str, reason: str | None = None, points_done: int | None = None) -> dict[str, Any]:
        """Give a leased job back (the agent is stopping): queued again at once, no attempt used up, showing
        points_done (the job's points measured so far) done."""
        body: dict[str, Any] = {"agent": self.agent}
        if reason:
            body["reason"] = reason[:2000]
        if points_done is None:
            return self._post(f"/v1/jobs/{job_id}/release", body).json()
        return self._post_newer(f"/v1/jobs/{job_id}/release", body, "points_done", points_done)

    def _post_newer(self, path: str, body: dict[str, Any], name: str, value: object) -> dict[str, Any]:
        """POST body with a field older services lack: one that refuses it (a 422 naming it) gets the body without it."""
        try:
            return self._post(path, {**body, name: value}).json()
        except JobError as err:
            if err.status != 422 or name not in str(err):
                raise
            return self._post(path, body).json()

    def queued_for(self, platform: PlatformDescriptor, limit: int = 1000, page_size: int = 500, max_pages: int = 2) -> int | None:
        """How many queued jobs this platform could claim now, counted up to `limit`.

        The service lists the queue (GET /v1/jobs?status=queued) but does not say which jobs
        match a platform, so its claim rule is applied here (job_matches). None when the
        queue cannot be read (an older service, a refused read, a network error) or is
        longer than max_pages pages before `limit` matches: unknown, never guessed."""
        count = 0
        fingerprint = platform.fingerprint()
        for item in self._queued(page_size, max_pages):
            if item is None:
                return None
            if job_matches(item.get("match") or {}, platform, fingerprint) and _attempts_left(item):
                count += 1
                if count >= limit:
                    return count
        return count

    def queued_at_other_threads(self, platform: PlatformDescriptor, cores: int | None = None, page_size: int = 500) -> dict[int, int]:
        """Queued jobs bound to this machine timed with another thread count (the fingerprint of this
        CPU at 2 threads, for an agent timing with 1), by that count: jobs it will never claim as it
        is. Read from the queue's first page; empty when there are none or it cannot be read."""
        found: dict[int, int] = {}
        seen: dict[str, int | None] = {}  # a queue's jobs share a few fingerprints: each is tried once
        for item in self._queued(page_size, max_pages=1):
            fingerprint = ((item or {}).get("match") or {}).get("fingerprint")
            if item is None or not fingerprint or not _attempts_left(item):
                continue
            if fingerprint not in seen:
                seen[fingerprint] = platform.threads_for(fingerprint, cores)
            threads = seen[fingerprint]
            if threads is not None:
                found[threads] = found.get(threads, 0) + 1
        return found

    def _queued(self, page_size: int, max_pages: int) -> Iterator[dict[str, Any] | None]:
        """The queued jobs as the service lists them, page by page; None (last) when a page could not
        be read, or more pages than max_pages remain."""
        cursor = 0
        for _ in range(max_pages):
            try:
                resp = self._client.get(
                    f"{self.server}/v1/jobs", headers=self._headers, params={"status": "queued", "limit": page_size, "cursor": cursor}
                )
                if resp.status_code != 200:
                    yield None
                    return
                page = resp.json()
            except (httpx.HTTPError, ValueError):
                yield None
                return
            yield from page.get("items") or []
            cursor = page.get("next_cursor")
            if not cursor:
                return
        yield None

    def close(self) -> None:
        if self._own:
            self._client.close()


def retryable(err: Exception) -> bool:
    """Whether a failed claim or report may succeed later: the service unreachable, busy, failing or
    answering oddly (a transport error, 408, 429, 5xx, a body that is not the API's), not a refusal
    that asking again cannot change (401, 403, 409, 422)."""
    if isinstance(err, httpx.HTTPError):
        return True
    from gac.agent.delivery.sender import RETRYABLE_STATUS

    status = getattr(err, "status", None)
    return status is None or status in RETRYABLE_STATUS or status >= 500


@dataclass
class Poll:
    """How long an agent following the queue waits before it claims again: `every_s` while the
    queue is empty; after failed claims twice as long each time, up to `max_s`. Each wait is drawn
    within +/-25 % of that, so a fleet's agents started together do not claim in step."""

    every_s: float
    max_s: float = 60.0
    failures: int = 0
    rng: random.Random = field(default_factory=random.Random)

    def next_wait(self, failed: bool) -> float:
        """Seconds to wait after a claim that found nothing (failed False) or could not be made."""
        self.failures = min(self.failures + 1, 64) if failed else 0  # the wait is capped long before; 2**failures is not
        base = min(max(self.max_s, self.every_s), self.every_s * 2**self.failures)
        return base * self.rng.uniform(0.75, 1.25)


def _attempts_left(item: dict[str, Any]) -> bool:
    return bool(item.get("attempts", 0) < item.get("max_attempts", 1))


def job_matches(match: dict[str, Any], platform: PlatformDescriptor, fingerprint: str | None = None) -> bool:
    """The service's claim rule (service/jobs/repository.py:claimable): every field the job's
    match sets must agree; device_name is a case-insensitive substring of the platform's."""
    if match.get("fingerprint") and match["fingerprint"] != (fingerprint or platform.fingerprint()):
        return False
    if match.get("device_kind") and match["device_kind"] != platform.device_kind:
        return False
    return not (match.get("device_name") and str(match["device_name"]).lower() not in platform.device_name.lower())


def format_duration(seconds: float) -> str:
    """4.2s, 45s, 3m05s, 2h07m."""
    if seconds < 9.95:
        return f"{max(0.0, seconds):.1f}s"
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def job_run_id(server: str, job_id: int | str, fingerprint: str) -> uuid.UUID:
    """The run every attempt of one job on one platform stores into: an attempt stopped by a signal (or
    by a lost lease) leaves its points in this run, and the next attempt leaves them out. Per platform,
    as a run covers one; a job matched by several platforms is measured whole on each."""
    # The URL as spelt before norm_server read case and default ports: an agent upgraded mid-job finds its points.
    return uuid.uuid5(uuid.NAMESPACE_URL, f"{server.rstrip('/')}/v1/jobs/{job_id}#{fingerprint}")


def job_label(k: int, n: int | None) -> str:
    """'job 2 of 5'; 'job 2' when how many is unknown."""
    return f"job {k}" + (f" of {n}" if n else "")


@dataclass
class ProgressLine:
    """One line of progress: 'job 2 of 5: 30/120 points, ETA 3m00s (id 17, plan quick)', and when
    done 'job 2 of 5: 120/120 points in 4m01s, 0.498 points/s (id 17, plan quick)'. What counts comes first, so
    a narrow terminal cuts the line's tail, not its figures.

    The ETA is the time per point measured so far times the points left (the total grows
    when adaptive sweeps refine, so the ETA can grow with it); '-' before the first point. The
    first round of points (one point, or the timer's points_per_round timed together) pays once
    for what the rest do not (allocating weights, a library's set-up): once the next round is
    done, the time per point is that of the points after it. Between points the ETA counts down,
    but never below what the points after the running round (up to `per_round` points) take: a
    slow point holds it there rather than pretending the run is nearly over."""

    label: str
    about: str = ""
    started: float = field(default_factory=time.monotonic)
    first_round: int = 1  # points timed together at first: their one-time costs are left out of the rate
    per_round: int = 1  # the most points timed together later (a GPU timer's round, after adaptive sweeps' single points)
    total: int = 0  # the points the run has set out to time so far (adaptive sweeps' refinement grows it)
    refining: bool = False  # an adaptive sweep may still add points (they are timed first: false once past them)
    # (done, when): the highest count noted, and the first that completed the first round. Counts only move
    # forward, so a refresh drawing a count the run has passed already cannot move them back.
    _reached: tuple[int, float] | None = field(default=None, init=False, repr=False)
    _first: tuple[int, float] | None = field(default=None, init=False, repr=False)

    def line(self, done: int, total: int, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        done, at = self.reached(done, now)
        total = max(total, done)
        if done >= total:
            elapsed = now - self.started
            rate = f", {done / elapsed:.3g} points/s" if elapsed > 0 and done else ""
            text = f"{self.label}: {done}/{total} points in {format_duration(elapsed)}{rate}"
        else:
            text = f"{self.label}: {done}/{total} points, ETA {self._eta(done, total, at, now)}"
        return f"{text} {self.about}" if self.about else text

    @property
    def done(self) -> int:
        """The most points noted done so far (0 before the first)."""
        return self._reached[0] if self._reached is not None else 0

    def reached(self, done: int, now: float | None = None) -> tuple[int, float]:
        """Note that `done` points are done (at `now`, unless as many were noted before): the highest count noted, and when."""
        if self._reached is None or done > self._reached[0]:
            self._reached = (done, time.monotonic() if now is None else now)
            if self._first is None and done >= self.first_round:
                self._first = self._reached
        return self._reached

    def _eta(self, done: int, total: int, at: float, now: float) -> str:
        if done <= 0:
            return "-"
        if self._first is not None and done >= self._first[0] + self.first_round:
            per_point = (at - self._first[1]) / (done - self._first[0])
        else:
            per_point = (at - self.started) / done
        left = total - done
        # Counting down while the next round runs, but not below what the rounds after it take.
        running = max(self.first_round, self.per_round)
        return format_duration(max(per_point * left - (now - at), per_point * max(0, left - running)))


HEARTBEAT_AT_MOST_S = 30.0  # a cancelled or lost job is noticed within this (plus a point), not a third of a long lease


def heartbeat_every_s(lease_seconds: float) -> float:
    """How often a job's lease is extended: a third of it, so two beats may fail before it lapses, and at
    most HEARTBEAT_AT_MOST_S, since a beat is also how the agent learns the job is no longer its own."""
    return min(HEARTBEAT_AT_MOST_S, max(5.0, lease_seconds / 3))


LEASE_GONE = (403, 404, 409)  # the job is another token's, gone, or no longer leased to this agent
REVOKED = 401  # this agent's token: nothing it sends counts any more, the job's report included


class Heartbeat:
    """Extends a job's lease every `interval_s` until stopped (a context manager). A beat the service
    refuses because the lease is no longer this agent's (it expired and another agent claimed the
    job, or the job was cancelled) ends the beating and says why in `lost`."""

    def __init__(
        self,
        jobs: JobClient,
        job_id: int | str,
        interval_s: float,
        lease_seconds: int | None = None,
        progress: Callable[[], int] | None = None,
    ) -> None:
        self.jobs, self.job_id, self.interval_s, self.lease_seconds = jobs, job_id, interval_s, lease_seconds
        self.progress = progress  # the job's points measured so far, sent with each beat
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"heartbeat-{job_id}", daemon=True)
        self._counted = threading.Condition()
        self.sent = 0
        self.failures = 0
        self.lost: str | None = None
        self.revoked = False  # lost because the service no longer takes the token (nothing it sends counts)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.jobs.heartbeat(self.job_id, self.lease_seconds, self.progress() if self.progress else None)
                ok = True
            except JobError as err:
                if err.status in LEASE_GONE:
                    self.lost = str(err)
                    return
                if err.status == REVOKED:  # timing on would only fill the spool's rejected file
                    self.revoked = True
                    self.lost = f"{err}; the service no longer takes this agent's token, and the job stays leased until its lease runs out"
                    return
                ok = False
            except httpx.HTTPError:
                ok = False  # the service may be briefly down; the lease covers a few misses
            with self._counted:
                self.sent += ok
                self.failures += not ok
                self._counted.notify_all()

    def wait_for(self, beats: int, timeout: float) -> bool:
        """Block until `beats` heartbeats were acknowledged (True) or the timeout passed (False)."""
        with self._counted:
            return self._counted.wait_for(lambda: self.sent >= beats, timeout)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        # A beat under way ends soon; on the way out of a stopped run it is not waited for long (the thread is a daemon).
        self._thread.join(timeout=1 if stopping() else 5)


__all__ = [
    "Heartbeat",
    "Job",
    "JobClient",
    "JobError",
    "Poll",
    "ProgressLine",
    "format_duration",
    "heartbeat_every_s",
    "job_label",
    "job_matches",
    "retryable",
]
