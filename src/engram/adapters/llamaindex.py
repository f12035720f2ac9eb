"""LlamaIndex over Engram (``pip install -e '.[llamaindex]'``): ``EngramMemoryBlock``, a long-term
memory block for ``llama_index.core.memory.Memory``, and ``EngramRetriever``, recall as nodes.

::

    from llama_index.core.memory import Memory
    from engram import Engram
    from engram.adapters.llamaindex import EngramMemoryBlock

    sarah = Engram.open().for_user("sarah")              # or Client(url, key)
    memory = Memory.from_defaults(session_id="chat-1", memory_blocks=[EngramMemoryBlock(memory=sarah)])

See docs/integrations/llamaindex.md.
"""

from __future__ import annotations

import asyncio
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.memory import BaseMemoryBlock
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from pydantic import Field, PrivateAttr

from engram.adapters._handles import UserHandle, readable_text
from engram.models import Hit, MemoryType

__all__ = ["EngramMemoryBlock", "EngramRetriever", "format_hits"]

ASSISTANT_CONTEXT = "assistant_context"  # the metadata key a turn carries the reply it answered in


def format_hits(hits: list[Hit]) -> str:
    """Hits as the lines a model reads: when it happened, then what was said or is known."""
    return "\n".join(
        f"- [{hit.event_time.date().isoformat()}] "
        + readable_text(hit.memory).replace("\n", "\n  ")  # a playbook's steps
        for hit in hits
    )


class EngramMemoryBlock(BaseMemoryBlock[str]):
    """Long-term memory in Engram for LlamaIndex's ``Memory``.

    ``aput`` (the messages ``Memory`` flushes from its short-term buffer) stores each user message
    with ``remember_turn``, in the message's session, with the assistant reply before it as
    ``metadata["assistant_context"]`` (a reply flushed last is held until its turn comes). ``aget``
    recalls with the latest user message (the last ``query_messages`` user messages of the chat make
    the query) and returns the hits as dated lines."""

    name: str = Field(default="engram", description="The name of the memory block.")
    memory: UserHandle = Field(description="One user's Engram memory: a UserMemory or a Client.")
    k: int = Field(default=5, description="How many memories to recall.")
    min_confidence: float | None = Field(default=None, description="Keep only hits this confident.")
    query_messages: int = Field(default=1, ge=1, description="Recent messages that make the query.")
    memory_types: list[MemoryType] | None = Field(default=None, description="Memory types to recall.")
    # per session: the assistant's last flushed reply, which the session's next user turn answers
    _replies: dict[str | None, str] = PrivateAttr(default_factory=dict)

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        recent = [m for m in messages or [] if m.role == MessageRole.USER and (m.content or "").strip()]
        query = "\n".join(m.content or "" for m in recent[-self.query_messages :])
        if not query.strip():
            return ""
        hits = await asyncio.to_thread(
            self.memory.recall,
            query,
            k=self.k,
            memory_types=self.memory_types,
            min_confidence=self.min_confidence,
        )
        return format_hits(hits)

    async def _aput(self, messages: list[ChatMessage]) -> None:
        await asyncio.to_thread(self._remember, messages)

    def _remember(self, messages: list[ChatMessage]) -> None:
        for message in messages:
            text = message.content or ""
            session = message.additional_kwargs.get("session_id")
            session = session if isinstance(session, str) else None
            if message.role == MessageRole.ASSISTANT and text.strip():
                self._replies[session] = text
            elif message.role == MessageRole.USER and text.strip():
                reply = self._replies.pop(session, None)
                self.memory.remember_turn(
                    text, session_id=session, metadata={ASSISTANT_CONTEXT: reply} if reply else None
                )


class EngramRetriever(BaseRetriever):
    """Recall over one user's memory as LlamaIndex nodes: a ``TextNode`` per hit (its id the memory's),
    scored by recall, its metadata the type, confidence, rank and event time."""

    def __init__(
        self,
        memory: UserHandle,
        *,
        k: int = 10,
        memory_types: list[MemoryType] | None = None,
        min_confidence: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.memory = memory
        self.k = k
        self.memory_types = memory_types
        self.min_confidence = min_confidence

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = self.memory.recall(
            query_bundle.query_str,
            k=self.k,
            memory_types=self.memory_types,
            min_confidence=self.min_confidence,
        )
        return [
            NodeWithScore(
                node=TextNode(
                    id_=hit.memory.id,
                    text=readable_text(hit.memory),
                    metadata={
                        "memory_type": hit.memory.memory_type,
                        "confidence": hit.confidence,
                        "rank": hit.rank,
                        "event_time": hit.event_time.isoformat(),
                    },
                ),
                score=hit.score,
            )
            for hit in hits
        ]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return await asyncio.to_thread(self._retrieve, query_bundle)
