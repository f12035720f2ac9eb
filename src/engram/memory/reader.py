"""``MemoryReader``: one user's memory, read only (``engram.memory.user`` has the handle that writes).

``list`` methods shadow the builtin inside the class body, so annotations there spell it ``builtins.list``.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from datetime import datetime

from engram.errors import InvalidInput
from engram.memory.engine import Engine
from engram.memory.user import UserMemory
from engram.models import Hit, Memory, MemoryType
from engram.validation import check_types


class MemoryReader:
    """One user's memory, read only: list, get, history and a recall that records no use.

    It has no write method, so whoever holds one (the inspector, for the admin key, which reads no
    user's memories otherwise) can look but never change anything, not even use counts."""

    def __init__(self, engram: Engine, user_id: str) -> None:
        self._memory = UserMemory(engram, user_id)
        self._store = engram.store
        self.user_id = user_id

    def get(self, memory_id: str) -> Memory:
        return self._memory.get(memory_id)

    def present(self, memory_ids: Iterable[str]) -> set[str]:
        """Which of these ids are rows this user can still read (their own, or catalog rows)."""
        return {m.id for m in self._store.fetch(self.user_id, sorted(set(memory_ids)), include_catalog=True)}

    def history(self, memory_id: str) -> builtins.list[Memory]:
        return self._memory.history(memory_id)

    def list(
        self, memory_type: MemoryType, *, include_superseded: bool = False, limit: int = 50, offset: int = 0
    ) -> builtins.list[Memory]:
        return self._memory.list(
            memory_type, include_superseded=include_superseded, limit=limit, offset=offset
        )

    def count(self, memory_type: MemoryType, *, include_superseded: bool = False, limit: int) -> int:
        """How many rows of one type ``list`` could show, counted up to ``limit``, reading none."""
        (checked,) = check_types([memory_type])
        if checked == "catalog":
            raise InvalidInput("count the catalog through the catalog handle")
        return self._store.count_memories(
            self.user_id, checked, include_superseded=include_superseded, limit=limit
        )

    def recall(
        self,
        query: str,
        k: int = 10,
        memory_types: Iterable[MemoryType] | None = None,
        include_catalog: bool = True,
        include_superseded: bool = False,
        as_of: datetime | None = None,
        min_confidence: float | None = None,
    ) -> builtins.list[Hit]:
        return self._memory.recall(
            query,
            k=k,
            memory_types=memory_types,
            include_catalog=include_catalog,
            include_superseded=include_superseded,
            record_use=False,
            as_of=as_of,
            min_confidence=min_confidence,
        )
