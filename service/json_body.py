"""Routes whose body is one JSON document, read as /v1/batches and /v1/align read theirs."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.types import Message

from gac.documents import GIVEN_TWICE, duplicate_key
from gac.service.errors import require_json_body


class JsonBodyRoute(APIRoute):
    """A body declared as another format (YAML, text, a multipart form) is refused (415); one declared as
    a form's, or not declared (what `curl -d` sends), is read as JSON; a key given twice is refused (422),
    not read as its last value."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler

        async def read_as_json(request: Request) -> Response:
            require_json_body(request.headers.get("content-type"), "the body")
            body = await request.body()
            if (twice := duplicate_key(body)) is not None:
                raise RequestValidationError([{"loc": ("body", *twice), "msg": GIVEN_TWICE, "type": "duplicate_key"}])
            headers = [(k, v) for k, v in request.scope["headers"] if k != b"content-type"]

            async def receive() -> Message:  # the body read above, once more for FastAPI's own parse
                return {"type": "http.request", "body": body, "more_body": False}

            return await handler(Request({**request.scope, "headers": [*headers, (b"content-type", b"application/json")]}, receive))

        return read_as_json
