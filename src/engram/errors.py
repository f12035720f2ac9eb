"""Engram's exceptions: one root, subclassed by what the caller can do about it.

EngramError
├── InvalidInput          bad argument or document; nothing was changed
│   ├── ImportFileError   an import document is invalid; names the record; nothing imported
│   └── ConfigError       a setting, the config file or the store URL is invalid; names which
├── NotFound              no such row *in your scope* (also raised for another tenant's rows)
├── Unauthenticated       no live API key: missing, unknown, revoked or expired
├── PermissionDenied      the handle may not do this (e.g. a tenant writing the catalog, a read-only key)
├── Conflict              the row's state forbids it (e.g. superseding an already superseded fact)
├── ModelError            a model's files are missing/corrupt or do not match the store
└── StorageError          the storage engine failed or the store is unusable
    └── StoreBusy         another writer holds the store longer than the caller would wait
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


class EngramError(Exception):
    """Root of every error Engram raises on purpose."""

    code = "engram_error"


class InvalidInput(EngramError, ValueError):
    code = "invalid_input"


class ImportFileError(InvalidInput):
    code = "invalid_import"


class ConfigError(InvalidInput):
    """Raised at startup, never by a request: it keeps InvalidInput's code."""


class NotFound(EngramError, LookupError):
    """Raised alike for rows that do not exist and rows of another tenant, so existence never leaks."""

    code = "not_found"

    def __init__(self, memory_id: str, what: str = "memory") -> None:
        # No real id is this long: an id of 500,000 characters was echoed whole into the answer.
        shown = memory_id if len(memory_id) <= 100 else memory_id[:100] + "…"
        super().__init__(f"{what} {shown!r} not found")
        self.memory_id = memory_id


class Unauthenticated(EngramError):
    """The credential opens nothing; the message says why (expired, or missing/unknown/revoked)."""

    code = "unauthorized"


class PermissionDenied(EngramError, PermissionError):
    code = "permission_denied"


class Conflict(EngramError):
    code = "conflict"


class ModelError(EngramError):
    code = "model_error"


class StorageError(EngramError):
    code = "storage_error"


class StoreBusy(StorageError):
    """Only raised where the caller set a wait bound (recall's use-count bump), which handles it."""

    code = "store_busy"


# What a remote client reads instead of a message that may name server files or quote a driver.
_WITHHELD = {
    "conflict": "the request conflicts with what is stored",
    "model_error": "a model failed",
    "storage_error": "the store failed",
}


# The errors only engram.Client raises (it re-exports them).
class Unauthorized(PermissionDenied):
    """The service refused the API key: missing, unknown or revoked (HTTP 401)."""

    code = "unauthorized"


class ServiceUnavailable(StorageError):
    """The service could not be reached (refused, timed out, name unknown) or did not answer as an Engram
    service does (not its JSON, an unexpected shape, a proxy's error page). A StorageError, so code that
    carries on without memory when the store fails does the same when the service is away."""

    code = "service_unavailable"


class ClientClosed(EngramError):
    """The client was used after ``close()`` (or after its ``with`` block): nothing was sent."""

    code = "client_closed"


def public_message(exc: EngramError) -> str:
    """The message of ``exc`` that a remote client (REST, MCP over HTTP) may read.

    Failures of the server itself (the store, the models, any error raised from a driver's or the OS's
    exception) can carry file paths and raw driver text: those are logged here, with the traceback,
    and the client gets a fixed sentence for the error's code. Errors about the request keep their
    message, which names what to fix.
    """
    foreign_cause = exc.__cause__ is not None and not isinstance(exc.__cause__, EngramError)
    if not (foreign_cause or isinstance(exc, ModelError | StorageError) or type(exc) is EngramError):
        return str(exc)
    log.error("%s: %s", type(exc).__name__, exc, exc_info=exc)
    return f"{_WITHHELD.get(exc.code, 'the server failed')}; the server log has the details"


FAILED = "the server failed; the server log has the details"


def public_failure(exc: BaseException, what: str = "") -> str:
    """What a client may read about ``exc``, whatever it is: every message meant for a client goes
    through here (the REST error handler, MCP tool errors, a failed recall stage's explain, the agent's
    tool results). An EngramError about the request keeps its message (``public_message``); anything
    else is logged here with its traceback (``what`` says what failed) and the client reads a fixed
    sentence: an exception's own text can name server files or quote a driver."""
    if isinstance(exc, EngramError):
        return public_message(exc)
    log.error("%s failed: %s: %s", what or "a request", type(exc).__name__, exc, exc_info=exc)
    return f"{what + ' ' if what else ''}failed; the server log has the details"
