"""``engram.Client``: one user's memory over the REST API, with the embedded ``UserMemory`` API.

::

    from engram import Client

    with Client("http://127.0.0.1:8765", "egk_...") as mem:   # a user key: the tenant is the key's
        mem.remember_turn("we moved to Edinburgh last week!")
        for hit in mem.recall("where do I live?"):
            print(hit.rank, hit.memory.text, hit.explain)

Every public method has the signature of the ``UserMemory`` method of the same name, returns the same
models (``EpisodicMemory``, ``SemanticMemory``, ``Hit``, ``Tombstone``...) and raises the same
``EngramError`` subclasses, read back from the service's ``{"error": code, "message"}`` body. Three
errors exist only here: ``Unauthorized`` (the key was refused, HTTP 401), ``ServiceUnavailable``
(the service could not be reached, or did not answer as Engram does) and ``ClientClosed`` (the client
was used after ``close()``).

What the service decides, the client does not check again: the server runs the same ``UserMemory``
code. The client checks only what JSON cannot carry (a timestamp must be a datetime, not a string
that the server would happen to parse).
"""

from __future__ import annotations

import builtins
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, TypeVar, overload

import httpx
from pydantic import TypeAdapter, ValidationError

from engram import _envelopes
from engram._envelopes import _iso, _json, _listed, _memory_path, _not_found
from engram.errors import (
    ClientClosed,
    Conflict,
    EngramError,
    ImportFileError,
    InvalidInput,
    ModelError,
    NotFound,
    PermissionDenied,
    ServiceUnavailable,
    StorageError,
    Unauthorized,
)
from engram.models import (
    CompactHit,
    Contradiction,
    EpisodicMemory,
    FactType,
    Hit,
    Memory,
    MemoryType,
    ProceduralMemory,
    RecallView,
    SemanticMemory,
    ShedHits,
    Step,
    Tombstone,
    check_recall_options,
)
from engram.recall_filter import MetadataValue
from engram.retrieval.config import RetrievalConfig
from engram.validation import check_page

__all__ = ["Client", "ClientClosed", "ServiceUnavailable", "Unauthorized"]

MAX_PAGE = 500  # the largest page GET /v1/memories serves; longer lists are fetched page by page


# The service's stable error codes (engram.errors and the REST layer's HTTP codes), most specific first.
_BY_CODE: dict[str, type[EngramError]] = {
    "invalid_import": ImportFileError,
    "invalid_input": InvalidInput,
    "payload_too_large": InvalidInput,  # nothing was changed, as with every 4xx
    "not_found": NotFound,
    "permission_denied": PermissionDenied,
    "forbidden": PermissionDenied,
    "unauthorized": Unauthorized,
    "conflict": Conflict,
    "model_error": ModelError,
    "storage_error": StorageError,
    "store_busy": StorageError,
}
# For a code this client does not know (a newer server): what the status means.
_BY_STATUS: dict[int, type[EngramError]] = {
    400: InvalidInput,
    401: Unauthorized,
    403: PermissionDenied,
    404: NotFound,
    409: Conflict,
    413: InvalidInput,
    422: InvalidInput,
    503: StorageError,
}


_RESULT = TypeVar("_RESULT")


class Client:
    """One user's memory in an Engram service (``engram serve``), over its REST API (``/v1``).

    ``base_url`` is where the service answers (``http://127.0.0.1:8765``, or behind a proxy
    ``https://host/engram``); ``api_key`` is a user key (``engram keys create --user U``), which decides
    whose memory this is. One HTTP connection pool per client, safe to share between threads; close it
    with ``close()`` or use the client as a context manager.
    """

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 30.0) -> None:
        if not (isinstance(api_key, str) and api_key.isascii() and api_key.isprintable()):
            raise InvalidInput("api_key must be a string of printable ASCII characters (an Engram key)")
        self.base_url = base_url.rstrip("/")
        headers = {"Accept": "application/json"}
        if api_key:  # none at all rather than an empty one, which HTTP refuses: the service says 401
            headers["Authorization"] = f"Bearer {api_key}"
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)
        self._user_id: str | None = None

    def __repr__(self) -> str:
        return f"Client({self.base_url!r})"

    @property
    def user_id(self) -> str:
        """The user whose memory the key opens (asked of the service once)."""
        if self._user_id is None:
            self._user_id = self._call("GET", "/v1/me", result=_envelopes.ME).user_id
        return self._user_id

    def close(self) -> None:
        """Close the connection pool; the client cannot be used afterwards."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- the UserMemory API ----------------------------------------------------------------------
    def remember_turn(
        self,
        text: str,
        at: datetime | None = None,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> EpisodicMemory:
        """Store one user turn verbatim (episodic), visible to the very next recall.

        ``metadata["assistant_context"]`` may carry the assistant message this turn replied to, and
        ``metadata["speaker"]`` who said it in a conversation of several people (see
        ``UserMemory.remember_turn``)."""
        body = {"text": text, "at": _iso(at), "session_id": session_id, "metadata": dict(metadata or {})}
        return self._call("POST", "/v1/turns", body, result=_envelopes.EPISODE)

    def write(
        self,
        text: str,
        memory_type: MemoryType = "semantic",
        *,
        fact_type: FactType = "identity",
        confidence: float = 1.0,
        supporting_episode_ids: Sequence[str] = (),
        supersedes_id: str | None = None,
        contradiction: Contradiction | None = None,
        valid_from: datetime | None = None,
        valid_to: datetime | None = None,
        name: str | None = None,
        trigger_text: str = "",
        description: str = "",
        steps: Iterable[Step | Mapping[str, Any]] = (),
        metadata: Mapping[str, Any] | None = None,
        created_at: datetime | None = None,
    ) -> SemanticMemory | ProceduralMemory:
        """Write a fact (semantic) or a playbook (procedural); with ``supersedes_id`` the new row
        replaces that live row atomically (``contradiction`` "natural" or "harsh", see
        ``UserMemory.write``)."""
        body = {
            "text": text,
            "memory_type": memory_type,
            "fact_type": fact_type,
            "confidence": confidence,
            "supporting_episode_ids": _listed(supporting_episode_ids),
            "supersedes_id": supersedes_id,
            "contradiction": contradiction,
            "valid_from": _iso(valid_from),
            "valid_to": _iso(valid_to),
            "name": name,
            "trigger_text": trigger_text or "",  # the handle takes None for "" too
            "description": description or "",
            "steps": [s.model_dump() if isinstance(s, Step) else dict(s) for s in steps],
            "metadata": dict(metadata or {}),
            "created_at": _iso(created_at),
        }
        return self._call("POST", "/v1/memories", body, result=_envelopes.WRITTEN)

    # `list` below is a method: annotations in this class spell the builtin `builtins.list`, as the
    # handle's do (their signatures must be identical: tests/test_client_parity.py).
    @overload
    def recall(
        self,
        query: str,
        k: int = 10,
        memory_types: Iterable[MemoryType] | None = None,
        include_catalog: bool = True,
        include_superseded: bool = False,
        config: RetrievalConfig | None = None,
        record_use: bool | None = None,
        as_of: datetime | None = None,
        min_confidence: float | None = None,
        view: Literal["full"] = "full",
        *,
        session_id: str | None = None,
        time_from: datetime | None = None,
        time_to: datetime | None = None,
        metadata: Mapping[str, MetadataValue] | None = None,
    ) -> builtins.list[Hit]: ...

    @overload
    def recall(
        self,
        query: str,
        k: int = 10,
        memory_types: Iterable[MemoryType] | None = None,
        include_catalog: bool = True,
        include_superseded: bool = False,
        config: RetrievalConfig | None = None,
        record_use: bool | None = None,
        as_of: datetime | None = None,
        min_confidence: float | None = None,
        *,
        view: Literal["compact"],
        session_id: str | None = None,
        time_from: datetime | None = None,
        time_to: datetime | None = None,
        metadata: Mapping[str, MetadataValue] | None = None,
    ) -> builtins.list[CompactHit]: ...

    def recall(
        self,
        query: str,
        k: int = 10,
        memory_types: Iterable[MemoryType] | None = None,
        include_catalog: bool = True,
        include_superseded: bool = False,
        config: RetrievalConfig | None = None,
        record_use: bool | None = None,
        as_of: datetime | None = None,
        min_confidence: float | None = None,
        view: RecallView = "full",
        *,
        session_id: str | None = None,
        time_from: datetime | None = None,
        time_to: datetime | None = None,
        metadata: Mapping[str, MetadataValue] | None = None,
    ) -> builtins.list[Hit] | builtins.list[CompactHit]:
        """Search all of the user's memory types and the catalog in one call; each hit's ``explain``
        shows how its score was made. Returned facts count as used unless ``record_use=False`` (or
        ``as_of`` is given), as in ``UserMemory.recall``. ``min_confidence`` keeps the top ``k`` hits
        that reach it; ``view="compact"`` asks the service for ``CompactHit``s (a fraction of the bytes).
        ``session_id``, ``time_from``/``time_to`` and ``metadata`` filter inside the search, as there.

        ``config`` must be None here: the service recalls with its own settings (a caller's
        candidate counts and rerank windows would be other tenants' latency); InvalidInput otherwise.
        The service returns at most 100 hits (``k`` over 100 is InvalidInput)."""
        if config is not None:
            raise InvalidInput("config is not taken over the REST API: the service recalls with its settings")
        check_recall_options(min_confidence, view)
        body = {
            "query": query,
            "k": k,
            "memory_types": None if memory_types is None else _listed(memory_types),
            "include_catalog": include_catalog,
            "include_superseded": include_superseded,
            "record_use": record_use,
            "as_of": _iso(as_of),
            "min_confidence": min_confidence,
            "view": view,
            "session_id": session_id,
            "time_from": _iso(time_from),
            "time_to": _iso(time_to),
            "metadata": metadata,
        }
        if view == "compact":
            compact = self._call("POST", "/v1/recall", body, result=_envelopes.RECALLED_COMPACT)
            return ShedHits(compact.hits) if compact.shed else compact.hits  # as the embedded handle says it
        full = self._call("POST", "/v1/recall", body, result=_envelopes.RECALLED)
        return ShedHits(full.hits) if full.shed else full.hits

    def get(self, memory_id: str) -> Memory:
        """One of the user's rows, or a catalog row; NotFound otherwise (also for other users' ids)."""
        return self._call("GET", _memory_path(memory_id), result=_envelopes.MEMORY)

    def forget(self, memory_id: str, *, revive_retracted: bool = False) -> Tombstone:
        """Hard-delete one of the user's rows; an audit tombstone without text remains. A fact a harsh
        correction retracted stays retracted when the correction is forgotten, unless
        ``revive_retracted``."""
        path = _memory_path(memory_id)
        params = {"revive_retracted": "true"} if revive_retracted else None
        return self._call("DELETE", path, params=params, result=_envelopes.FORGOTTEN).forgotten

    def record_outcome(self, playbook_id: str, success: bool) -> ProceduralMemory:
        """Count one use of one of the user's playbooks as a success or a failure (no LLM involved);
        the playbook with its counts after the change. NotFound for another user's playbook."""
        path = _memory_path(playbook_id, "playbooks") + "/outcome"
        return self._call("POST", path, {"success": success}, result=_envelopes.PLAYBOOK)

    def history(self, memory_id: str) -> builtins.list[Memory]:
        """The supersession chain that contains ``memory_id``, oldest first."""
        path = _memory_path(memory_id) + "/history"
        return self._call("GET", path, result=_envelopes.LIST).data

    def list(
        self,
        memory_type: MemoryType,
        *,
        include_superseded: bool = False,
        limit: int = 50,
        offset: int = 0,
    ) -> builtins.list[Memory]:
        """The user's rows of one type, newest first, paged. A limit over the service's page size
        (500) is fetched in several requests."""
        params = {"type": memory_type, "include_superseded": "true" if include_superseded else "false"}
        if not isinstance(limit, int) or limit <= MAX_PAGE:
            page = {**params, "limit": limit, "offset": offset}
            return self._call("GET", "/v1/memories", params=page, result=_envelopes.LIST).data
        check_page(limit, offset)  # the bounds the handle's store enforces, before any request
        rows: list[Memory] = []
        while len(rows) < limit:
            want = min(limit - len(rows), MAX_PAGE)
            page = {**params, "limit": want, "offset": offset + len(rows)}
            got = self._call("GET", "/v1/memories", params=page, result=_envelopes.LIST).data
            rows.extend(got)
            if len(got) < want:  # the last page
                break
        return rows

    def import_json(self, document: Mapping[str, Any], *, progress: bool = False) -> dict[str, Any]:
        """Import a user document (see ``engram.importer``) into the user's memory; an invalid one
        writes nothing (ImportFileError). ``progress`` has no effect: the service does the work.

        The import is sent with an ``Idempotency-Key`` made from the document, so the service runs it
        as a job and this call waits for it however long it takes, in requests that each end well
        within the timeout. The same document imported again (after the call was interrupted, say)
        joins the run still going instead of racing it, and once that has ended writes only what is
        missing: every record is written once."""
        content = _json(document)
        key = hashlib.sha256(content).hexdigest()
        read = self._http.timeout.read
        params = None if read is None else {"wait": min(read / 2, 60)}  # answered 202 by then
        post = ("POST", "/v1/import", content, {"Idempotency-Key": key})
        response = self._send(*post, params=params)
        # 202: still running, ask again; 404 to a poll: a server process that does not know the job
        # (another worker, a restart), so send the import again, which joins or finishes it there.
        while response.status_code == 202 or (
            response.status_code == 404 and response.request.method == "GET"
        ):
            poll = ("GET", f"/v1/import/{key}", None, None)
            response = self._send(*(poll if response.status_code == 202 else post), params=params)
        try:
            return self._read(response, _envelopes.IMPORTED)
        except ImportFileError:
            raise
        except InvalidInput as exc:  # the service validated the document as the request body
            raise ImportFileError(str(exc)) from None

    # -- HTTP ------------------------------------------------------------------------------------
    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        result: TypeAdapter[_RESULT],
        params: Mapping[str, Any] | None = None,
    ) -> _RESULT:
        """One request; the parsed result, or the EngramError the service's answer stands for."""
        content = None if body is None else _json(body)
        return self._read(self._send(method, path, content, None, params=params), result)

    def _send(
        self,
        method: str,
        path: str,
        content: bytes | None,
        headers: dict[str, str] | None,
        *,
        params: Mapping[str, Any] | None = None,
    ) -> httpx.Response:
        if content is not None:
            headers = {**(headers or {}), "Content-Type": "application/json"}
        if self._http.is_closed:  # httpx would raise a bare RuntimeError
            raise ClientClosed(f"{self!r} is closed: make a new Client")
        try:
            return self._http.request(method, path, content=content, params=params, headers=headers)
        except httpx.HTTPError as exc:  # unreachable, timed out, or an answer httpx cannot read
            raise ServiceUnavailable(f"{self.base_url}: {type(exc).__name__}: {exc}") from exc
        except RuntimeError:
            if self._http.is_closed:  # closed by another thread meanwhile
                raise ClientClosed(f"{self!r} is closed: make a new Client") from None
            raise

    def _read(self, response: httpx.Response, result: TypeAdapter[_RESULT]) -> _RESULT:
        if response.is_success:
            try:
                return result.validate_json(response.content)
            except ValidationError:
                raise ServiceUnavailable(self._odd(response)) from None
        raise self._error(response)

    def _error(self, response: httpx.Response) -> EngramError:
        """The EngramError a non-2xx answer stands for: by its code, else by its status."""
        try:
            body = response.json()
            code, message = body["error"], body["message"]
            if not (isinstance(code, str) and isinstance(message, str)):
                raise TypeError
        except (ValueError, KeyError, TypeError, RecursionError):  # RecursionError: nested too deeply
            return ServiceUnavailable(self._odd(response))  # not an Engram service: a proxy, a wrong URL
        cls = _BY_CODE.get(code) or _BY_STATUS.get(response.status_code, EngramError)
        if issubclass(cls, NotFound):
            found = _not_found(message)
            # A 404 that names no row is a route the service lacks: a wrong base_url, or an older server.
            return found or ServiceUnavailable(self._odd(response) + " (no such route: is base_url right?)")
        error = cls(message)
        if cls.code != code:  # e.g. "forbidden" or "internal_error": keep the service's own code
            error.code = code
        return error

    def _odd(self, response: httpx.Response) -> str:
        return (
            f"{self.base_url} did not answer as an Engram service: HTTP {response.status_code} "
            f"to {response.request.method} {response.request.url.path}"
        )
