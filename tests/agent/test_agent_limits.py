"""What a hostile or runaway LLM cannot do to a chat: crash it, flood the store through one reply,
forget what it was never shown, or leave the chat stuck for good."""

from __future__ import annotations

import json
import time

import pytest

from engram.agent.agent import ASSISTANT_CONTEXT_CHARS, HISTORY_CHARS, NO_ANSWER
from engram.consolidation.llm import LLMClient, LLMOutputError
from engram.errors import ConfigError, InvalidInput
from engram.models import SemanticMemory
from engram.settings import DEFAULT_AGENT_TURN_TIMEOUT_S, EngramSettings, load_settings
from tests.agent.conftest import NESTED, calls, last_tool_results, say, tool_call
from tests.agent.test_agent import profile_ids


def test_deeply_nested_json_from_the_llm_is_malformed_output(make_agent, fake_chat):
    agent, _eng = make_agent()
    fake_chat.script(
        calls(tool_call("recall_memory", NESTED, "c1")),  # the arguments
        say("Answered after a bad call."),
        lambda body: (200, NESTED),  # the whole response body
        say("Back."),
    )
    first = agent.respond("hello")
    assert first.reply == "Answered after a bad call." and first.error is None
    (error,) = last_tool_results(fake_chat.requests[1])
    assert error["error"] == "invalid_tool_call" and "nested too deeply" in error["message"]

    broken = agent.respond("still there?")
    assert broken.reply == NO_ANSWER and "unexpected chat-completions response" in broken.error
    assert agent.respond("ok").reply == "Back."

    llm = LLMClient(fake_chat.url, "test-model", max_retries=0)  # consolidation's JSON mode
    fake_chat.script(say(NESTED))
    try:
        with pytest.raises(LLMOutputError, match=r"not valid JSON \(for the semantic memory\)"):
            llm.complete_json("system", "user", SemanticMemory)
    finally:
        llm.close()


def test_an_unexpected_exception_in_the_model_round_is_a_failed_turn(make_agent, fake_chat, monkeypatch):
    agent, _eng = make_agent()
    fake_chat.script(say("First answer."))
    agent.respond("hello")

    def broken(*args, **kwargs):
        raise RuntimeError("a bug of ours")

    monkeypatch.setattr(agent.llm, "chat", broken)
    result = agent.respond("are you there?")
    # The exception's text goes to the log, never to the user (issue 26, item 6).
    assert result.reply == NO_ANSWER and result.error == "the turn failed; the server log has the details"
    assert result.episode.metadata == {"assistant_context": "First answer."}  # stored before the failure
    monkeypatch.undo()
    fake_chat.script(say("Yes."))
    assert agent.respond("hello?").episode.metadata == {}  # the failed turn left no reply as context


def test_tool_calls_per_round_are_capped(make_agent, fake_chat):
    agent, eng = make_agent()
    writes = [tool_call("write_memory", {"text": f"Sarah owns sensor {i}"}, f"c{i}") for i in range(10)]
    fake_chat.script(calls(*writes), say("Stored what I could."))
    result = agent.respond("I have ten sensors")

    results = last_tool_results(fake_chat.requests[1])
    assert [r["tool_call_id"] for r in results] == [f"c{i}" for i in range(10)]  # every call answered
    assert all("stored" in r for r in results[:8])
    assert [r["error"] for r in results[8:]] == ["too_many_calls"] * 2
    assert "too many tool calls in one round" in results[8]["message"]
    assert (
        len(result.written) == 8 and [c.error is None for c in result.tool_calls] == [True] * 8 + [False] * 2
    )
    assert len(eng.for_user("sarah").list("semantic")) == 8

    few, eng = make_agent(agent_max_tool_calls=2)
    fake_chat.script(calls(*writes[:3]), say("ok"))
    assert len(few.respond("three sensors").written) == 2


def test_agent_writes_are_marked_as_the_agents(make_agent, fake_chat):
    agent, eng = make_agent()
    fact = {"text": "Sarah owns a Lumio Hub v2"}
    playbook = {"text": "reset the hub", "memory_type": "procedural", "name": "hub reset", "steps": []}
    fake_chat.script(
        calls(tool_call("write_memory", fact, "c1"), tool_call("write_memory", playbook, "c2")), say("ok")
    )
    result = agent.respond("I have a Lumio Hub v2")
    assert [m.metadata for m in result.written] == [{"source": "agent"}] * 2
    mem = eng.for_user("sarah")
    assert [m.metadata for m in mem.list("semantic") + mem.list("procedural")] == [{"source": "agent"}] * 2
    assert result.episode.metadata == {}  # what the user said is not marked


def test_forget_takes_only_ids_shown_this_turn(make_agent, fake_chat):
    agent, eng = make_agent(agent_recall_k=1, agent_profile_facts=1)
    mem = eng.for_user("sarah")
    rows = [
        mem.write("Sarah lives in Bristol"),
        mem.write("Sarah's router is a Fritz!Box 7590"),
        mem.write("Sarah owns a Lumio Hub v2"),  # the newest: the profile's one fact
    ]
    seen = {}

    def first(body):  # forget an id never shown, and each id shown (the profile, the pre-recall hit)
        shown = set(profile_ids(body)) | {h["id"] for h in last_tool_results(body)[0]["hits"]}
        unshown = [r for r in rows if r.id not in shown]
        seen.update(shown=shown, hidden=unshown[0], untouched=unshown[1:])
        forgets = [tool_call("forget_memory", {"memory_id": i}, f"f{n}") for n, i in enumerate(sorted(shown))]
        return {"tool_calls": [tool_call("forget_memory", {"memory_id": unshown[0].id}, "bad"), *forgets]}

    def second(body):  # the refused id is now recalled, so shown; and a row is written this turn
        results = last_tool_results(body)
        assert results[0]["error"] == "not_shown" and "forgotten" not in results[0]
        assert all("forgotten" in r for r in results[1:])
        recall = tool_call("recall_memory", {"query": seen["hidden"].text, "k": 1}, "r")
        write = tool_call("write_memory", {"text": "Sarah has a cat"}, "w")
        return {"tool_calls": [recall, write]}

    def third(body):
        recalled, written = last_tool_results(body)
        assert recalled["hits"][0]["id"] == seen["hidden"].id
        ids = (seen["hidden"].id, written["stored"]["id"])
        return {
            "tool_calls": [tool_call("forget_memory", {"memory_id": i}, f"g{n}") for n, i in enumerate(ids)]
        }

    fake_chat.script(first, second, third, say("Forgotten."))
    result = agent.respond("please forget what you know about me")
    assert result.reply == "Forgotten." and len(result.forgotten) == len(seen["shown"]) + 2
    assert [c.error for c in result.tool_calls if c.error] == [
        f"not_shown: forget_memory takes only an id shown this turn; {seen['hidden'].id!r} was not. "
        "Recall the memory first, and forget it only if the user asked for exactly that one"
    ]
    assert [m.id for m in mem.list("semantic")] == [r.id for r in seen["untouched"]]
    texts = {r.id: r.text for r in rows} | {w.id: w.text for w in result.written}
    assert result.texts == {stone.id: texts[stone.id] for stone in result.forgotten}  # read before forgetting


def test_chat_requests_carry_max_tokens(make_agent, fake_chat):
    agent, _ = make_agent()
    fake_chat.script(calls(tool_call("recall_memory", {"query": "hub"})), say("ok"))
    agent.respond("hello")
    assert [r["max_tokens"] for r in fake_chat.requests] == [1024, 1024]
    small, _ = make_agent(agent_max_tokens=77)
    fake_chat.script(say("ok"))
    small.respond("hello")
    assert fake_chat.requests[-1]["max_tokens"] == 77


def history_of(body):
    """The earlier exchanges a request carries: the messages between the system prompt and this turn's
    message (followed by the pre-recall call and its result)."""
    return [(m["role"], m["content"]) for m in body["messages"][1:-3]]


def test_the_history_has_a_character_budget_oldest_exchanges_dropped_first(make_agent, fake_chat):
    agent, _ = make_agent()
    quarter = HISTORY_CHARS // 4 - 10
    exchanges = [(f"{i} " + "m" * quarter, f"{i} " + "r" * quarter) for i in range(3)]
    fake_chat.script(*(say(reply) for _, reply in exchanges), say("ok"))
    for message, _ in exchanges:
        agent.respond(message)
    agent.respond("what now?")

    history = history_of(fake_chat.requests[-1])
    assert history == [r for m, reply in exchanges[1:] for r in (("user", m), ("assistant", reply))]
    assert sum(len(text) for _, text in history) <= HISTORY_CHARS
    assert len(history_of(fake_chat.requests[2])) == 4  # two exchanges fit

    fake_chat.script(say("x" * (HISTORY_CHARS + 1)), say("ok"))  # too long even on its own
    agent.respond("tell me everything")
    agent.respond("and now?")
    assert history_of(fake_chat.requests[-1]) == []


def test_the_previous_reply_is_cut_before_it_is_stored_as_context(make_agent, fake_chat):
    agent, eng = make_agent()
    fake_chat.script(say("long answer " * 2000), say("ok"))
    agent.respond("explain everything")
    context = agent.respond("thanks").episode.metadata["assistant_context"]
    assert len(context) == ASSISTANT_CONTEXT_CHARS and context.startswith("long answer long answer")
    assert context.endswith("…")
    stored = eng.for_user("sarah").list("episodic")[0].metadata["assistant_context"]
    assert stored == context


def test_a_failed_turn_cannot_leave_the_chat_stuck(make_agent, fake_chat):
    agent, _eng = make_agent(max_text_chars=500)
    fake_chat.script(say("First answer."))
    agent.respond("hello")
    with pytest.raises(InvalidInput):
        agent.respond("x" * 501)  # not stored: the turn failed before the model was called
    fake_chat.script(say("Second answer."))
    assert agent.respond("hello again").episode.metadata == {}  # the reply state was reset

    # The LLM refusing the request (a context too long for it) drops the history: the next turn goes.
    fake_chat.script(lambda body: (400, json.dumps({"error": "context length exceeded"})), say("Back."))
    refused = agent.respond("and?")
    assert refused.reply == NO_ANSWER and "400" in refused.error
    assert agent.respond("still there?").reply == "Back."
    assert history_of(fake_chat.requests[-1]) == []


def test_a_turn_has_its_own_deadline_whatever_consolidations_llm_settings(make_agent, fake_chat):
    """The agent used consolidation's settings (60 s a call, 3 retries): several slow rounds kept a person
    waiting ~20 minutes for the fallback. agent_turn_timeout_s bounds the turn's model calls together."""
    agent, eng = make_agent(agent_turn_timeout_s=1.5, llm_timeout_s=60, llm_max_retries=3)

    def slow_tool_round(body):
        time.sleep(0.8)
        return {"tool_calls": [tool_call("recall_memory", {"query": "hub"}, "r1")]}

    def slower(body):
        time.sleep(4)
        return {"content": "too late"}

    fake_chat.script(slow_tool_round, slower)
    started = time.monotonic()
    result = agent.respond("my hub froze")
    took = time.monotonic() - started
    assert result.reply == NO_ANSWER and result.error is not None and "timed out" in result.error.lower()
    assert "the turn's time ran out: raise ENGRAM_AGENT_TURN_TIMEOUT_S" in result.error
    assert result.tool_rounds == 1  # the first round ran; the second outlasted what was left
    assert took < 3.0, took  # the deadline, the local recall and the models' start, never a retry
    assert len(fake_chat.requests) == 2  # no retry started that could not finish in time
    assert [m.text for m in eng.for_user("sarah").list("episodic")] == ["my hub froze"]  # stored first

    fake_chat.script(say("Back."))  # the next turn has a deadline of its own
    assert agent.respond("hello?").reply == "Back."


def test_the_turn_timeout_is_a_setting(monkeypatch):
    monkeypatch.setenv("ENGRAM_AGENT_TURN_TIMEOUT_S", "45")
    assert load_settings().agent_turn_timeout_s == 45
    assert EngramSettings.defaults().agent_turn_timeout_s == DEFAULT_AGENT_TURN_TIMEOUT_S
    monkeypatch.setenv("ENGRAM_AGENT_TURN_TIMEOUT_S", "0")
    with pytest.raises(ConfigError, match="ENGRAM_AGENT_TURN_TIMEOUT_S"):
        load_settings()
