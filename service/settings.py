"""Service configuration: one pydantic-settings class, environment prefix GAC_."""

from __future__ import annotations

import os
import secrets
from functools import cache, cached_property
from pathlib import Path

from platformdirs import user_data_dir
from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.engine import make_url

from gac.contracts.manifest import MAX_WEIGHTS

# postgresql:// and postgres:// name the driver SQLAlchemy would pick (psycopg2, not installed): ours is psycopg 3.
_POSTGRES_SCHEMES = ("postgresql+psycopg://", "postgresql://", "postgres://")


class Settings(BaseSettings):
    # Inputs stay out of error messages: a database URL may hold a password.
    model_config = SettingsConfigDict(env_prefix="GAC_", env_file=".env", extra="ignore", hide_input_in_errors=True)

    # Where the embedded default keeps its database and secret.
    data_dir: Path = Field(default_factory=lambda: Path(user_data_dir("gac", appauthor=False)))
    # Empty means the embedded SQLite file in data_dir; production uses postgresql+psycopg://...
    database_url: str = ""
    # Key of the HMAC that stores API tokens; required on Postgres (shared by every replica).
    secret_key: SecretStr = SecretStr("")
    # Reads are open unless this is set; then any valid token may read.
    require_read_token: bool = False
    # Migrate the schema at start-up; defaults to on for SQLite, off for Postgres.
    auto_migrate: bool | None = None

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)

    max_batch_rows: int = Field(default=5_000, ge=1, le=10_000)
    max_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)

    # Slow, idle and hostile clients (service/server.py, service/limits.py). A connection must send
    # a whole request head within header_timeout_seconds of opening (or of its last answer) and
    # the body within body_timeout_seconds of the head; past max_connections per worker, a new
    # connection closes the one idle longest, so idle sockets cannot starve the busy ones.
    header_timeout_seconds: float = Field(default=10.0, gt=0, le=600)
    body_timeout_seconds: float = Field(default=60.0, gt=0, le=3600)
    max_header_bytes: int = Field(default=64 * 1024, ge=4096, le=16 * 1024 * 1024)
    max_connections: int = Field(default=2_048, ge=8, le=1_000_000)
    # Failed authentications per client address and worker: this many at once, then this many a second.
    auth_failure_burst: int = Field(default=20, ge=1)
    auth_failures_per_second: float = Field(default=1.0, gt=0)

    # Per-curve reads (a curve, its cliffs) are served from memory for this long after their
    # version was last checked; other workers' writes show within it (0 checks every read).
    read_cache_seconds: float = Field(default=1.0, ge=0, le=60)
    read_cache_mb: int = Field(default=256, ge=1)

    # Who may spend the service's CPU on alignments: a token (read scope or above) unless opened.
    open_align: bool = False
    align_concurrency_per_token: int = Field(default=2, ge=1)  # per worker process; past it: 429
    align_max_weights: int = Field(default=MAX_WEIGHTS, ge=1, le=MAX_WEIGHTS)  # per request; past it: 413 (past MAX_WEIGHTS: 422)
    # The solver's work estimated from the manifest before any is done (service/align/cost.py:
    # latency-model evaluations plus paper-DP cells); past it: 413 with the estimate. Llama-3-8B's
    # 224 ASVD weights are about 17 million, 100,000 rule-only weights about 20 million.
    align_max_work: int = Field(default=400_000_000, ge=1)
    # Every alignment (and its later checks) runs in a process of its own with this address-space
    # limit: what the estimate misses ends as a 413, not as the service's memory.
    align_memory_mb: int = Field(default=4096, ge=512)
    # An alignment still queued or running this long after it was posted is stopped (and says so).
    align_deadline_seconds: float = Field(default=300.0, gt=0, le=86_400)
    # Alignments queued or running at once, all workers and replicas together (counted in the
    # database); past it: 429 with Retry-After.
    align_max_running: int = Field(default=4, ge=1)
    # Stored results per token: past the quota the token's oldest go first; all expire after keep_days.
    align_storage_mb_per_token: int = Field(default=1024, ge=1)
    align_keep_days: float = Field(default=30.0, gt=0)
    # Where alignments share their latency models (curve models, candidates; solver/model_cache.py)
    # between the processes they run in: unset means data_dir/models. Written by this service alone.
    model_cache_dir: Path | None = None
    # On SIGTERM: running alignments and checks get this long, then are stopped (and say so).
    shutdown_grace_seconds: float = Field(default=10.0, ge=0, le=600)

    job_lease_seconds: int = Field(default=600, ge=5)
    job_max_attempts: int = Field(default=3, ge=1)

    @field_validator("database_url")
    @classmethod
    def _a_database_we_speak(cls, url: str) -> str:
        if not url:
            return url
        if url.startswith("sqlite:///"):
            if make_url(url).database in (None, "", ":memory:"):
                raise ValueError("sqlite:///PATH needs a file: a database in memory would last one connection")
            return url
        for scheme in _POSTGRES_SCHEMES:
            if url.startswith(scheme):
                return "postgresql+psycopg://" + url.removeprefix(scheme)
        scheme = url.split("://", 1)[0] if "://" in url else "no scheme"  # never the rest: it may hold a password
        raise ValueError(f"must be sqlite:///PATH or postgresql+psycopg://USER@HOST:PORT/DB, not {scheme}")

    @model_validator(mode="after")
    def _postgres_needs_a_secret(self) -> Settings:
        if self.is_postgres and not self.secret_key.get_secret_value():
            raise ValueError(
                "GAC_SECRET_KEY must be set when the database is Postgres: every service replica must hash tokens with the same key"
            )
        return self

    @property
    def url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'gac.db'}"

    @property
    def models_dir(self) -> Path:
        return self.model_cache_dir or self.data_dir / "models"

    @property
    def is_postgres(self) -> bool:
        return self.database_url.startswith("postgresql")

    @property
    def migrate_on_start(self) -> bool:
        return (not self.is_postgres) if self.auto_migrate is None else self.auto_migrate

    @cached_property
    def token_key(self) -> bytes:
        """The HMAC key: the setting, or (embedded default) a key file made on first use."""
        if self.secret_key.get_secret_value():
            return self.secret_key.get_secret_value().encode()
        path = self.data_dir / "secret.key"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))
        return path.read_text().strip().encode()


def get_settings(database_url: str | None = None) -> Settings:
    """The settings of this process's environment (GAC_* variables and .env), read once per
    environment; database_url: a command's --db, which overrides GAC_DATABASE_URL."""
    if database_url:
        return Settings(database_url=database_url)
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("GAC_")))
    return _settings_for(env, os.getcwd())


@cache
def _settings_for(env: tuple[tuple[str, str], ...], cwd: str) -> Settings:
    """Keyed by the environment (and the directory .env is read from): a test or a long-lived
    process that changes them gets settings that match."""
    return Settings()
