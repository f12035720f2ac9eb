"""The agent and `engram chat --url` through ``engram.Client`` and a running REST service: the handle
Protocol fits both the embedded handle and the client."""

from __future__ import annotations

import json
from datetime import timedelta

from engram import Client
from engram.agent import Agent
from engram.auth import ApiKeys
from engram.interfaces.rest import create_app
from engram.interfaces.rest.background import BackgroundServer
from engram.models import utcnow
from engram.settings import EngramSettings
from tests.agent.conftest import last_tool_results, say, tool_call
from tests.agent.test_chat_cli import chat


def test_the_agent_works_through_a_client_of_the_service(eng, fake_chat):
    mem = eng.for_user("sarah")
    old = mem.write("Sarah lives in Bristol")
    earlier = mem.remember_turn("the hub shows error E-4012 after an update", at=utcnow() - timedelta(days=3))
    key, _ = ApiKeys(eng.store).create("sarah")
    settings = EngramSettings.defaults(llm_base_url=fake_chat.url, llm_model="test-model", llm_max_retries=0)
    message = "E-4012 again, and we moved to Edinburgh"

    def first(body):
        assert mem.list("episodic")[0].text == message  # stored before this call
        (pre,) = last_tool_results(body)
        assert pre["hits"][0]["id"] == earlier.id
        arguments = {"text": "Sarah lives in Edinburgh", "supersedes_id": old.id, "contradiction": "natural"}
        return {"tool_calls": [tool_call("write_memory", arguments)]}

    def second(body):
        (stored,) = last_tool_results(body)
        return {"content": f"Noted [{stored['stored']['id']}]."}

    fake_chat.script(first, second, lambda body: {"content": "ok"})
    app = create_app(eng, ApiKeys(eng.store))
    with (
        BackgroundServer(app) as url,
        Client(url, key) as client,
        Agent.from_settings(client, settings) as agent,
    ):
        assert agent.consolidation is None  # the service's worker consolidates
        result = agent.respond(message)
        agent.respond("thanks")
    assert result.error is None and result.superseded == [old.id]
    (new,) = result.written
    assert [m.id for m in mem.history(old.id)] == [old.id, new.id]
    assert new.supporting_episode_ids == [result.episode.id]
    assert new.metadata == mem.get(new.id).metadata == {"source": "agent"}  # the agent's write, marked
    turns = mem.list("episodic")
    assert turns[0].text == "thanks" and turns[0].metadata == {"assistant_context": f"Noted [{new.id}]."}
    assert len(fake_chat.requests) == 3
    assert json.loads(fake_chat.requests[0]["messages"][2]["tool_calls"][0]["function"]["arguments"]) == {
        "query": message,
        "k": 8,
    }


def test_engram_chat_through_a_running_service(tmp_path, fake_chat, eng):
    keys = ApiKeys(eng.store)
    key, _ = keys.create("sarah")
    mem = eng.for_user("sarah")
    hub, old = mem.write("Sarah's hub is a Nimbus H2"), mem.write("Sarah lives in Bristol")
    fake_chat.script(say("Hello from the service."))
    commands = f"/profile\n/memory which hub\n/forget {old.id}\n"  # the chat's commands, through the Client
    with BackgroundServer(create_app(eng, keys)) as url:
        served = ("--url", url, "--key", key)
        proc = chat(*served, stdin=f"hi there\n{commands}", home=tmp_path, llm_url=fake_chat.url)
        wrong = chat(*served, "--user", "bob", stdin="", home=tmp_path, llm_url=fake_chat.url)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    out = proc.stdout
    assert "Engram chat · sarah · http://127.0.0.1" in out
    assert "Hello from the service." in out
    assert [m.text for m in mem.list("episodic")] == ["hi there"]  # commands are not messages
    profile = out[out.index("/profile") : out.index("/memory")]
    assert "profile: 2 core facts" in profile and f"Sarah lives in Bristol  {old.id}" in profile
    assert f"Sarah's hub is a Nimbus H2  {hub.id}" in out[out.index("/memory") :]
    assert f'✗ forgot "Sarah lives in Bristol" {old.id}' in out
    assert [m.id for m in mem.list("semantic")] == [hub.id]
    assert wrong.returncode == 1 and "the key is sarah's, not bob's" in wrong.stdout


def test_the_largest_recall_k_works_through_a_client(eng, fake_chat):
    """The pre-recall asks for a few more hits than recall_k (the message itself is hidden), never more
    than the REST API takes: at ENGRAM_AGENT_RECALL_K=100 it asked for 101, and every one failed (422)."""
    mem = eng.for_user("sarah")
    mem.write("Sarah's hub is a Nimbus H2")
    key, _ = ApiKeys(eng.store).create("sarah")
    settings = EngramSettings.defaults(
        llm_base_url=fake_chat.url, llm_model="test-model", llm_max_retries=0, agent_recall_k=100
    )
    fake_chat.script(say("ok"))
    with (
        BackgroundServer(create_app(eng, ApiKeys(eng.store))) as url,
        Client(url, key) as client,
        Agent.from_settings(client, settings) as agent,
    ):
        result = agent.respond("which hub do I have?")
    (pre,) = result.recalled
    assert pre.error is None and [h.memory.text for h in pre.hits] == ["Sarah's hub is a Nimbus H2"]
    assert "hits" in last_tool_results(fake_chat.requests[0])[0]
