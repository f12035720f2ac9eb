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
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, TypeVar, overload

import httpx

from engram.client._core import ClientCore, Plan, Request
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
    Step,
    Tombstone,
)
from engram.recall_filter import MetadataValue
from engram.retrieval.config import RetrievalConfig

__all__ = ["Client"]

_RESULT = TypeVar("_RESULT")


class Client(ClientCore):
    """One user's memory in an Engram service (``engram serve``), over its REST API (``/v1``).

    ``base_url`` is where the service answers (``http://127.0.0.1:8765``, or behind a proxy
    ``https://host/engram``); ``api_key`` is a user key (``engram keys create --user U``), which decides
    whose memory this is. One HTTP connection pool per client, safe to share between threads; close it
    with ``close()`` or use the client as a context manager.
    """

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 30.0) -> None:
        super().__init__(base_url, api_key, timeout=timeout)
        self._http = httpx.Client(base_url=self.base_url, headers=self._headers, timeout=self._timeout)
        self._user_id: str | None = None

    @property
    def user_id(self) -> str:
        """The user whose memory the key opens (asked of the service once)."""
        if self._user_id is None:
            self._user_id = self._run(self._me())
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
        return self._run(self._remember_turn(text, at, session_id, metadata))

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
        return self._run(
            self._write(
                text,
                memory_type,
                fact_type,
                confidence,
                supporting_episode_ids,
                supersedes_id,
                contradiction,
                valid_from,
                valid_to,
                name,
                trigger_text,
                description,
                steps,
                metadata,
                created_at,
            )
        )

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
        plan = self._recall(
            query,
            k,
            memory_types,
            include_catalog,
            include_superseded,
            config,
            record_use,
            as_of,
            min_confidence,
            view,
            session_id,
            time_from,
            time_to,
            metadata,
        )
        return self._run(plan)

    def get(self, memory_id: str) -> Memory:
        """One of the user's rows, or a catalog row; NotFound otherwise (also for other users' ids)."""
        return self._run(self._get(memory_id))

    def forget(self, memory_id: str, *, revive_retracted: bool = False) -> Tombstone:
        """Hard-delete one of the user's rows; an audit tombstone without text remains. A fact a harsh
        correction retracted stays retracted when the correction is forgotten, unless
        ``revive_retracted``."""
        return self._run(self._forget(memory_id, revive_retracted))

    def record_outcome(self, playbook_id: str, success: bool) -> ProceduralMemory:
        """Count one use of one of the user's playbooks as a success or a failure (no LLM involved);
        the playbook with its counts after the change. NotFound for another user's playbook."""
        return self._run(self._record_outcome(playbook_id, success))

    def history(self, memory_id: str) -> builtins.list[Memory]:
        """The supersession chain that contains ``memory_id``, oldest first."""
        return self._run(self._history(memory_id))

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
        return self._run(self._list(memory_type, include_superseded, limit, offset))

    def import_json(self, document: Mapping[str, Any], *, progress: bool = False) -> dict[str, Any]:
        """Import a user document (see ``engram.importer``) into the user's memory; an invalid one
        writes nothing (ImportFileError). ``progress`` has no effect: the service does the work.

        The import is sent with an ``Idempotency-Key`` made from the document, so the service runs it
        as a job and this call waits for it however long it takes, in requests that each end well
        within the timeout. The same document imported again (after the call was interrupted, say)
        joins the run still going instead of racing it, and once that has ended writes only what is
        missing: every record is written once."""
        return self._run(self._import_json(document))

    # -- HTTP ------------------------------------------------------------------------------------
    def _run(self, plan: Plan[_RESULT]) -> _RESULT:
        """Send each request the plan asks for, hand it the answer; its result."""
        try:
            request = next(plan)
            while True:
                request = plan.send(self._send(request))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    def _send(self, request: Request) -> httpx.Response:
        if self._http.is_closed:  # httpx would raise a bare RuntimeError
            raise self._closed()
        try:
            return self._http.request(
                request.method,
                request.path,
                content=request.content,
                params=request.params,
                headers=request.send_headers(),
            )
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from exc
        except RuntimeError:
            if self._http.is_closed:  # closed by another thread meanwhile
                raise self._closed() from None
            raise
