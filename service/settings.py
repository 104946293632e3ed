"""Service configuration: one pydantic-settings class, environment prefix GAC_."""

from __future__ import annotations

import os
import secrets
from functools import cached_property
from pathlib import Path

from platformdirs import user_data_dir
from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GAC_", env_file=".env", extra="ignore")

    # Where the embedded default keeps its database and secret.
    data_dir: Path = Field(default_factory=lambda: Path(user_data_dir("gac", appauthor=False)))
    # Empty means the embedded SQLite file in data_dir; production uses postgresql+psycopg://...
    database_url: str = ""
    # Key of the HMAC that stores API tokens; required on Postgres (shared by every replica).
    secret_key: str = ""
    # Reads are open unless this is set; then any valid token may read.
    require_read_token: bool = False
    # Migrate the schema at start-up; defaults to on for SQLite, off for Postgres.
    auto_migrate: bool | None = None

    host: str = "127.0.0.1"
    port: int = 8000

    max_batch_rows: int = Field(default=5_000, ge=1, le=10_000)
    max_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    max_page_size: int = Field(default=5_000, ge=1)

    # Per-curve reads (a curve, its cliffs) are served from memory for this long after their
    # version was last checked; other workers' writes show within it (0 checks every read).
    read_cache_seconds: float = Field(default=1.0, ge=0, le=60)
    read_cache_mb: int = Field(default=256, ge=1)

    # Who may spend the service's CPU on alignments: a token (read scope or above) unless opened.
    open_align: bool = False
    align_concurrency_per_token: int = Field(default=2, ge=1)  # per worker process; past it: 429
    align_max_weights: int = Field(default=100_000, ge=1)  # per request; past it: 413

    job_lease_seconds: int = Field(default=600, ge=5)
    job_max_attempts: int = Field(default=3, ge=1)

    @model_validator(mode="after")
    def _postgres_needs_a_secret(self) -> Settings:
        if self.is_postgres and not self.secret_key:
            raise ValueError(
                "GAC_SECRET_KEY must be set when GAC_DATABASE_URL is Postgres: every service "
                "replica must hash tokens with the same key"
            )
        return self

    @property
    def url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'gac.db'}"

    @property
    def is_postgres(self) -> bool:
        return self.database_url.startswith("postgresql")

    @property
    def migrate_on_start(self) -> bool:
        return (not self.is_postgres) if self.auto_migrate is None else self.auto_migrate

    @cached_property
    def token_key(self) -> bytes:
        """The HMAC key: the setting, or (embedded default) a key file made on first use."""
        if self.secret_key:
            return self.secret_key.encode()
        path = self.data_dir / "secret.key"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))
        return path.read_text().strip().encode()
