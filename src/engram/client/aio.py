"""``engram.AsyncClient``: ``engram.Client`` for asyncio, over ``httpx.AsyncClient``.

::

    from engram import AsyncClient

    async with AsyncClient("http://127.0.0.1:8765", "egk_...") as mem:
        await mem.remember_turn("we moved to Edinburgh last week!")
        for hit in await mem.recall("where do I live?"):
            print(hit.rank, hit.memory.text, hit.explain)

The same verbs as ``Client`` (and ``UserMemory``), with the same signatures, results and errors, each a
coroutine: both clients run the same plans (engram.client._core), so they send the same requests and
read the same answers. ``user_id`` is a coroutine here (``await mem.user_id()``): asking the service
cannot hide behind a property. One client per event loop; ``aclose()`` or ``async with`` closes it.
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

__all__ = ["AsyncClient"]

_RESULT = TypeVar("_RESULT")


class AsyncClient(ClientCore):
    """One user's memory in an Engram service, over its REST API, for asyncio: ``Client``'s verbs, awaited.

    ``base_url`` and ``api_key`` as for ``Client``. One connection pool, used from one event loop; close
    it with ``aclose()`` or use the client as an async context manager.
    """

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 30.0) -> None:
        super().__init__(base_url, api_key, timeout=timeout)
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=self._headers, timeout=self._timeout)
        self._user_id: str | None = None

    async def user_id(self) -> str:
        """The user whose memory the key opens (asked of the service once)."""
        if self._user_id is None:
            self._user_id = await self._run(self._me())
        return self._user_id

    async def aclose(self) -> None:
        """Close the connection pool; the client cannot be used afterwards."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # -- the UserMemory API ----------------------------------------------------------------------
    async def remember_turn(
        self,
        text: str,
        at: datetime | None = None,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> EpisodicMemory:
        """As ``Client.remember_turn``."""
        return await self._run(self._remember_turn(text, at, session_id, metadata))

    async def write(
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
        """As ``Client.write``."""
        return await self._run(
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
    async def recall(
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
    async def recall(
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

    async def recall(
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
        """As ``Client.recall``."""
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
        return await self._run(plan)

    async def get(self, memory_id: str) -> Memory:
        """As ``Client.get``."""
        return await self._run(self._get(memory_id))

    async def forget(self, memory_id: str, *, revive_retracted: bool = False) -> Tombstone:
        """As ``Client.forget``."""
        return await self._run(self._forget(memory_id, revive_retracted))

    async def record_outcome(self, playbook_id: str, success: bool) -> ProceduralMemory:
        """As ``Client.record_outcome``."""
        return await self._run(self._record_outcome(playbook_id, success))

    async def history(self, memory_id: str) -> builtins.list[Memory]:
        """As ``Client.history``."""
        return await self._run(self._history(memory_id))

    async def list(
        self,
        memory_type: MemoryType,
        *,
        include_superseded: bool = False,
        limit: int = 50,
        offset: int = 0,
    ) -> builtins.list[Memory]:
        """As ``Client.list``."""
        return await self._run(self._list(memory_type, include_superseded, limit, offset))

    async def import_json(self, document: Mapping[str, Any], *, progress: bool = False) -> dict[str, Any]:
        """As ``Client.import_json``."""
        return await self._run(self._import_json(document))

    # -- HTTP ------------------------------------------------------------------------------------
    async def _run(self, plan: Plan[_RESULT]) -> _RESULT:
        """Send each request the plan asks for, hand it the answer; its result."""
        try:
            request = next(plan)
            while True:
                request = plan.send(await self._send(request))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def _send(self, request: Request) -> httpx.Response:
        if self._http.is_closed:  # httpx would raise a bare RuntimeError
            raise self._closed()
        try:
            return await self._http.request(
                request.method,
                request.path,
                content=request.content,
                params=request.params,
                headers=request.send_headers(),
            )
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from exc
        except RuntimeError:
            if self._http.is_closed:  # closed by another task meanwhile
                raise self._closed() from None
            raise
