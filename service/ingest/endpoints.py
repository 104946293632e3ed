"""POST /v1/batches."""

from __future__ import annotations

import codecs

from fastapi import APIRouter, Request, Response, status
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from gac.contracts.columns import COLUMNS_MEDIA_TYPE, COLUMNS_SCHEMA, ColumnBatch
from gac.contracts.measurements import BATCH_SCHEMA, Batch, BatchReceipt
from gac.documents import GIVEN_TWICE, duplicate_key
from gac.service.deps import IngestToken, SessionDep, SettingsDep
from gac.service.errors import errors, require_json_body
from gac.service.ingest.incoming import Incoming
from gac.service.ingest.service import ingest_batch

router = APIRouter(prefix="/v1", tags=["ingest"])

# The body is parsed by pydantic-core straight from the bytes (one pass in Rust) instead of
# json.loads + validation. Two layouts of the same batch: rows (application/json, easy to
# write by hand) and columns (COLUMNS_MEDIA_TYPE, what the agent sends: about a quarter of
# the parse time and half the bytes). The schemas below keep the OpenAPI document exact.
BATCH_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/Batch"}},
            COLUMNS_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/ColumnBatch"}},
        },
    }
}
# A document sent under the other layout's Content-Type: say which one it needs.
_LAYOUT_HINT = {
    COLUMNS_SCHEMA: f"a {COLUMNS_SCHEMA} document is sent with Content-Type: {COLUMNS_MEDIA_TYPE}",
    BATCH_SCHEMA: f"a {BATCH_SCHEMA} document is sent with Content-Type: application/json",
}


def parse_batch(body: bytes, content_type: str) -> Incoming:
    by_columns = content_type.split(";")[0].strip().lower() == COLUMNS_MEDIA_TYPE
    body = body.removeprefix(codecs.BOM_UTF8)  # JSON's RFC lets a parser skip one; a file saved by some editors starts so
    # A key given twice would be read as its last value, and a stored row never changes: refused, as a manifest's is.
    # (About as long again as the parse: some 2 µs a row of a column batch.)
    if (twice := duplicate_key(body)) is not None:
        raise RequestValidationError([{"loc": ("body", *twice), "msg": GIVEN_TWICE, "type": "duplicate_key"}])
    try:
        if by_columns:
            return Incoming.from_columns(ColumnBatch.model_validate_json(body))
        return Incoming.from_rows(Batch.model_validate_json(body))
    except ValidationError as exc:
        errors: list[dict] = []
        for e in exc.errors(include_url=False):
            error: dict = dict(e, loc=("body", *e["loc"]))
            if e["loc"] == ("schema",) and isinstance(e.get("input"), str) and e["input"] in _LAYOUT_HINT:
                error["msg"] = f"{e['msg']}: {_LAYOUT_HINT[e['input']]}"
            errors.append(error)
        raise RequestValidationError(errors) from None


@router.post(
    "/batches",
    status_code=status.HTTP_201_CREATED,
    openapi_extra=BATCH_BODY,
    responses={
        200: {"model": BatchReceipt, "description": "The batch had been stored before: nothing new stored."},
        **errors(401, 403, 409, 413, 415, 422),
    },
)
async def post_batch(request: Request, session: SessionDep, settings: SettingsDep, token: IngestToken, response: Response) -> BatchReceipt:
    """Upload one batch of measurements: stored whole or not at all; re-sending it is safe."""
    require_json_body(request.headers.get("content-type"), "a batch", also=(COLUMNS_MEDIA_TYPE,))
    # Parsed off the event loop: a large batch takes a CPU for a while, and /readyz and the rest wait on the loop.
    batch = await run_in_threadpool(parse_batch, await request.body(), request.headers.get("content-type", ""))
    receipt = await run_in_threadpool(ingest_batch, session, batch, token_id=token.id, max_rows=settings.max_batch_rows)
    if receipt.inserted:
        request.app.state.responses.expire_all()  # this process sees its own writes at once
    if receipt.replay:
        response.status_code = status.HTTP_200_OK
    return receipt
