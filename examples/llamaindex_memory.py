"""LlamaIndex over Engram: ``EngramMemoryBlock`` as the long-term block of LlamaIndex's ``Memory`` (turns
that leave the short-term buffer are stored in Engram; each ``aget`` recalls what fits the latest user
message), and ``EngramRetriever`` for recall as nodes.

Run it: ``pip install -e '.[llamaindex]' && python examples/llamaindex_memory.py`` (no LLM needed).
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.memory import Memory
from sqlalchemy.ext.asyncio import create_async_engine

from engram import Engram
from engram.adapters.llamaindex import EngramMemoryBlock, EngramRetriever

CHAT = [
    (MessageRole.USER, "I'm hosting a dinner for eight on Saturday"),
    (MessageRole.ASSISTANT, "Lovely! Any dietary needs among the guests?"),
    (MessageRole.USER, "two are vegan, and I can't eat shellfish myself"),
    (MessageRole.ASSISTANT, "Noted. Do you want a starter suggestion?"),
    (MessageRole.USER, "yes, and what main course would suit everyone?"),
]


async def chat(block: EngramMemoryBlock) -> list[ChatMessage]:
    engine = create_async_engine("sqlite+aiosqlite:///:memory:")  # the short-term buffer's store
    # a small short-term buffer, so this short chat already flushes turns into Engram
    memory = Memory.from_defaults(
        session_id="dinner",
        token_limit=60,
        chat_history_token_ratio=0.5,
        token_flush_size=10,
        memory_blocks=[block],
        async_engine=engine,
    )
    try:
        for role, text in CHAT:
            await memory.aput(ChatMessage(role=role, content=text))
        return await memory.aget()  # what a model would be given: the memory block, then recent messages
    finally:
        await engine.dispose()


def main() -> None:
    with tempfile.TemporaryDirectory() as home, Engram.open(str(Path(home) / "engram.db")) as engram:
        sarah = engram.for_user("sarah")
        sarah.write("Sarah's partner Tom doesn't drink alcohol", fact_type="preference")
        messages = asyncio.run(chat(EngramMemoryBlock(memory=sarah, k=3)))
        print("given to the model:")
        for message in messages:
            print(f"  [{message.role.value}] {message.content}")
        print("stored in Engram:", [t.text for t in sarah.list("episodic")])

        nodes = EngramRetriever(sarah, k=2).retrieve("who can't eat shellfish?")
        for node in nodes:
            print(f"{node.node.metadata['memory_type']} {node.node.node_id}: {node.node.get_content()!r}")
        assert "shellfish" in nodes[0].node.get_content()


if __name__ == "__main__":
    main()
