"""Serve the dashboard and the API docs with no CDN: plotly.js comes from the plotly package,
Swagger UI 5 (which renders FastAPI's OpenAPI 3.1) from fastapi-offline's assets, our own page
from this folder."""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.util
from pathlib import Path

import fastapi_offline
from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from gac.service.errors import NotFound
from gac.service.http import holds

STATIC = Path(__file__).parent / "static"
SWAGGER_ASSETS = Path(fastapi_offline.__file__).parent / "static"

router = APIRouter(include_in_schema=False)


@router.get("/")
def root() -> RedirectResponse:
    return RedirectResponse("/ui")


@router.get("/favicon.ico")
def favicon() -> Response:
    return Response(status_code=204)


# The backstop should an escape ever be missed: the dashboard runs our scripts only (no inline ones, no
# eval), loads and fetches from this service only, and is framed by no page. Plotly styles its SVG inline.
DASHBOARD_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


@router.get("/ui")
def dashboard() -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type="text/html", headers=DASHBOARD_HEADERS)


def plotly_js_path() -> Path:
    """plotly.min.js in the plotly package, found without importing it: the import takes about 0.2 s of every
    start, and a service without the dashboard's package (a GPU box's carried wheels) still starts and serves the API."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        raise NotFound("the dashboard's plotly.js: the plotly package is not installed with this service (pip install plotly)")
    return Path(next(iter(spec.submodule_search_locations))) / "package_data" / "plotly.min.js"


@functools.cache
def _plotly() -> tuple[bytes, bytes, str]:
    """plotly.js as it is and gzipped (4.8 MB and about a third of it), with its ETag: compressed once,
    on the first dashboard load, so a reader over a slow link waits for a third of the bytes."""
    raw = plotly_js_path().read_bytes()
    return raw, gzip.compress(raw, compresslevel=9, mtime=0), f'"{hashlib.sha256(raw).hexdigest()[:32]}"'


def _accepts_gzip(accept_encoding: str) -> bool:
    """Whether Accept-Encoding takes gzip: its own entry's q, else that of `*`, above zero."""
    q: dict[str, float] = {}
    for part in accept_encoding.split(","):
        name, *params = (x.strip() for x in part.split(";"))
        weight = 1.0
        for p in params:
            key, _, value = p.partition("=")
            if key.strip().lower() == "q":
                try:
                    weight = float(value)
                except ValueError:
                    weight = 0.0
        q.setdefault(name.lower(), weight)
    return q.get("gzip", q.get("*", 0.0)) > 0


@router.get("/ui/vendor/plotly.min.js")
def plotly_js(request: Request) -> Response:
    raw, packed, etag = _plotly()
    gzipped = _accepts_gzip(request.headers.get("accept-encoding", ""))
    tag = f'{etag[:-1]}-gzip"' if gzipped else etag  # one tag per encoding: they are different bytes
    headers = {"Cache-Control": "public, max-age=86400", "ETag": tag, "Vary": "Accept-Encoding"}
    if holds(request, tag):
        return Response(status_code=304, headers=headers)
    if gzipped:
        return Response(packed, media_type="text/javascript", headers={**headers, "Content-Encoding": "gzip"})
    return Response(raw, media_type="text/javascript", headers=headers)


@router.get("/docs")
def docs() -> HTMLResponse:
    page = get_swagger_ui_html(
        openapi_url="/openapi.json",
        title="GAC service API",
        swagger_js_url="/docs/assets/swagger-ui-bundle.js",
        swagger_css_url="/docs/assets/swagger-ui.css",
        swagger_favicon_url="/docs/assets/favicon.png",
    )
    # Swagger UI starts from an inline script: this page is only kept out of frames and from sniffing.
    page.headers.update({"Content-Security-Policy": "frame-ancestors 'none'", "X-Content-Type-Options": "nosniff"})
    return page


def install_ui(app: FastAPI) -> None:
    app.include_router(router)
    app.mount("/ui/static", StaticFiles(directory=STATIC), name="ui-static")
    app.mount("/docs/assets", StaticFiles(directory=SWAGGER_ASSETS), name="docs-assets")
