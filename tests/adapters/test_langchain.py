"""EngramRetriever and EngramChatMessageHistory through LangChain's own interfaces (invoke, batch,
ainvoke; the history's sync and async methods), over a real Engram, embedded and over REST."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from engram import Client, Engram, EpisodicMemory, InvalidInput
from engram.adapters.langchain import EngramChatMessageHistory, EngramRetriever


def test_retriever_returns_hits_as_documents(eng: Engram):
    sarah = eng.for_user("sarah")
    moved = (datetime.now(UTC) - timedelta(days=2)).replace(microsecond=0)
    turn = sarah.remember_turn("we moved to Edinburgh last week", at=moved)
    sarah.write("Sarah is allergic to peanuts", fact_type="constraint")
    eng.for_user("bob").write("Bob lives in Edinburgh too")
    retriever = EngramRetriever(memory=sarah, k=2)
    docs = retriever.invoke("which city did we move to?")
    assert docs[0].page_content == "we moved to Edinburgh last week"
    meta = docs[0].metadata
    assert (meta["id"], meta["memory_type"], meta["rank"]) == (turn.id, "episodic", 1)
    assert meta["event_time"] == moved.isoformat()
    assert isinstance(meta["score"], float) and 0 <= meta["confidence"] <= 1
    assert all("Bob" not in d.page_content for d in docs)
    facts_only = EngramRetriever(memory=sarah, memory_types=["semantic"])
    assert [d.page_content for d in facts_only.invoke("food allergy")] == ["Sarah is allergic to peanuts"]
    assert EngramRetriever(memory=sarah, min_confidence=1.0).invoke("the weather on Mars") == []
    batched = retriever.batch(["which city did we move to?", "what can't she eat?"])
    assert batched[0][0].metadata["id"] == turn.id
    assert batched[1][0].page_content == "Sarah is allergic to peanuts"
    assert (
        asyncio.run(retriever.ainvoke("what can't she eat?"))[0].page_content
        == "Sarah is allergic to peanuts"
    )
    with pytest.raises(InvalidInput):
        EngramRetriever(memory=sarah, k=0).invoke("anything")
    # a playbook reads as its name, trigger and steps, not its empty text (a newcomer's walk)
    steps = [
        {"order": 2, "instruction": "add it again in the app"},
        {"order": 1, "instruction": "hold reset"},
    ]
    sarah.write(
        "", memory_type="procedural", name="Re-pair a sensor", trigger_text="a sensor is offline", steps=steps
    )
    (doc,) = EngramRetriever(memory=sarah, memory_types=["procedural"]).invoke("my sensor is offline")
    assert (
        doc.page_content
        == "Re-pair a sensor (when a sensor is offline)\n1. hold reset\n2. add it again in the app"
    )


def test_retriever_over_the_rest_client(eng: Engram, sarah_client: Client):
    sarah_client.write("Sarah's favourite band is Mogwai")
    docs = EngramRetriever(memory=sarah_client).invoke("which band does she like?")
    assert docs[0].page_content == "Sarah's favourite band is Mogwai"
    assert docs[0].metadata["memory_type"] == "semantic"


def test_chat_history_stores_each_user_turn(eng: Engram):
    sarah = eng.for_user("sarah")
    history = EngramChatMessageHistory(sarah, session_id="chat-1")
    history.add_messages(
        [
            SystemMessage("you are a travel agent"),
            HumanMessage("I want to fly to Lisbon in May"),
            AIMessage("Window or aisle?"),
            HumanMessage("window, always"),
        ]
    )
    history.add_ai_message("Noted: a window seat to Lisbon.")
    turns = sorted(sarah.list("episodic"), key=lambda t: t.created_at)
    assert [t.text for t in turns] == ["I want to fly to Lisbon in May", "window, always"]
    assert all(isinstance(t, EpisodicMemory) and t.session_id == "chat-1" for t in turns)
    assert turns[1].metadata == {"assistant_context": "Window or aisle?"}
    assert [(type(m).__name__, m.content) for m in history.messages] == [
        ("HumanMessage", "I want to fly to Lisbon in May"),
        ("AIMessage", "Window or aisle?"),
        ("HumanMessage", "window, always"),
        ("AIMessage", "Noted: a window seat to Lisbon."),
    ]
    # every turn is searchable at once, with the question it answered
    hit = sarah.recall("aisle", k=1)[0]  # a word only of the reply it answered
    assert hit.memory.id == turns[1].id
    # another session of the same user is kept apart, and clear forgets only this one
    other = EngramChatMessageHistory(sarah, session_id="chat-2")
    other.add_user_message("cancel my gym membership")
    assert [m.content for m in other.messages] == ["cancel my gym membership"]
    history.clear()
    assert history.messages == []
    assert [t.text for t in sarah.list("episodic")] == ["cancel my gym membership"]
    with pytest.raises(InvalidInput):
        other.add_user_message("   ")
    assert len(sarah.list("episodic")) == 1


def test_chat_history_async_over_the_rest_client(eng: Engram, sarah_client: Client):
    """BaseChatMessageHistory's async variants (aadd_messages, aget_messages, aclear) over REST, a
    function standing in for the chat model."""

    def model(messages: list[BaseMessage]) -> AIMessage:
        return AIMessage(f"you have said {sum(isinstance(m, HumanMessage) for m in messages)} thing(s)")

    history = EngramChatMessageHistory(sarah_client, session_id="s1")

    async def chat(text: str) -> str:
        await history.aadd_messages([HumanMessage(text)])
        reply = model(await history.aget_messages())
        await history.aadd_messages([reply])
        return str(reply.content)

    async def run() -> None:
        assert await chat("hello") == "you have said 1 thing(s)"
        assert await chat("I need a new passport") == "you have said 2 thing(s)"
        turns = eng.for_user("sarah").list("episodic")
        passport = next(t for t in turns if t.text == "I need a new passport")
        assert passport.metadata == {"assistant_context": "you have said 1 thing(s)"}
        await history.aclear()
        assert await history.aget_messages() == []

    asyncio.run(run())
    assert eng.for_user("sarah").list("episodic") == []


@pytest.mark.filterwarnings("ignore:RunnableWithMessageHistory is deprecated")
def test_a_history_made_per_call_keeps_the_assistants_replies(eng: Engram):
    """LangChain's RunnableWithMessageHistory (deprecated in langchain-core 1.x, still in wide use)
    builds a history per call from a factory: a reply held in the object was lost, so the model never
    saw its own answers and no turn kept what it answered (an outside review)."""
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
    from langchain_core.runnables.history import RunnableWithMessageHistory

    sarah = eng.for_user("sarah")
    seen: list[list[tuple[str, str]]] = []

    class Model(FakeListChatModel):
        def _call(self, messages, *args, **kwargs):  # type: ignore[no-untyped-def]
            seen.append([(type(m).__name__, str(m.content)) for m in messages])
            return super()._call(messages, *args, **kwargs)

    prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{input}")])
    chain = RunnableWithMessageHistory(
        prompt | Model(responses=["Window or aisle?", "Noted: window.", "A window seat."]),
        lambda session_id: EngramChatMessageHistory(sarah, session_id=session_id),
        input_messages_key="input",
        history_messages_key="history",
    )
    for text in ["I'm flying to Lisbon", "window, always", "what seat do I like?"]:
        chain.invoke({"input": text}, config={"configurable": {"session_id": "trip"}})
    assert seen[-1] == [
        ("HumanMessage", "I'm flying to Lisbon"),
        ("AIMessage", "Window or aisle?"),
        ("HumanMessage", "window, always"),
        ("AIMessage", "Noted: window."),
        ("HumanMessage", "what seat do I like?"),
    ]
    said = {t.text: t.metadata.get("assistant_context") for t in sarah.list("episodic")}
    assert said["window, always"] == "Window or aisle?"
    # an image alone is not stored; a blank text is refused before anything of the batch is
    image = HumanMessage(content=[{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}])
    edge = EngramChatMessageHistory(sarah, session_id="edge")
    edge.add_messages([HumanMessage("first"), image, HumanMessage("third")])
    with pytest.raises(InvalidInput):
        edge.add_messages([HumanMessage("fourth"), HumanMessage("  ")])
    assert [m.content for m in edge.messages] == ["first", "third"]


def test_a_held_reply_stays_in_its_store_and_is_clipped(make_engram):
    """The held reply is per store (two stores of one process may both have a "sarah"), and clipped as
    the agent clips it: a reply past the metadata limit made every later turn of the session fail."""
    first, second = make_engram("first.db"), make_engram("second.db")
    mine = EngramChatMessageHistory(first.for_user("sarah"), session_id="s")
    theirs = EngramChatMessageHistory(second.for_user("sarah"), session_id="s")
    mine.add_messages([AIMessage("Got it, your PIN 1234 is saved. " + "x" * 40_000)])
    theirs.add_messages([HumanMessage("hello")])
    assert second.for_user("sarah").list("episodic")[0].metadata == {}  # nothing of the other store
    mine.add_messages([HumanMessage("thanks")])
    (turn,) = first.for_user("sarah").list("episodic")
    assert len(turn.metadata["assistant_context"]) == 2_000
