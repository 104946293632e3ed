"""POST /v1/batches."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from gac.contracts.measurements import Batch, BatchReceipt
from service.deps import IngestToken, SessionDep, SettingsDep
from service.ingest.service import ingest_batch

router = APIRouter(prefix="/v1", tags=["ingest"])

# The body is parsed by pydantic-core straight from the bytes (one pass in Rust) instead of
# json.loads + validation: on the hot path that is a tenth of a worker's time per batch
# (benchmarks/ingest.py). The schema below keeps the OpenAPI document exact.
BATCH_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Batch"}}},
    }
}


def parse_batch(body: bytes) -> Batch:
    try:
        return Batch.model_validate_json(body)
    except ValidationError as exc:
        errors = [dict(e, loc=("body", *e["loc"])) for e in exc.errors(include_url=False)]
        raise RequestValidationError(errors) from None


@router.post(
    "/batches",
    status_code=status.HTTP_201_CREATED,
    openapi_extra=BATCH_BODY,
    responses={200: {"model": BatchReceipt, "description": "The batch had been stored before: nothing new stored."}},
)
async def post_batch(
    request: Request, session: SessionDep, settings: SettingsDep, token: IngestToken, response: Response
) -> BatchReceipt:
    """Upload one batch of measurements: stored whole or not at all; re-sending it is safe."""
    batch = parse_batch(await request.body())
    receipt = await run_in_threadpool(ingest_batch, session, batch, token_id=token.id, max_rows=settings.max_batch_rows)
    if receipt.inserted:
        request.app.state.responses.expire_all()  # this process sees its own writes at once
    if receipt.replay:
        response.status_code = status.HTTP_200_OK
    return receipt
