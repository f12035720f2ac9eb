"""API keys: a credential decides the tenant.

A key is ``egk_`` + 256 random bits, shown once at creation; only its SHA-256 is stored (the key is
random, so a fast hash is enough: there is nothing to brute-force). A key belongs to one user, or is
the admin key (``user_id`` None), which manages keys and the catalog but reads no user's memories
through the API; the inspector alone lets it look at a chosen user's, read only (``may_inspect``).

An admin key given from outside (``ENGRAM_ADMIN_KEY``) is the only admin key: adopting it revokes every
other, so an old key stops working when the setting changes. It must pass ``check_admin_key``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

from engram.errors import InvalidInput, NotFound
from engram.models import utcnow
from engram.storage.base import ApiKeyRecord, KeyStore
from engram.validation import validate_user_id

KEY_PREFIX = "egk_"
ADMIN_KEY_MIN_CHARS = 32
ADMIN_KEY_MIN_DISTINCT = 8  # 32 random hex digits have fewer in under 1 in a million draws


@dataclass(frozen=True)
class Principal:
    """Who is calling: a tenant (``user_id``) or the admin."""

    key_id: str
    user_id: str | None

    @property
    def is_admin(self) -> bool:
        return self.user_id is None

    def may_inspect(self, user_id: str) -> bool:
        """Whether this key may look at ``user_id``'s memories in the inspector: a user key its own
        only; the admin key any user's, and only through ``Engram.reader``, which cannot write."""
        return self.is_admin or self.user_id == user_id


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class ApiKeys:
    def __init__(self, store: KeyStore, session_secret: bytes | None = None) -> None:
        self._store = store
        # Signs sessions (the inspector's cookie); random per process unless the server shares one
        # between its workers. A new one signs everyone out, which is all a restart costs.
        self._session_secret = session_secret or secrets.token_bytes(32)

    def create(self, user_id: str | None, label: str = "") -> tuple[str, ApiKeyRecord]:
        """A new key for ``user_id`` (None: an admin key). Returns (the key, shown once; its record)."""
        if user_id is not None:
            validate_user_id(user_id)
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        record = ApiKeyRecord(
            id="key_" + secrets.token_urlsafe(9), user_id=user_id, label=label, created_at=utcnow()
        )
        self._store.add_key(record, hash_key(key))
        return key, record

    def adopt_admin_key(self, key: str) -> int:
        """Make ``key`` (e.g. ENGRAM_ADMIN_KEY) the one admin key: register it if new, revoke every
        other live admin key. Returns how many were revoked."""
        check_admin_key(key)
        existing = self._store.find_key(hash_key(key))
        if existing is None:
            record = ApiKeyRecord(
                id="key_" + secrets.token_urlsafe(9),
                user_id=None,
                label="from environment",
                created_at=utcnow(),
            )
            self._store.add_key(record, hash_key(key))
            existing = record
        elif existing.user_id is not None or existing.revoked_at is not None:
            raise InvalidInput("ENGRAM_ADMIN_KEY is a user key or a revoked key; choose a new one")
        others = [k for k in self._store.list_keys() if k.user_id is None and k.id != existing.id]
        return sum(self._store.revoke_key(k.id, utcnow()) for k in others if k.revoked_at is None)

    def has_admin(self) -> bool:
        return any(k.user_id is None and k.revoked_at is None for k in self._store.list_keys())

    def resolve(self, key: str | None) -> Principal | None:
        """The principal of a live key, or None for a missing, unknown or revoked key."""
        if not key or len(key) > 512:
            return None
        record = self._store.find_key(hash_key(key))
        if record is None or record.revoked_at is not None:
            return None
        return Principal(key_id=record.id, user_id=record.user_id)

    def open_session(self, principal: Principal, lifetime_s: int) -> str:
        """A token naming the key (never containing it), valid for ``lifetime_s`` seconds and only while
        the key stays live: ``key_id.expiry.signature`` (HMAC-SHA256 with the session secret)."""
        body = f"{principal.key_id}.{int(time.time()) + lifetime_s}"
        return f"{body}.{self._sign(body)}"

    def resolve_session(self, token: str | None) -> Principal | None:
        """The principal of a token from ``open_session``; None if forged, expired, or its key revoked."""
        if not token or len(token) > 256 or token.count(".") != 2:
            return None
        key_id, expires, signature = token.split(".")
        if not hmac.compare_digest(signature, self._sign(f"{key_id}.{expires}")):
            return None
        if not expires.isdigit() or int(expires) < time.time():
            return None
        record = self._store.get_key(key_id)
        if record is None or record.revoked_at is not None:
            return None
        return Principal(key_id=record.id, user_id=record.user_id)

    def _sign(self, body: str) -> str:
        digest = hmac.new(self._session_secret, body.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def list(self, user_id: str | None = None) -> list[ApiKeyRecord]:
        return self._store.list_keys(user_id)

    def revoke(self, key_id: str) -> None:
        if not self._store.revoke_key(key_id, utcnow()):
            raise NotFound(key_id, what="API key")


def check_admin_key(key: str) -> None:
    """Refuse a guessable admin key: at least 32 printable ASCII characters without spaces, of which at
    least 8 distinct (so no repeated character or short pattern). ``openssl rand -hex 16`` or longer,
    ``openssl rand -base64 32`` and ``python -c "import secrets; print(secrets.token_urlsafe())"`` pass."""
    if len(key) < ADMIN_KEY_MIN_CHARS:
        raise InvalidInput(f"ENGRAM_ADMIN_KEY must be at least {ADMIN_KEY_MIN_CHARS} characters")
    if not all("!" <= c <= "~" for c in key):
        raise InvalidInput("ENGRAM_ADMIN_KEY must be printable ASCII without spaces")
    if len(set(key)) < ADMIN_KEY_MIN_DISTINCT:
        raise InvalidInput(
            f"ENGRAM_ADMIN_KEY is too predictable: it needs at least {ADMIN_KEY_MIN_DISTINCT} different "
            "characters (generate one: openssl rand -hex 32)"
        )
