"""What each verb of the REST client sends and how it reads the answers, with no I/O of its own.

Each verb is a *plan*: a generator that yields the requests to send and is sent back each response, and
returns the verb's result (or raises the EngramError the service's answer stands for). ``engram.Client``
runs plans over ``httpx.Client``, ``engram.AsyncClient`` over ``httpx.AsyncClient``: what is sent, the
paging of long lists, the polling of import jobs and the mapping of errors exist once, so the two
clients cannot drift apart.
"""

from __future__ import annotations

import hashlib
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

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
from engram.limits import MAX_SERVICE_RECALL_K
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
from engram.recall_filter import MetadataValue, recall_filter
from engram.retrieval.config import RetrievalConfig
from engram.validation import check_k, check_metadata, check_page, items_of

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


@dataclass(frozen=True)
class Request:
    """One HTTP request a plan asks for."""

    method: str
    path: str
    content: bytes | None = None
    headers: Mapping[str, str] | None = None
    params: Mapping[str, Any] | None = None

    def send_headers(self) -> dict[str, str] | None:
        if self.content is None:
            return None if self.headers is None else dict(self.headers)
        return {**(self.headers or {}), "Content-Type": "application/json"}


# A verb: yields requests, is sent their responses, returns the verb's result.
Plan = Generator[Request, httpx.Response, _RESULT]


class ClientCore:
    """What ``Client`` and ``AsyncClient`` share: the service's address, the key's headers, the plans."""

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 30.0) -> None:
        if not (isinstance(api_key, str) and api_key.isascii() and api_key.isprintable()):
            raise InvalidInput("api_key must be a string of printable ASCII characters (an Engram key)")
        self.base_url = base_url.rstrip("/")
        self._headers = {"Accept": "application/json"}
        if api_key:  # none at all rather than an empty one, which HTTP refuses: the service says 401
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._timeout = httpx.Timeout(timeout)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base_url!r})"

    def _closed(self) -> ClientClosed:
        return ClientClosed(f"{self!r} is closed: make a new {type(self).__name__}")

    def _unreachable(self, exc: httpx.HTTPError) -> ServiceUnavailable:
        """Unreachable, timed out, or an answer httpx cannot read."""
        return ServiceUnavailable(f"{self.base_url}: {type(exc).__name__}: {exc}")

    # -- the plans of the UserMemory verbs ---------------------------------------------------------
    def _me(self) -> Plan[str]:
        return (yield from self._call("GET", "/v1/me", result=_envelopes.ME)).user_id

    def _remember_turn(
        self, text: str, at: datetime | None, session_id: str | None, metadata: Mapping[str, Any] | None
    ) -> Plan[EpisodicMemory]:
        meta = check_metadata(metadata)  # what JSON cannot hold as given is refused, as the handle does
        body = {"text": text, "at": _iso(at), "session_id": session_id, "metadata": meta}
        return (yield from self._call("POST", "/v1/turns", body, result=_envelopes.EPISODE))

    def _write(
        self,
        text: str,
        memory_type: MemoryType,
        fact_type: FactType,
        confidence: float,
        supporting_episode_ids: Sequence[str],
        supersedes_id: str | None,
        contradiction: Contradiction | None,
        valid_from: datetime | None,
        valid_to: datetime | None,
        name: str | None,
        trigger_text: str,
        description: str,
        steps: Iterable[Step | Mapping[str, Any]],
        metadata: Mapping[str, Any] | None,
        created_at: datetime | None,
    ) -> Plan[SemanticMemory | ProceduralMemory]:
        body = {
            "text": text,
            "memory_type": memory_type,
            "fact_type": fact_type,
            "confidence": confidence,
            "supporting_episode_ids": items_of(
                supporting_episode_ids, "supporting_episode_ids", text_is_one=True
            ),
            "supersedes_id": supersedes_id,
            "contradiction": contradiction,
            "valid_from": _iso(valid_from),
            "valid_to": _iso(valid_to),
            "name": name,
            "trigger_text": trigger_text or "",  # the handle takes None for "" too
            "description": description or "",
            "steps": [_step(s) for s in items_of(steps or (), "steps")],
            "metadata": check_metadata(metadata),
            "created_at": _iso(created_at),
        }
        return (yield from self._call("POST", "/v1/memories", body, result=_envelopes.WRITTEN))

    def _recall(
        self,
        query: str,
        k: int,
        memory_types: Iterable[MemoryType] | None,
        include_catalog: bool,
        include_superseded: bool,
        config: RetrievalConfig | None,
        record_use: bool | None,
        as_of: datetime | None,
        min_confidence: float | None,
        view: RecallView,
        session_id: str | None,
        time_from: datetime | None,
        time_to: datetime | None,
        metadata: Mapping[str, MetadataValue] | None,
    ) -> Plan[list[Hit] | list[CompactHit]]:
        if config is not None:
            raise InvalidInput("config is not taken over the REST API: the service recalls with its settings")
        check_recall_options(min_confidence, view)
        check_k(k, MAX_SERVICE_RECALL_K)  # k=5.0 was sent, and taken, where the embedded handle refuses it
        recall_filter(session_id, time_from, time_to, metadata)  # a filter the handle refuses (2**63)
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
            compact = yield from self._call("POST", "/v1/recall", body, result=_envelopes.RECALLED_COMPACT)
            return ShedHits(compact.hits) if compact.shed else compact.hits  # as the embedded handle says it
        full = yield from self._call("POST", "/v1/recall", body, result=_envelopes.RECALLED)
        return ShedHits(full.hits) if full.shed else full.hits

    def _get(self, memory_id: str) -> Plan[Memory]:
        return (yield from self._call("GET", _memory_path(memory_id), result=_envelopes.MEMORY))

    def _forget(self, memory_id: str, revive_retracted: bool) -> Plan[Tombstone]:
        path = _memory_path(memory_id)
        params = {"revive_retracted": "true"} if revive_retracted else None
        return (yield from self._call("DELETE", path, params=params, result=_envelopes.FORGOTTEN)).forgotten

    def _record_outcome(self, playbook_id: str, success: bool) -> Plan[ProceduralMemory]:
        path = _memory_path(playbook_id, "playbooks") + "/outcome"
        return (yield from self._call("POST", path, {"success": success}, result=_envelopes.PLAYBOOK))

    def _history(self, memory_id: str) -> Plan[list[Memory]]:
        path = _memory_path(memory_id) + "/history"
        return (yield from self._call("GET", path, result=_envelopes.LIST)).data

    def _list(
        self, memory_type: MemoryType, include_superseded: bool, limit: int, offset: int
    ) -> Plan[list[Memory]]:
        params = {"type": memory_type, "include_superseded": "true" if include_superseded else "false"}
        if not isinstance(limit, int) or limit <= MAX_PAGE:
            page = {**params, "limit": limit, "offset": offset}
            return (yield from self._call("GET", "/v1/memories", params=page, result=_envelopes.LIST)).data
        check_page(limit, offset)  # the bounds the handle's store enforces, before any request
        rows: list[Memory] = []
        while len(rows) < limit:
            want = min(limit - len(rows), MAX_PAGE)
            page = {**params, "limit": want, "offset": offset + len(rows)}
            got = (yield from self._call("GET", "/v1/memories", params=page, result=_envelopes.LIST)).data
            rows.extend(got)
            if len(got) < want:  # the last page
                break
        return rows

    def _import_json(self, document: Mapping[str, Any]) -> Plan[dict[str, Any]]:
        content = _json(document)
        key = hashlib.sha256(content).hexdigest()
        read = self._timeout.read
        params = None if read is None else {"wait": min(read / 2, 60)}  # answered 202 by then
        post = Request("POST", "/v1/import", content, {"Idempotency-Key": key}, params)
        response = yield post
        # 202: still running, ask again; 404 to a poll: a server process that does not know the job
        # (another worker, a restart), so send the import again, which joins or finishes it there.
        while response.status_code == 202 or (
            response.status_code == 404 and response.request.method == "GET"
        ):
            poll = Request("GET", f"/v1/import/{key}", params=params)
            response = yield (poll if response.status_code == 202 else post)
        try:
            return self._read(response, _envelopes.IMPORTED)
        except ImportFileError:
            raise
        except InvalidInput as exc:  # the service validated the document as the request body
            raise ImportFileError(str(exc)) from None

    # -- requests and answers ----------------------------------------------------------------------
    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        result: TypeAdapter[_RESULT],
        params: Mapping[str, Any] | None = None,
    ) -> Plan[_RESULT]:
        """One request; the parsed result, or the EngramError the service's answer stands for."""
        content = None if body is None else _json(body)
        response = yield Request(method, path, content, params=params)
        return self._read(response, result)

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


def _step(step: object) -> object:
    """A step as JSON sends it: a Step's fields, any mapping as a dict (as the handle takes them)."""
    return step.model_dump() if isinstance(step, Step) else dict(step) if isinstance(step, Mapping) else step
