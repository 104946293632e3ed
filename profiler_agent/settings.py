"""The agent's (and every client command's) configuration: one pydantic-settings class, prefix GAC_.

The service has its own (service/settings.py); both read GAC_DATA_DIR, so one variable
moves the embedded database and the agent's spool together.
"""

from __future__ import annotations

from pathlib import Path

from platformdirs import user_data_dir
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class AgentSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GAC_", extra="ignore")

    server: str | None = None  # GAC_SERVER: the service URL
    token: str | None = None  # GAC_TOKEN: an API token (ingest scope to deliver)
    data_dir: Path = Field(default_factory=lambda: Path(user_data_dir("gac", appauthor=False)))  # GAC_DATA_DIR
    agent_spool_dir: Path | None = None  # GAC_AGENT_SPOOL_DIR: overrides GAC_DATA_DIR/spool
    # GAC_COMMIT_EVERY_S: at most this long between a measured row and its commit (plus one point's timing)
    commit_every_s: float = Field(default=1.0, ge=0.0)
    agent_name: str | None = None  # GAC_AGENT_NAME: the agent's name in runs and the dashboard (default: see gac.agent.cli)
    device: str = "auto"  # GAC_DEVICE: what --device means when not given (cpu, cuda:N, or auto: the first GPU, else the CPU)

    @property
    def spool_dir(self) -> Path:
        return self.agent_spool_dir or self.data_dir / "spool"
