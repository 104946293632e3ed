"""Service commands: `gac serve`, `gac db ...`, `gac token ...`."""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

console = Console(soft_wrap=True)  # lines name database URLs: never broken mid-line
err = Console(stderr=True, soft_wrap=True)  # messages name files: never broken mid-line

db_app = typer.Typer(no_args_is_help=True, help="Database schema (Alembic migrations).")
token_app = typer.Typer(no_args_is_help=True, help="API tokens for agents and users.")


def _settings(schema_only: bool = False):
    """The service's settings; schema_only (`gac db`): migrations hash no tokens, so no GAC_SECRET_KEY is asked for."""
    from pydantic import SecretStr, ValidationError

    from gac.service.settings import Settings, get_settings

    try:
        return get_settings()
    except ValidationError as exc:
        if schema_only and all("GAC_SECRET_KEY" in e["msg"] for e in exc.errors(include_url=False)):
            return Settings(secret_key=SecretStr("unused: migrations hash no tokens"))
        _say_configuration(exc)
        raise typer.Exit(2) from exc


def _say_configuration(exc, db: str | None = None) -> None:  # noqa: ANN001 - pydantic's ValidationError
    for e in exc.errors(include_url=False):
        named = "_".join(str(p) for p in e["loc"])
        where = "--db: " if db and named == "database_url" else f"GAC_{named.upper()}: " if named else ""
        err.print(f"[red]configuration error:[/red] {escape(where + e['msg'].removeprefix('Value error, '))}")


def _url_from(db: str | None) -> str:
    """Where a command's database URL came from, as its user set it."""
    if db:
        return "--db"
    for name in ("GAC_DATABASE_URL", "GAC_DATA_DIR"):
        if os.environ.get(name):
            return name
    return "the default data directory (GAC_DATA_DIR moves it)"


@contextmanager
def database_said(db: str | None = None) -> Iterator[None]:
    """Around a command's opening of its database (settings, engine, schema): what is wrong with it (a URL we do not
    speak, a folder that is a file, a file that is no database, a schema out of date) is said in one line naming
    where the URL came from, and the command exits 2. Only the opening: a later error is a bug, and keeps its trace."""
    from alembic.util import CommandError
    from pydantic import ValidationError
    from sqlalchemy.exc import SQLAlchemyError

    from gac.service.settings import get_settings
    from gac.service.startup import SchemaOutOfDate

    try:
        yield
    except ValidationError as exc:
        _say_configuration(exc, db)
        raise typer.Exit(2) from None
    except CommandError as exc:  # a revision alembic cannot find (asked for, or the database's own): its one line
        err.print(f"[red]cannot migrate:[/red] {escape(_first_line(exc))}", highlight=False)
        raise typer.Exit(2) from None
    except (OSError, SQLAlchemyError, SchemaOutOfDate) as exc:
        try:
            url = _safe_url(get_settings(db).url)
        except ValidationError:  # `gac db` reads Postgres without a secret key (migrations hash no tokens)
            url = "(the configured database)"
        said = f"[red]cannot open the database {escape(url)}[/red] (set by {_url_from(db)}): {escape(_first_line(exc))}"
        err.print(said, highlight=False)
        raise typer.Exit(2) from None


def _cannot_listen(host: str, port: int, workers: int) -> str | None:
    """Why uvicorn could not bind host:port (a port in use, an address not of this machine), or None, found by
    binding as it will and letting go. One worker binds every address the name resolves to (asyncio's
    create_server: IPv6 sockets v6-only); several bind one socket of the family the host's spelling names."""
    addresses: list[tuple[socket.AddressFamily, tuple]]
    try:
        if workers > 1:
            addresses = [(socket.AF_INET6 if ":" in host else socket.AF_INET, (host, port))]
        else:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
            addresses = list(dict.fromkeys((family, address) for family, _, _, _, address in infos))
        with ExitStack() as held:  # together: a name's addresses must all be free at once
            for family, address in addresses:
                probe = held.enter_context(socket.socket(family, socket.SOCK_STREAM))
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: a port in TIME_WAIT is free
                if family == socket.AF_INET6 and workers == 1:
                    probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                probe.bind(address)
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def _origin(host: str, port: int) -> str:
    """host:port as a URL writes it ([::1]:8000)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def serve(
    host: Annotated[str | None, typer.Option(help="bind address (default GAC_HOST or 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(min=1, max=65535, help="port (default GAC_PORT or 8000)")] = None,
    workers: Annotated[
        int,
        typer.Option(
            min=1,
            help="worker processes; on Postgres about two per core: each waits on the database for much of an upload",
        ),
    ] = 1,
) -> None:
    """Run the service (uvicorn). The embedded SQLite default migrates itself; Postgres must be current."""
    import uvicorn

    from gac.service.app import create_app
    from gac.service.db import engine_for, schema_status, upgrade
    from gac.service.metrics import MULTIPROC_ENV, prepare_multiprocess_dir
    from gac.service.server import PROTOCOL, raise_fd_limit

    settings = _settings()
    where, at = host or settings.host, port or settings.port
    # The port first: a refused start leaves no database behind.
    if (taken := _cannot_listen(where, at, workers)) is not None:  # one line, before the start line (uvicorn's is a log record after it)
        err.print(f"[red]refusing to start:[/red] cannot listen on {_origin(where, at)}: {escape(taken)}", highlight=False)
        raise typer.Exit(1)
    try:
        engine = engine_for(settings)
        try:
            status = schema_status(engine)
        finally:
            engine.dispose()
    except Exception as exc:  # noqa: BLE001 - whatever the driver raises, one line that names the database
        said = f"cannot open the database {_safe_url(settings.url)} (set by {_url_from(None)}): {escape(_first_line(exc))}"
        err.print(f"[red]refusing to start:[/red] {said}", highlight=False)
        raise typer.Exit(1) from None
    if not status.up_to_date:
        if not settings.migrate_on_start or status.unknown:
            err.print(f"[red]refusing to start:[/red] {escape(status.explain())}")
            raise typer.Exit(1)
        # Here, once, before any worker starts: workers migrating at once would each create the same tables.
        have = ", ".join(status.current) or "empty"
        console.print(f"migrating {_safe_url(settings.url)} from {have} to {', '.join(status.expected)}", markup=False, highlight=False)
        with database_said():
            upgrade(settings.url)
    console.print(f"GAC service starting on http://{_origin(where, at)}  database: {_safe_url(settings.url)}")
    # On SIGTERM: no new connections, open ones get the grace period (the app stops its alignments
    # within it and answers their requests 503), then the rest are cancelled and it exits.
    grace = max(1, round(settings.shutdown_grace_seconds))
    raise_fd_limit()  # before the workers start: they inherit it, and the connection cap follows it
    # Limits no client can talk its way around (service/server.py): request-head deadline and size, connection cap.
    guards = {"http": PROTOCOL, "h11_max_incomplete_event_size": settings.max_header_bytes}
    if workers == 1:
        uvicorn.run(create_app(settings), host=where, port=at, log_level="info", timeout_graceful_shutdown=grace, **guards)
        return
    # Each worker builds its own app (and engine) from the same GAC_ settings, and counts its
    # metrics into one shared directory, so that /metrics on any worker shows them all.
    made = not os.environ.get(MULTIPROC_ENV)
    metrics_dir = os.environ[MULTIPROC_ENV] = prepare_multiprocess_dir(os.environ.get(MULTIPROC_ENV))
    try:
        # The schema was migrated above, once: workers migrating at once failed on it. A worker that fails to start
        # for another reason stops the others, and uvicorn (0.54) then returns as from a stop, exit status 0.
        uvicorn.run(
            "gac.service.app:create_app",
            factory=True,
            workers=workers,
            host=where,
            port=at,
            log_level="info",
            timeout_graceful_shutdown=grace,
            **guards,
        )
    finally:
        if made:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def _first_line(exc: BaseException) -> str:
    """The driver's own message without SQLAlchemy's statement and background link."""
    cause = getattr(exc, "orig", None) or exc
    return (str(cause).strip().splitlines() or [type(cause).__name__])[0]


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


@db_app.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Argument(help="target revision")] = "head") -> None:
    """Migrate the database to the latest schema (or to REVISION)."""
    from gac.service.db import engine_for, schema_status, upgrade

    settings = _settings(schema_only=True)
    with database_said():
        engine = engine_for(settings)  # first: it makes the data directory where that is the database's folder
        if (status := schema_status(engine)).unknown:  # alembic would only say it cannot find the revision
            err.print(f"[red]not migrated:[/red] {escape(status.explain())}", highlight=False)
            raise typer.Exit(2)
        upgrade(settings.url, revision)
        console.print(f"{_safe_url(settings.url)} is at {', '.join(schema_status(engine).current) or 'base'}")
    engine.dispose()


@db_app.command("current")
def db_current() -> None:
    """Show the schema revision of the database and whether it is current."""
    from gac.service.db import engine_for, schema_status, sqlite_file

    settings = _settings(schema_only=True)
    if (path := sqlite_file(settings.url)) is not None and not path.exists():  # a look, not a write: SQLite would make it
        console.print(f"{_safe_url(settings.url)}: no database yet (the first command that stores anything makes it)")
        raise typer.Exit(1)
    with database_said():
        engine = engine_for(settings)
        status = schema_status(engine)
    engine.dispose()
    console.print(f"{_safe_url(settings.url)}: {', '.join(status.current) or 'empty'}" + (" (up to date)" if status.up_to_date else ""))
    if not status.up_to_date:
        err.print(status.explain(), markup=False)
        raise typer.Exit(1)


def _session():
    from gac.service.db import engine_for, make_sessionmaker
    from gac.service.startup import ensure_schema

    with database_said():
        settings = _settings()
        engine = engine_for(settings)
        ensure_schema(engine, settings)
    return settings, make_sessionmaker(engine)()


@token_app.command("create")
def token_create(
    name: Annotated[str, typer.Option("--name", help="a unique name, e.g. the agent's host")],
    scope: Annotated[str, typer.Option("--scope", help="ingest | read | admin")] = "ingest",
) -> None:
    """Create a token and print it once: only its keyed hash is stored."""
    from gac.service.auth.tokens import Scope, create_token
    from gac.service.errors import GacError

    try:
        chosen = Scope(scope)
    except ValueError:
        err.print(f"[red]--scope must be one of ingest, read, admin[/red] (got {escape(repr(scope))})")
        raise typer.Exit(2) from None
    settings, session = _session()
    try:
        _, plain = create_token(session, settings.token_key, name, chosen)
    except GacError as exc:
        err.print(f"[red]{escape(str(exc.detail))}[/red]")
        raise typer.Exit(1) from exc
    err.print(f"token {escape(repr(name))} (scope {chosen.value}) created; it is shown only now:")
    print(plain)


@token_app.command("list")
def token_list() -> None:
    """List tokens (names, scopes, prefixes; never the tokens)."""
    from gac.service.auth.tokens import list_tokens

    _, session = _session()
    table = Table("name", "scope", "prefix", "created", "last used", "revoked")
    for t in list_tokens(session):
        times = (str(x or "")[:19] for x in (t.created_at, t.last_used_at, t.revoked_at))
        table.add_row(escape(t.name), t.scope, t.prefix + "…", *times)
    console.print(table)


@token_app.command("revoke")
def token_revoke(name: Annotated[str, typer.Argument(help="the token's name")]) -> None:
    """Revoke a token: it gets 401 from now on."""
    from gac.service.auth.tokens import revoke_token
    from gac.service.errors import GacError

    _, session = _session()
    try:
        revoke_token(session, name)
    except GacError as exc:
        err.print(f"[red]{escape(str(exc.detail))}[/red]")
        raise typer.Exit(1) from exc
    console.print(f"token {escape(repr(name))} revoked")


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
    app.add_typer(db_app, name="db")
    app.add_typer(token_app, name="token")
