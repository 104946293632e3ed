"""Deliver measurements to the service: batches, retries, spool, drain.

Rows are cut into batches (<= batch_size, or whatever came within commit_every_s) with
client-made ids (`codec`); each batch is written to a local spool (JSONL, `spool`) and then
POSTed with retries (exponential backoff + jitter) on connection errors, 408,
429 and 5xx (`sender`). A batch the service took is taken out of the spool; one that cannot be
delivered stays there and is re-sent on the next run or by `gac agent flush`. The service's
ingest is idempotent by batch id and by measurement id, so re-sending after a
crash or a lost answer is safe: nothing is lost and nothing is stored twice.
A 4xx other than 408/429 is permanent: the batch goes to a rejected file.
`deliverer` streams rows through all of this; `files` writes and reads offline results files.
"""

from gac.agent.delivery.codec import (
    DEFAULT_BATCH_SIZE,
    batch_document,
    document_rows,
    make_batches,
    read_document,
)
from gac.agent.delivery.deliverer import Deliverer
from gac.agent.delivery.files import BatchFileWriter, read_batch_file
from gac.agent.delivery.outcomes import DeliveryError, DeliveryStats, RejectedError
from gac.agent.delivery.sender import BatchSender, RetryPolicy
from gac.agent.delivery.spool import Spool, default_spool_dir

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "BatchFileWriter",
    "BatchSender",
    "Deliverer",
    "DeliveryError",
    "DeliveryStats",
    "RejectedError",
    "RetryPolicy",
    "Spool",
    "batch_document",
    "default_spool_dir",
    "document_rows",
    "make_batches",
    "read_batch_file",
    "read_document",
]
