"""Tokens: ingest needs an ingest token, reads are open unless configured, scopes give 403."""

from __future__ import annotations

import subprocess
import sys

import pytest
from sqlalchemy import select

from gac.service.auth.tokens import generate, well_formed
from gac.service.models import ApiToken
from tests import factories as f
from tests.fixtures.tokens import make_token


def post(client, token=None):  # type: ignore[no-untyped-def]
    return client.post("/v1/batches", json=f.body(f.batch(rows=1)), headers=f.auth(token) if token else {})


def test_ingest_without_token_is_401(client):
    r = post(client)
    f.refused(r, 401)
    assert r.headers["www-authenticate"] == "Bearer"


def test_unknown_and_malformed_tokens_are_401(client):
    f.refused(post(client, generate()), 401)  # well formed, never issued
    f.refused(post(client, "gac_nonsense"), 401)
    f.refused(post(client, generate()[:-1] + "x"), 401)  # checksum broken


def test_guessing_tokens_at_the_token_check_is_rate_limited_like_every_route(client, settings, read_token):
    """GET /v1/auth/token answers which token a caller holds: guesses there count against the client too."""
    statuses = [client.get("/v1/auth/token", headers=f.auth(generate())).status_code for _ in range(settings.auth_failure_burst + 5)]
    assert statuses[: settings.auth_failure_burst] == [401] * settings.auth_failure_burst and set(statuses[-5:]) == {429}
    assert client.get("/v1/auth/token", headers=f.auth(read_token)).status_code == 429  # the whole client waits


def test_revoked_token_is_401(client, session, settings):
    from gac.service.auth.tokens import revoke_token

    token = make_token(settings, "ingest", name="soon-gone")
    assert post(client, token).status_code == 201
    revoke_token(session, "soon-gone")
    f.refused(post(client, token), 401)


def test_a_token_name_must_fit_its_column_and_a_revoked_ones_name_says_so(session, settings):
    from gac.service.auth.tokens import Scope, create_token, revoke_token
    from gac.service.errors import Conflict, Unprocessable

    for bad in ("", " gpu-07", "gpu-07 ", "gpu\t07", "x" * 101):
        with pytest.raises(Unprocessable, match="1 to 100 printable characters"):
            create_token(session, settings.token_key, bad, Scope.ingest)
    create_token(session, settings.token_key, "x" * 100, Scope.ingest)
    create_token(session, settings.token_key, "gpu-07", Scope.ingest)
    revoke_token(session, "gpu-07")
    with pytest.raises(Conflict, match="'gpu-07' was revoked on .*choose another"):
        create_token(session, settings.token_key, "gpu-07", Scope.ingest)


def test_a_token_refused_under_another_secret_key_is_logged_once(session, settings, caplog):
    """A changed GAC_SECRET_KEY refuses every token with a plain 401: the log says why it may be."""
    import logging

    from gac.service.auth.tokens import Scope, create_token, find_active

    _, plain = create_token(session, b"the key it was made under", "rotated", Scope.ingest)
    with caplog.at_level(logging.WARNING, logger="gac.service"):
        assert find_active(session, b"another key", plain) is None
        assert find_active(session, b"another key", plain) is None
        assert find_active(session, b"another key", generate()) is None  # no live token starts so: nothing to say
    said = [r.getMessage() for r in caplog.records if "GAC_SECRET_KEY" in r.getMessage()]
    assert len(said) == 1 and plain[:10] in said[0], said
    assert find_active(session, b"the key it was made under", plain) is not None


def test_wrong_scope_is_403(client, read_token):
    r = post(client, read_token)
    assert "ingest" in f.refused(r, 403)["detail"]


def test_admin_may_ingest(client, admin_token):
    assert post(client, admin_token).status_code == 201


def test_reads_are_open_by_default(client):
    assert client.get("/v1/platforms").status_code == 200


def test_reads_can_require_a_token(database, tmp_path):  # type: ignore[no-untyped-def]
    from fastapi.testclient import TestClient

    from gac.service.app import create_app
    from gac.service.settings import Settings

    locked = Settings(database_url=database.url, secret_key="k2", data_dir=tmp_path, require_read_token=True)
    read, ingest = make_token(locked, "read"), make_token(locked, "ingest")
    app = create_app(locked)
    with TestClient(app) as c:
        f.refused(c.get("/v1/platforms"), 401)
        f.refused(c.get("/v1/platforms", headers=f.auth(generate())), 401)
        assert c.get("/v1/platforms", headers=f.auth(read)).status_code == 200
        assert c.get("/v1/measurements", headers=f.auth(ingest)).status_code == 200
    app.state.engine.dispose()


def test_a_bad_token_on_an_open_read_is_still_refused(client):
    f.refused(client.get("/v1/platforms", headers=f.auth(generate())), 401)


def test_only_a_keyed_hash_is_stored(session, settings):
    token = make_token(settings, "ingest", name="hashed")
    row = session.scalar(select(ApiToken).where(ApiToken.name == "hashed"))
    assert token not in (row.token_hash, row.prefix) and len(row.token_hash) == 64
    assert row.prefix == token[:10]
    # A different service key gives a different hash: the hash alone cannot be replayed elsewhere.
    from gac.service.auth.tokens import hash_token

    assert hash_token(token, settings.token_key) == row.token_hash
    assert hash_token(token, b"other") != row.token_hash


def test_token_format_checksum():
    token = generate()
    assert well_formed(token)
    assert not well_formed(token[:-1] + ("A" if token[-1] != "A" else "B"))


@pytest.mark.slow
def test_cli_prints_the_token_once_and_it_works(client, settings):
    env = f.cli_env(settings, settings.data_dir)
    out = subprocess.run(
        [sys.executable, "-m", "gac", "token", "create", "--name", "cli-made", "--scope", "ingest"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    token = out.stdout.strip()
    assert well_formed(token) and token not in out.stderr
    assert post(client, token).status_code == 201
    dup = subprocess.run([sys.executable, "-m", "gac", "token", "create", "--name", "cli-made"], env=env, capture_output=True, text=True)
    assert dup.returncode == 1 and "already exists" in dup.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "gac", "token", "create", "--name", "x", "--scope", "root"], env=env, capture_output=True, text=True
    )
    assert bad.returncode == 2 and "--scope" in bad.stderr
