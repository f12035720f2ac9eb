"""LangChain over Engram (``pip install -e '.[langchain]'``): ``EngramRetriever`` (recall as
``Document``s) and ``EngramChatMessageHistory`` (a chat history that stores each user turn in Engram).

::

    from engram import Engram
    from engram.adapters.langchain import EngramChatMessageHistory, EngramRetriever

    sarah = Engram.open().for_user("sarah")              # or Client(url, key)
    history = EngramChatMessageHistory(sarah, session_id="chat-1")
    history.add_messages([HumanMessage("I moved to Edinburgh last week")])
    EngramRetriever(memory=sarah, k=5).invoke("where does Sarah live?")

See docs/integrations/langchain.md.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict

from engram.adapters._handles import UserHandle, all_rows, readable_text
from engram.client import Client
from engram.consolidation.prompts import ASSISTANT_CONTEXT_CHARS
from engram.errors import InvalidInput
from engram.models import EpisodicMemory, Hit, MemoryType

__all__ = ["EngramChatMessageHistory", "EngramRetriever", "hit_metadata"]

ASSISTANT_CONTEXT = "assistant_context"  # the metadata key a turn carries the reply it answered in
PENDING_KEPT = 1_000  # conversations of one store whose latest reply this process holds (oldest go first)


class _PendingReplies:
    """The assistant's latest reply per (user, session) of one store until the next user message
    carries it, for the whole process: LangChain's RunnableWithMessageHistory makes a new history object
    per call (its factory), so a reply held in the object was lost before the next turn (an outside
    review). One per store (``_pending``): two stores of one process may have users of the same id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._replies: OrderedDict[tuple[str, str], str] = OrderedDict()

    def get(self, key: tuple[str, str]) -> str | None:
        with self._lock:
            return self._replies.get(key)

    def add(self, key: tuple[str, str], text: str) -> None:
        """Two replies in a row are one reply to the next turn (its last ASSISTANT_CONTEXT_CHARS)."""
        with self._lock:
            held = self._replies.pop(key, None)
            self._replies[key] = (f"{held}\n{text}" if held else text)[-ASSISTANT_CONTEXT_CHARS:]
            while len(self._replies) > PENDING_KEPT:
                self._replies.popitem(last=False)

    def take(self, key: tuple[str, str]) -> str | None:
        with self._lock:
            return self._replies.pop(key, None)

    def put_back(self, key: tuple[str, str], text: str) -> None:
        """A taken reply whose turn could not be stored: it waits for the next one, unless one came."""
        with self._lock:
            self._replies.setdefault(key, text)


_BY_ENGINE: weakref.WeakKeyDictionary[object, _PendingReplies] = weakref.WeakKeyDictionary()
_BY_SERVICE: dict[str, _PendingReplies] = {}
_REGISTRY_LOCK = threading.Lock()


def _pending(memory: UserHandle) -> _PendingReplies:
    """The pending replies of the store ``memory`` opens: its engine, or the service its client calls."""
    with _REGISTRY_LOCK:
        if isinstance(memory, Client):
            return _BY_SERVICE.setdefault(memory.base_url, _PendingReplies())
        engine = memory._engram  # the store's own objects: the handles of one Engram share them
        if engine not in _BY_ENGINE:
            _BY_ENGINE[engine] = _PendingReplies()
        return _BY_ENGINE[engine]


def hit_metadata(hit: Hit) -> dict[str, Any]:
    """What a recalled document says about itself: its id and type, the recall's score, rank and
    calibrated confidence, and its event time (ISO 8601, when what it says happened)."""
    return {
        "id": hit.memory.id,
        "memory_type": hit.memory.memory_type,
        "score": hit.score,
        "confidence": hit.confidence,
        "rank": hit.rank,
        "event_time": hit.event_time.isoformat(),
    }


class EngramRetriever(BaseRetriever):
    """Recall over one user's memory (an embedded ``UserMemory`` or a ``Client``): each hit is a
    ``Document`` whose ``page_content`` is the memory's text (a playbook's name, trigger and steps:
    ``readable_text``) and whose metadata is ``hit_metadata``.
    ``record_use`` is recall's: returned facts count as used unless it is False."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: UserHandle
    k: int = 10
    memory_types: list[MemoryType] | None = None
    include_catalog: bool = True
    min_confidence: float | None = None
    record_use: bool | None = None

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        hits = self.memory.recall(
            query,
            k=self.k,
            memory_types=self.memory_types,
            include_catalog=self.include_catalog,
            min_confidence=self.min_confidence,
            record_use=self.record_use,
        )
        return [Document(page_content=readable_text(hit.memory), metadata=hit_metadata(hit)) for hit in hits]


class EngramChatMessageHistory(BaseChatMessageHistory):
    """One conversation (``session_id``) of one user, kept in Engram.

    Each user message is stored with ``remember_turn`` (in the session, searchable by recall at once);
    the assistant's reply before it travels with it as ``metadata["assistant_context"]``, which is how
    Engram keeps what a turn answered (consolidation reads it, and never turns it into a fact). So
    ``messages`` rebuilds the conversation as reply, turn, reply, turn...; the assistant's latest reply
    is held in this process, by user and session, until the next user message carries it (a history
    made anew per call keeps it). A user message without text (an image alone) and other messages
    (system, tool) are not stored. ``clear`` forgets the session's turns (audit tombstones remain)."""

    def __init__(self, memory: UserHandle, session_id: str) -> None:
        self.memory = memory
        self.session_id = session_id
        self._key = (memory.user_id, session_id)
        self._pending = _pending(memory)

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]  # LangChain declares an attribute
        turns = self._turns()
        turns.sort(key=lambda turn: (turn.timestamp, turn.created_at))
        rebuilt: list[BaseMessage] = []
        for turn in turns:
            reply = turn.metadata.get(ASSISTANT_CONTEXT)
            if isinstance(reply, str) and reply:
                rebuilt.append(AIMessage(content=reply))
            rebuilt.append(HumanMessage(content=turn.text, id=turn.id))
        pending = self._pending.get(self._key)
        if pending is not None:
            rebuilt.append(AIMessage(content=pending))
        return rebuilt

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        said = [m for m in messages if isinstance(m, HumanMessage) and isinstance(m.content, str)]
        if any(not str(m.text).strip() for m in said):  # refused before any is stored, not halfway
            raise InvalidInput("a user message must show some text")
        for message in messages:
            text = str(message.text)
            if isinstance(message, HumanMessage) and text.strip():  # not an image alone
                pending = self._pending.take(self._key)
                metadata = {ASSISTANT_CONTEXT: pending} if pending else None
                try:
                    self.memory.remember_turn(text, session_id=self.session_id, metadata=metadata)
                except BaseException:
                    if pending:  # it goes with the next turn that is stored
                        self._pending.put_back(self._key, pending)
                    raise
            elif isinstance(message, AIMessage) and text.strip():
                self._pending.add(self._key, text)

    def clear(self) -> None:
        for turn in self._turns():
            self.memory.forget(turn.id)
        self._pending.take(self._key)

    def _turns(self) -> list[EpisodicMemory]:
        return [
            row
            for row in all_rows(self.memory, "episodic")
            if isinstance(row, EpisodicMemory) and row.session_id == self.session_id
        ]
