"""HEAD on every GET path: a GET's status and headers without its body (RFC 9110, 9.3.2).

FastAPI's routes answer only the methods they declare, so `curl -I`, load balancers and uptime
checks that probe with HEAD got 405. Declaring HEAD on each route would also list it in the
OpenAPI document beside every GET; this middleware answers it once for all of them instead."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class HeadAsGet:
    """Run a HEAD request as a GET and send what it answers without the body.

    The headers are the GET's own, Content-Length included: a HEAD answer describes the body it
    leaves out. A path with no GET answers 405 as before."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return
        ended = False

        async def send_without_body(message: Message) -> None:
            nonlocal ended
            if message["type"] != "http.response.body":
                await send(message)
            elif not ended and not message.get("more_body", False):
                ended = True
                await send({"type": "http.response.body", "body": b"", "more_body": False})

        # A copy: the server reads the request's method from the scope it made (uvicorn sends no body
        # for HEAD, and checks Content-Length against what is sent otherwise). The route the router
        # matched goes back to the middleware outside (metrics label it).
        inner = {**scope, "method": "GET"}
        try:
            await self.app(inner, receive, send_without_body)
        finally:
            if "route" in inner:
                scope["route"] = inner["route"]
