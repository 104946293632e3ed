"""Token format and storage: `gac_` + 32 random base62 characters + a 6-character checksum.

The checksum lets us reject a mistyped token without a database lookup; only an
HMAC-SHA256 of the token (keyed by the service secret) is stored.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import string
import zlib
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from gac.service.db import begin_write
from gac.service.errors import Conflict, NotFound, Unprocessable
from gac.service.models import ApiToken

PREFIX = "gac_"
_ALPHABET = string.digits + string.ascii_letters
_BODY_LEN = 32
_CHECK_LEN = 6
# last_used_at is a convenience, not an audit log: write it at most once a minute.
_TOUCH_EVERY = timedelta(seconds=60)
NAME_MAX = 100  # api_tokens.name's column
_SHOWN = len(PREFIX) + 6  # what a token's row keeps of it, to tell tokens apart in a list
_KEY_WARNED: set[str] = set()  # prefixes said to be hashed under another key
log = logging.getLogger("gac.service")


class Scope(StrEnum):
    read = "read"
    ingest = "ingest"
    admin = "admin"


# What each scope may do: admin everything, ingest uploads (and reads), read reads.
GRANTS: dict[Scope, set[Scope]] = {
    Scope.admin: {Scope.admin, Scope.ingest, Scope.read},
    Scope.ingest: {Scope.ingest, Scope.read},
    Scope.read: {Scope.read},
}


def _base62(n: int, width: int) -> str:
    out = []
    for _ in range(width):
        n, r = divmod(n, 62)
        out.append(_ALPHABET[r])
    return "".join(reversed(out))


def _checksum(body: str) -> str:
    return _base62(zlib.crc32(body.encode()), _CHECK_LEN)


def generate() -> str:
    body = "".join(secrets.choice(_ALPHABET) for _ in range(_BODY_LEN))
    return f"{PREFIX}{body}{_checksum(body)}"


def well_formed(token: str) -> bool:
    if not token.startswith(PREFIX) or len(token) != len(PREFIX) + _BODY_LEN + _CHECK_LEN:
        return False
    body, check = token[len(PREFIX) : -_CHECK_LEN], token[-_CHECK_LEN:]
    return all(c in _ALPHABET for c in body) and hmac.compare_digest(_checksum(body), check)


def hash_token(token: str, key: bytes) -> str:
    return hmac.new(key, token.encode(), hashlib.sha256).hexdigest()


def create_token(session: Session, key: bytes, name: str, scope: Scope) -> tuple[ApiToken, str]:
    """Store a new token and return it with its plain text (shown once, never stored)."""
    if not 1 <= len(name) <= NAME_MAX or name != name.strip() or not name.isprintable():
        raise Unprocessable(f"a token's name is 1 to {NAME_MAX} printable characters, without spaces around them (got {name[:NAME_MAX]!r})")
    begin_write(session)
    if (same := session.scalar(select(ApiToken).where(ApiToken.name == name))) is not None:
        if same.revoked_at is not None:
            said = f"a token named {name!r} was revoked on {same.revoked_at:%Y-%m-%d}: a revoked token keeps its name, choose another"
            raise Conflict(said)
        raise Conflict(f"a token named {name!r} already exists")
    plain = generate()
    row = ApiToken(name=name, scope=scope.value, token_hash=hash_token(plain, key), prefix=plain[:_SHOWN])
    session.add(row)
    session.commit()
    return row, plain


def revoke_token(session: Session, name: str) -> ApiToken:
    begin_write(session)
    row = session.scalar(select(ApiToken).where(ApiToken.name == name))
    if row is None:
        raise NotFound(f"no token named {name!r}")
    if row.revoked_at is None:
        row.revoked_at = datetime.now(UTC)
    session.commit()
    return row


def list_tokens(session: Session) -> list[ApiToken]:
    return list(session.scalars(select(ApiToken).order_by(ApiToken.id)))


def _say_if_hashed_under_another_key(session: Session, token: str) -> None:
    """A refused token whose prefix a live token has: most likely that token, hashed under another key (a changed
    GAC_SECRET_KEY refuses every token, and the callers see only 401). Logged once per prefix and process."""
    prefix = token[:_SHOWN]
    if prefix in _KEY_WARNED:
        return
    if session.scalar(select(ApiToken.name).where(ApiToken.prefix == prefix, ApiToken.revoked_at.is_(None))) is not None:
        _KEY_WARNED.add(prefix)
        log.warning(
            "a token starting %s was refused though a live token starts so: was it created under another "
            "GAC_SECRET_KEY? Tokens are hashed with the key; a changed key refuses every one of them",
            prefix,
        )


def find_active(session: Session, key: bytes, token: str) -> ApiToken | None:
    """The live token row for this plain token, or None (malformed, unknown or revoked)."""
    if not well_formed(token):
        return None
    row = session.scalar(select(ApiToken).where(ApiToken.token_hash == hash_token(token, key)))
    if row is None:
        _say_if_hashed_under_another_key(session, token)
    if row is None or row.revoked_at is not None:
        return None
    now = datetime.now(UTC)
    last = row.last_used_at
    if last is None or now - last > _TOUCH_EVERY:
        session.commit()  # end the read before taking the write lock
        begin_write(session)
        session.execute(update(ApiToken).where(ApiToken.id == row.id).values(last_used_at=now))
        session.commit()
    return row
