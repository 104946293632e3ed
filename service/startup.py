"""Start-up checks: the schema must match the code (MLflow's rule), or be migrated when allowed."""

from __future__ import annotations

import logging

from sqlalchemy import Engine

from gac.service.db import schema_status, upgrade
from gac.service.settings import Settings

log = logging.getLogger("gac.service")


class SchemaOutOfDate(RuntimeError):
    pass


def ensure_schema(engine: Engine, settings: Settings) -> None:
    status = schema_status(engine)
    if status.up_to_date:
        return
    if settings.migrate_on_start and not status.unknown:  # a newer GAC's revision: nothing here migrates it
        log.info("migrating %s: %s", engine.url.render_as_string(hide_password=True), status.explain())
        upgrade(settings.url)
        return
    raise SchemaOutOfDate(status.explain())
