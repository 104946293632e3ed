"""The deliverer: measurements streamed into batches, sent as they fill, spooled when the service cannot take them."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

from gac.agent.delivery.codec import DEFAULT_BATCH_SIZE, BatchBuffer, batch_document
from gac.agent.delivery.outcomes import DeliveryError, DeliveryStats, RejectedError
from gac.agent.delivery.sender import BatchSender, RetryPolicy
from gac.agent.delivery.spool import Spool, SpoolEntry
from gac.agent.interrupt import shielded, stopping
from gac.contracts.measurements import Batch, BatchReceipt, PlatformDescriptor, RunInfo

# Once the service is found down, a batch is tried at most this often (twice as long after each probe that fails, up to
# OFFLINE_PROBE_MAX_S); the others go straight to the spool. A probe waits PROBE_TIMEOUT_S at most: a service that
# hangs, or a network that drops packets, then holds the timing up a few seconds a minute, not a timeout per batch.
OFFLINE_PROBE_S = 10.0
OFFLINE_PROBE_MAX_S = 60.0
PROBE_TIMEOUT_S = 5.0
# While measuring, a batch waits for its answer this many times the slowest of the service's latest answers (at least
# PROBE_TIMEOUT_S, at most the timeout): a service that answered in 50 ms and now hangs costs the run seconds, not 30.
ANSWER_FACTOR = 10.0


class Deliverer(BatchBuffer):
    """Sends measurements as they come; spools what cannot be sent.

    Every batch is written to the spool (on disk, fsync'd) before it is sent and taken out once
    the service has it, so a batch handed over is never only in memory. A Ctrl-C or SIGTERM
    mid-send waits for the service's answer (one request; the wait before a retry is cut short),
    so a batch the service took is said to be sent; a second one, or SIGKILL, leaves it in the
    spool, for the next run or `gac agent flush` (a re-send stores nothing twice). Use as a
    context manager, or call close() at the end: it sends the last partial batch and tries to
    drain the spool once more.
    """

    def __init__(
        self,
        server: str,
        token: str,
        platform: PlatformDescriptor,
        run: RunInfo,
        spool: Spool | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        retries: int = 4,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        timeout_s: float = 30.0,
        client: httpx.Client | None = None,
        log: Callable[[str], None] | None = None,
        commit_every_s: float | None = None,
        offline_probe_s: float = OFFLINE_PROBE_S,
    ) -> None:
        super().__init__(platform, run, batch_size, commit_every_s)
        self.log = log or (lambda msg: None)
        self.sender = BatchSender(server, token, RetryPolicy(retries, backoff_s, max_backoff_s), timeout_s, client, self.log)
        self.timeout_s = timeout_s
        self.server = self.sender.server
        self.spool = spool or Spool()
        self.stats = DeliveryStats()
        self._online = True
        self.offline_probe_s = offline_probe_s
        self._tried_at = 0.0  # when a batch was last tried (monotonic)
        self._failed_probes = 0  # since the service was found down
        self._interrupted = False  # a send was cut by a stop: close() tries no more than the last batch
        self._last_batch = False  # close(): the last batch is tried whenever the last probe was
        self._spooled: dict[object, SpoolEntry] = {}  # batches committed to the spool, not yet sent
        self.token_refused: str | None = None  # the service's word when it stopped taking this token (revoked mid-run)

    def send_document(
        self, doc: dict[str, Any], retries: int | None = None, timeout_s: float | None = None, retry_timeouts: bool = True
    ) -> BatchReceipt:
        """One batch document, with retries: see BatchSender.send_document."""
        return self.sender.send_document(doc, retries, timeout_s, retry_timeouts)

    def _probe(self, doc: dict[str, Any]) -> BatchReceipt:
        """One try, the service found down: PROBE_TIMEOUT_S at first, so that a service that hangs holds the run up a
        few seconds, twice as long after each probe that failed (a service that is only slow gets its answer through),
        and the whole timeout on the way out of a run that ended (its last batch)."""
        wait = self.timeout_s if self._last_batch else min(self.timeout_s, PROBE_TIMEOUT_S * 2**self._failed_probes)
        return self.send_document(doc, retries=0, timeout_s=wait)

    def _commit(self, batch: Batch) -> None:
        self._spooled[batch.id] = self.spool.add(self.server, batch)

    def _after_commit(self, batch: Batch) -> None:
        self._send(batch, self._spooled.pop(batch.id))

    def deliver(self, batch: Batch) -> bool:
        """Spool a batch, then send it (taking it out of the spool once sent); True when the service has it."""
        with shielded() as shield:
            entry = self.spool.add(self.server, batch)
            shield.breakable = True
            return self._send(batch, entry)

    def _send(self, batch: Batch, entry: SpoolEntry) -> bool:
        doc = batch_document(batch)
        if not self._online and (stopping() or not self._probe_due()):
            # Down: it waits in the spool for the next probe (on the way out, for the next run or `gac agent flush`).
            self.stats.count_spooled(batch.id, len(batch.measurements))
            return False
        self._tried_at = time.monotonic()
        try:
            # Once the service was found down, a probe gets one short try: the run goes on at full speed and notices when
            # the service is back. Up, a failed try is retried, but not one that timed out (the probes take it from there).
            if self._online:
                receipt = self.send_document(doc, timeout_s=self._answer_timeout(), retry_timeouts=False)
            else:
                receipt = self._probe(doc)
        except KeyboardInterrupt:
            # Stopped mid-send (a second stop, or one before a retry): the batch stays in the spool, and is said to wait there.
            # The service did not answer in time, so the batches sent on the way out get one try each.
            self.stats.count_spooled(batch.id, len(batch.measurements))
            self._online, self._interrupted = False, True
            raise
        except DeliveryError as err:
            self.stats.count_spooled(batch.id, len(batch.measurements))  # it stays where _commit put it
            if self._online:
                self.log(f"service unreachable, spooling to {self.spool.path}: {err}")
            else:
                self._failed_probes += 1
            self._online = False
            return False
        except RejectedError as err:
            if err.about_the_token:  # a token revoked mid-run: the batch waits in the spool for a good one
                self.stats.count_spooled(batch.id, len(batch.measurements))
                self.token_refused = self.token_refused or str(err)
                if self._online:
                    self.log(
                        f"the service refuses this token ({err}): batches kept in {self.spool.path}; "
                        "`gac agent flush` with an ingest token sends them"
                    )
                self._online = False
                return False
            with shielded():  # moved whole, no stop between: into the rejected file before it leaves the spool
                self.spool.reject(self.server, doc, str(err))
                self.spool.remove(entry)
                self.stats.count_rejected(batch.id, len(batch.measurements), err)
            self.log(
                f"batch {batch.id} rejected ({err}); kept in {self.spool.rejected_path}: once the cause is fixed, "
                f"resend with `gac ingest {self.spool.rejected_path} --server {self.server} --token ...`"
            )
            return False
        self.stats.merge_receipt(receipt)  # first: the service has it, even if a second stop keeps it in the spool
        self.spool.remove(entry)
        if not self._online:
            self._online, self._failed_probes = True, 0
            if not stopping():  # on the way out the spool waits for the next run or `gac agent flush`
                self.log("service reachable again, draining the spool")
                self.drain()
        return True

    def _answer_timeout(self) -> float | None:
        """A batch's wait for its answer while the service is up: from how long it took lately (see ANSWER_FACTOR);
        None (the client's timeout) until it has answered."""
        lately = self.sender.answer_timeout(ANSWER_FACTOR, PROBE_TIMEOUT_S)
        return None if lately is None else min(lately, self.timeout_s)

    def _probe_due(self) -> bool:
        every = min(self.offline_probe_s * 2**self._failed_probes, max(self.offline_probe_s, OFFLINE_PROBE_MAX_S))
        return self._last_batch or time.monotonic() - self._tried_at >= every

    def kept_where(self) -> str:
        """Where the committed rows are: 'sent to URL', and how many of them wait in the spool."""
        spooled = self.stats.waiting_rows
        if spooled and spooled >= self.committed:  # none of this run's reached the service (an earlier sink's may have)
            return f"{spooled} of them spooled for {self.server}: `gac agent flush` sends them"
        return f"sent to {self.server}" + (f", {spooled} of them spooled: `gac agent flush` sends them" if spooled else "")

    def drain(self) -> int:
        """Re-send spooled batches for this server."""
        n = self.spool.drain(self.send_document, self.server, self.stats)
        if n:
            self.log(f"drained {n} spooled batch(es)")
        return n

    def close(self) -> None:
        """Send the last partial batch, drain the spool if the service is up."""
        self._last_batch = True
        tried = self._tried_at
        self.flush()
        if not self._online and not stopping() and not self._interrupted and self._tried_at == tried:
            # No last batch was tried (none was left, or it went with a full one): the spool's first is the probe, or a
            # service back within the probe interval would find this run's batches spooled and its job failed.
            self._tried_at = time.monotonic()
            self._online = self.spool.drain(self._probe, self.server, self.stats) > 0
        if self._online and not stopping():  # on the way out the spool waits for the next run or `gac agent flush`
            self.drain()
        self._forget_sent_elsewhere()
        self.close_client()

    def _forget_sent_elsewhere(self) -> None:
        """Batches of this run no longer in the spool wait no more: another agent sharing the spool (or `gac agent
        flush`) sent them, and the run's last line would say they wait there."""
        if self.stats.waiting:
            there = {str(r.get("batch", {}).get("id")) for r in self.spool.records()}
            for batch_id in [b for b in self.stats.waiting if b not in there]:
                del self.stats.waiting[batch_id]

    def close_client(self) -> None:
        self.sender.close()

    def __enter__(self) -> Deliverer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
