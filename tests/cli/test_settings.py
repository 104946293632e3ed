"""Every client command reads GAC_SERVER, GAC_TOKEN, GAC_DATA_DIR and GAC_AGENT_SPOOL_DIR through
the agent's settings class; GAC_DATA_DIR moves the spool along with the embedded database."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from gac.agent.delivery import default_spool_dir
from tests.agent.test_runner_delivery import TINY, closed_port_url


def test_data_dir_moves_the_spool(monkeypatch, tmp_path):
    monkeypatch.delenv("GAC_AGENT_SPOOL_DIR", raising=False)
    monkeypatch.setenv("GAC_DATA_DIR", str(tmp_path / "data"))
    assert default_spool_dir() == tmp_path / "data" / "spool"
    monkeypatch.setenv("GAC_AGENT_SPOOL_DIR", str(tmp_path / "elsewhere"))
    assert default_spool_dir() == tmp_path / "elsewhere"


def test_agent_run_takes_server_and_token_from_the_environment(tmp_path):
    (tmp_path / "p.yaml").write_text(TINY)
    env = {k: v for k, v in os.environ.items() if k not in ("GAC_AGENT_SPOOL_DIR", "GAC_SERVER", "GAC_TOKEN")}
    env |= {"GAC_DATA_DIR": str(tmp_path / "data"), "GAC_SERVER": closed_port_url(), "GAC_TOKEN": "t"}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gac",
            "agent",
            "run",
            "--plan",
            str(tmp_path / "p.yaml"),
            "--threads",
            "1",
            "--quiet",
            "--retries",
            "0",
            "--spool",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    # Nothing listens at GAC_SERVER: with --spool (profile offline on purpose) the run spools its
    # batches under GAC_DATA_DIR and says so.
    assert out.returncode == 1, out.stderr
    spool = tmp_path / "data" / "spool" / "spool.jsonl"
    records = [json.loads(line) for line in spool.read_text().splitlines()]
    assert records and all(r["server"] == env["GAC_SERVER"] for r in records)


def test_database_urls_are_checked_and_postgres_takes_our_driver(tmp_path):
    """A URL we cannot use is refused at start, naming the setting and only the URL's scheme (the
    rest may hold a password); postgresql:// would load psycopg2, which is not installed."""
    import pytest
    from pydantic import ValidationError

    from gac.service.settings import Settings

    pg = Settings(database_url="postgresql://gac:pw@db:5432/gac", secret_key="k", data_dir=tmp_path)
    assert pg.url == "postgresql+psycopg://gac:pw@db:5432/gac" and pg.is_postgres
    assert Settings(database_url="postgres://db/gac", secret_key="k").url == "postgresql+psycopg://db/gac"
    with pytest.raises(ValidationError) as bad:
        Settings(database_url="mysql://root:hunter2@db/gac")
    assert "must be sqlite:///PATH or postgresql+psycopg://" in str(bad.value) and "hunter2" not in str(bad.value)
    assert "k" not in repr(Settings(database_url="postgres://db/gac", secret_key="k").secret_key)  # SecretStr


def test_settings_are_read_once_per_environment(monkeypatch, tmp_path):
    from gac.service.settings import get_settings

    monkeypatch.setenv("GAC_DATA_DIR", str(tmp_path / "a"))
    first = get_settings()
    assert get_settings() is first and first.data_dir == tmp_path / "a"
    monkeypatch.setenv("GAC_DATA_DIR", str(tmp_path / "b"))
    assert get_settings().data_dir == tmp_path / "b"
    assert get_settings("sqlite:///" + str(tmp_path / "x.db")).url.endswith("x.db")


def test_the_readme_lists_every_setting():
    """Its table says it holds every environment variable any command reads."""
    from pathlib import Path

    from gac.agent.settings import AgentSettings
    from gac.service.settings import Settings

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    names = {f"GAC_{name.upper()}" for cls in (AgentSettings, Settings) for name in cls.model_fields}
    assert names and not {n for n in names if f"`{n}`" not in readme}
