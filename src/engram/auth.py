"""API keys: a credential decides the tenant.

A key is ``egk_`` + 256 random bits, shown once at creation; only its SHA-256 is stored (the key is
random, so a fast hash is enough: there is nothing to brute-force). A key belongs to one user, or is
the admin key (``user_id`` None), which manages keys and the catalog but reads no user's memories
through the API, except a whole user's export for a data-rights request (``GET
/v1/admin/users/{user}/export``); the inspector lets it look at a chosen user's, read only
(``may_inspect``).

A key has a scope: ``read`` (recall, list and read only), ``write`` (read and write: what every key
made before scopes can do) or ``admin`` (the admin key's); and may have an expiry, after which it opens
nothing ("key expired"), as if revoked. Every surface asks the one ``Principal`` (``require_write``).

An admin key given from outside (``ENGRAM_ADMIN_KEY``) is the only admin key: adopting it revokes every
other, so an old key stops working when the setting changes. It must pass ``check_admin_key``.

A sign-in session (the inspector's) is made the same way: ``egs_`` + 256 random bits held by the browser,
its SHA-256 stored with the key's id and an expiry (``SessionStore``). Nothing is signed, so there is no
secret to guess and a key id (``engram keys list`` prints them) opens nothing. Every process of the
service reads the one store: signing out ends the session everywhere at once, "sign out everywhere"
ends every session of the key, revoking the key ends them too, and a restart ends none.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from engram.errors import Conflict, InvalidInput, NotFound, PermissionDenied, Unauthenticated
from engram.limits import KEY_LABEL_PATTERN, MAX_KEY_LABEL_CHARS, MAX_KEY_LIFETIME_S, MIN_KEY_LIFETIME_S
from engram.models import utcnow
from engram.storage.base import KEY_SCOPES, ApiKeyRecord, KeyScope, KeyStore, SessionStore
from engram.validation import validate_user_id

KEY_PREFIX = "egk_"
SESSION_PREFIX = "egs_"
MAX_TOKEN_CHARS = 512  # longer than any key or session token: not looked up
ADMIN_KEY_MIN_CHARS = 32
ADMIN_KEY_MIN_DISTINCT = 8  # 32 random hex digits have fewer in under 1 in a million draws
NO_KEY = "missing, unknown or revoked API key"
KEY_EXPIRED = "key expired"
READ_ONLY = "this API key is read-only: it may recall and read, not write, correct or forget (scope 'read')"


@dataclass(frozen=True)
class Principal:
    """Who is calling: a tenant (``user_id``) or the admin."""

    key_id: str
    user_id: str | None
    scope: KeyScope = "write"

    @property
    def is_admin(self) -> bool:
        return self.user_id is None

    @property
    def may_write(self) -> bool:
        return self.scope != "read"

    def require_write(self) -> None:
        """Refuse a read-only key anything that writes (REST, MCP tools, the inspector's forms)."""
        if not self.may_write:
            raise PermissionDenied(READ_ONLY)

    def may_inspect(self, user_id: str) -> bool:
        """Whether this key may look at ``user_id``'s memories in the inspector: a user key its own
        only; the admin key any user's, and only through ``Engram.reader``, which cannot write."""
        return self.is_admin or self.user_id == user_id


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class AuthStore(KeyStore, SessionStore, Protocol):
    """What ApiKeys needs of a store: its keys and its sessions."""


def _session_hash(token: str | None) -> str | None:
    """The stored hash of a token that could be a session we issued, else None: a header can carry
    anything (a non-ASCII cookie made the old signature check raise: every page answered 500)."""
    if not token or len(token) > MAX_TOKEN_CHARS or not token.isascii():
        return None
    return hash_key(token) if token.startswith(SESSION_PREFIX) else None


class ApiKeys:
    def __init__(self, store: AuthStore) -> None:
        self._store = store

    def create(
        self,
        user_id: str | None,
        label: str = "",
        *,
        scope: KeyScope | None = None,
        expires_in: timedelta | None = None,
    ) -> tuple[str, ApiKeyRecord]:
        """A new key for ``user_id`` (None: an admin key) with ``scope`` (a user key's ``read`` or
        ``write``, the default; ``admin`` is the admin key's) that stops working after ``expires_in``
        (None: never). Returns (the key, shown once; its record)."""
        scope = key_scope(user_id, scope)
        if not re.fullmatch(KEY_LABEL_PATTERN, label) or len(label) > MAX_KEY_LABEL_CHARS:
            raise InvalidInput(f"a key's label is one line of at most {MAX_KEY_LABEL_CHARS} characters")
        if expires_in is not None and expires_in <= timedelta(0):
            raise InvalidInput("a key's lifetime must be positive")
        now = utcnow()
        # whole seconds: every backend keeps them exactly (OpenSearch keeps milliseconds)
        expires_at = None if expires_in is None else (now + expires_in).replace(microsecond=0)
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        record = ApiKeyRecord(
            id="key_" + secrets.token_urlsafe(9),
            user_id=user_id,
            label=label,
            created_at=now,
            scope=scope,
            expires_at=expires_at,
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
                scope="admin",
            )
            self._store.add_key(record, hash_key(key))
            existing = record
        elif existing.user_id is not None or existing.revoked_at is not None:
            raise InvalidInput("ENGRAM_ADMIN_KEY is a user key or a revoked key; choose a new one")
        others = [k for k in self._store.list_keys() if k.user_id is None and k.id != existing.id]
        return sum(self._store.revoke_key(k.id, utcnow()) for k in others if k.revoked_at is None)

    def has_admin(self) -> bool:
        return any(k.user_id is None and k.revoked_at is None for k in self._store.list_keys())

    def authenticate(self, key: str | None) -> Principal:
        """The principal of a live key; Unauthenticated saying why for any other (``KEY_EXPIRED`` for
        an expired one, ``NO_KEY`` for a missing, unknown or revoked one)."""
        if not key or len(key) > MAX_TOKEN_CHARS:
            raise Unauthenticated(NO_KEY)
        record = self._store.find_key(hash_key(key))
        if record is None or record.revoked_at is not None:
            raise Unauthenticated(NO_KEY)
        return _principal(record)

    def resolve(self, key: str | None) -> Principal | None:
        """The principal of a live key, or None for a missing, unknown, revoked or expired key."""
        try:
            return self.authenticate(key)
        except Unauthenticated:
            return None

    def open_session(self, principal: Principal, lifetime_s: int) -> str:
        """A new session of the principal's key for ``lifetime_s`` seconds: its token, shown once (the
        store keeps its hash). It names nothing and contains nothing: it is looked up."""
        token = SESSION_PREFIX + secrets.token_urlsafe(32)
        now = utcnow()
        self._store.add_session(hash_key(token), principal.key_id, now + timedelta(seconds=lifetime_s), now)
        return token

    def resolve_session(self, token: str | None) -> Principal | None:
        """The principal of a session token; None if unknown, ended, expired, or its key revoked."""
        token_hash = _session_hash(token)
        found = None if token_hash is None else self._store.find_session(token_hash)
        if found is None or found[1] <= utcnow():
            return None
        record = self._store.get_key(found[0])
        if record is None or record.revoked_at is not None:
            return None
        try:
            return _principal(record)
        except Unauthenticated:  # the key expired since the sign-in
            return None

    def end_session(self, token: str | None) -> bool:
        """Sign out: the session stops working for every process at once. Whether there was one."""
        token_hash = _session_hash(token)
        return token_hash is not None and self._store.end_sessions("token_hash", token_hash) > 0

    def end_sessions(self, key_id: str) -> int:
        """Sign out everywhere: end every session made from the key. How many there were."""
        return self._store.end_sessions("key_id", key_id)

    def list(self, user_id: str | None = None) -> list[ApiKeyRecord]:
        return self._store.list_keys(user_id)

    def revoke(self, key_id: str) -> None:
        """Revoke a live key and end its sessions (a revoked key's sessions resolve to nobody anyway).
        Not the last live admin key: that locked every admin out at once (an outside review), and
        `engram serve` with it as ENGRAM_ADMIN_KEY would not start again; setting a new ENGRAM_ADMIN_KEY
        replaces it. One of two (after `engram import --all` brought another) may go."""
        record = self._store.get_key(key_id)
        admins = [k for k in self._store.list_keys() if k.user_id is None and k.revoked_at is None]
        if record is not None and record.revoked_at is None and [k.id for k in admins] == [key_id]:
            raise Conflict(
                f"API key {key_id!r} is the only admin key: revoking it would lock every admin out. To "
                "replace it, set ENGRAM_ADMIN_KEY to a new key and restart `engram serve` (which revokes the "
                "old one)"
            )
        if not self._store.revoke_key(key_id, utcnow()):
            record = self._store.get_key(key_id)
            if record is None or record.revoked_at is None:
                raise NotFound(key_id, what="API key")
            raise Conflict(
                f"API key {key_id!r} is already revoked (since {record.revoked_at:%Y-%m-%d %H:%M} UTC)"
            )
        self._store.end_sessions("key_id", key_id)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_lifetime(text: str) -> timedelta:
    """A key's lifetime written as a number and a unit (``30d``, ``12h``, ``90m``, ``2w``, ``3600s``),
    between MIN_KEY_LIFETIME_S and MAX_KEY_LIFETIME_S."""
    spelled = text.strip().lower()
    number, unit = spelled[:-1], spelled[-1:]
    if unit not in _UNITS or not number.isdigit():
        raise InvalidInput(f"a lifetime is a whole number and a unit (s, m, h, d, w), e.g. 30d; not {text!r}")
    seconds = int(number) * _UNITS[unit]
    if not MIN_KEY_LIFETIME_S <= seconds <= MAX_KEY_LIFETIME_S:
        raise InvalidInput(
            f"a key's lifetime is between {MIN_KEY_LIFETIME_S} s and {MAX_KEY_LIFETIME_S // 86400} days"
        )
    return timedelta(seconds=seconds)


def key_scope(user_id: str | None, scope: str | None) -> KeyScope:
    """A key's scope, checked: ``admin`` for the admin key (no user) and only for it; a user key's
    ``read`` or ``write`` (the default)."""
    if scope is not None and scope not in KEY_SCOPES:
        raise InvalidInput(f"a key's scope is one of {', '.join(KEY_SCOPES)}, not {scope!r}")
    if user_id is None:
        if scope not in (None, "admin"):
            raise InvalidInput(
                "the admin key (no user) has scope 'admin'; give a user for a read or write key"
            )
        return "admin"
    validate_user_id(user_id)
    if scope == "admin":
        raise InvalidInput(
            "a user's key is read or write; the one admin key is set by ENGRAM_ADMIN_KEY (restart "
            "`engram serve` with it to replace a lost one) or made by the first `engram serve`"
        )
    return "read" if scope == "read" else "write"


def _principal(record: ApiKeyRecord) -> Principal:
    """The principal of a live (not revoked) key record; Unauthenticated once it expired."""
    if record.expires_at is not None and record.expires_at <= utcnow():
        raise Unauthenticated(KEY_EXPIRED)
    scope: KeyScope = "admin" if record.user_id is None else record.scope
    return Principal(key_id=record.id, user_id=record.user_id, scope=scope)


def check_admin_key(key: str) -> None:
    """Refuse a guessable admin key: at least 32 printable ASCII characters without spaces, of which at
    least 8 distinct (so no repeated character or short pattern). ``openssl rand -hex 16`` or longer,
    ``openssl rand -base64 32`` and ``python -c "import secrets; print(secrets.token_urlsafe())"`` pass."""
    if len(key) < ADMIN_KEY_MIN_CHARS:
        raise InvalidInput(
            f"ENGRAM_ADMIN_KEY must be at least {ADMIN_KEY_MIN_CHARS} characters "
            "(generate one: openssl rand -hex 32)"
        )
    if not all("!" <= c <= "~" for c in key):
        raise InvalidInput("ENGRAM_ADMIN_KEY must be printable ASCII without spaces")
    if len(set(key)) < ADMIN_KEY_MIN_DISTINCT:
        raise InvalidInput(
            f"ENGRAM_ADMIN_KEY is too predictable: it needs at least {ADMIN_KEY_MIN_DISTINCT} different "
            "characters (generate one: openssl rand -hex 32)"
        )
