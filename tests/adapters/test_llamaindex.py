"""EngramMemoryBlock inside LlamaIndex's own ``Memory`` (its short-term buffer flushing into the block, the
block's text in the memory it hands a model) and EngramRetriever, over a real Engram."""

from __future__ import annotations

import asyncio

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.memory import Memory
from sqlalchemy.ext.asyncio import create_async_engine

from engram import Client, Engram, EpisodicMemory
from engram.adapters.llamaindex import EngramMemoryBlock, EngramRetriever


def test_memory_block_in_llamaindex_memory(eng: Engram):
    sarah = eng.for_user("sarah")
    sarah.write("Sarah is allergic to peanuts", fact_type="constraint")
    block = EngramMemoryBlock(memory=sarah, k=3)

    async def run() -> list[ChatMessage]:
        engine = create_async_engine("sqlite+aiosqlite:///:memory:")  # LlamaIndex's own chat store
        # a small buffer, so LlamaIndex flushes older messages into the block as the chat goes on
        memory = Memory.from_defaults(
            session_id="chat-1",
            token_limit=50,
            chat_history_token_ratio=0.5,
            token_flush_size=10,
            memory_blocks=[block],
            async_engine=engine,
        )
        try:
            for role, text in [
                (MessageRole.USER, "I'm planning a dinner party on Saturday"),
                (MessageRole.ASSISTANT, "How many guests are coming?"),
                (MessageRole.USER, "eight of us, mostly colleagues from work"),
                (MessageRole.ASSISTANT, "Any dietary restrictions to plan for?"),
                (MessageRole.USER, "can you suggest a dessert with nuts for me?"),
                (MessageRole.ASSISTANT, "A pecan tart would suit eight people."),
                (MessageRole.USER, "sounds good, what else for dessert?"),
            ]:
                await memory.aput(ChatMessage(role=role, content=text))
            return await memory.aget()
        finally:
            await engine.dispose()

    messages = asyncio.run(run())
    turns = sorted(sarah.list("episodic"), key=lambda t: t.created_at)
    # the older turns were flushed into Engram, each with the reply it answered; the newest stay short-term
    assert [(t.text, t.metadata) for t in turns] == [
        ("I'm planning a dinner party on Saturday", {}),
        ("eight of us, mostly colleagues from work", {"assistant_context": "How many guests are coming?"}),
        (
            "can you suggest a dessert with nuts for me?",
            {"assistant_context": "Any dietary restrictions to plan for?"},
        ),
    ]
    assert all(isinstance(t, EpisodicMemory) and t.session_id == "chat-1" for t in turns)
    system = messages[0]
    assert system.role == MessageRole.SYSTEM
    assert "<engram>" in (system.content or "") and "Sarah is allergic to peanuts" in (system.content or "")
    assert messages[-1].content == "sounds good, what else for dessert?"


def test_memory_block_needs_a_user_message(eng: Engram):
    eng.for_user("sarah").write("Sarah is allergic to peanuts")
    block = EngramMemoryBlock(memory=eng.for_user("sarah"))
    assistant_only = [ChatMessage(role=MessageRole.ASSISTANT, content="hello, how can I help?")]
    assert asyncio.run(block.aget(assistant_only)) == ""
    assert asyncio.run(block.aget([])) == ""
    asyncio.run(block.aput([ChatMessage(role=MessageRole.ASSISTANT, content="only a reply")]))
    assert eng.for_user("sarah").list("episodic") == []  # a reply alone is no turn


def test_retriever_returns_nodes(eng: Engram, sarah_client: Client):
    fact = sarah_client.write("Sarah's passport expires in June")
    eng.for_user("bob").write("Bob's passport expired last year")
    retriever = EngramRetriever(sarah_client, k=3)
    nodes = retriever.retrieve("when does her passport expire?")
    assert (
        nodes[0].node.node_id == fact.id and nodes[0].node.get_content() == "Sarah's passport expires in June"
    )
    assert nodes[0].score is not None and nodes[0].node.metadata["memory_type"] == "semantic"
    assert all("Bob" not in n.node.get_content() for n in nodes)
    again = asyncio.run(retriever.aretrieve("when does her passport expire?"))
    assert [n.node.node_id for n in again] == [n.node.node_id for n in nodes]
    sarah_client.write(
        "", memory_type="procedural", name="Renew a passport", steps=[{"order": 1, "instruction": "book"}]
    )
    playbook = EngramRetriever(sarah_client, memory_types=["procedural"]).retrieve(
        "how do I renew my passport?"
    )
    assert playbook[0].node.get_content() == "Renew a passport\n1. book"  # not its empty text
