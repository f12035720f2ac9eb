"""`engram chat`, run as a real subprocess with piped stdin, against the scripted OpenAI-protocol server."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.agent.conftest import say, tool_call

ENGRAM = [sys.executable, "-m", "engram"]


def chat(*args, stdin, home, llm_url=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env.update(ENGRAM_HOME=str(home), ENGRAM_LLM_MAX_RETRIES="0", COLUMNS="200")
    if llm_url:
        env.update(ENGRAM_LLM_BASE_URL=llm_url, ENGRAM_LLM_MODEL="test-model")
    return subprocess.run(
        [*ENGRAM, "chat", *args], input=stdin, capture_output=True, text=True, env=env, timeout=180
    )


def test_engram_chat_shows_what_each_turn_recalled_and_wrote(tmp_path, fake_chat, make_engram):
    store = tmp_path / "chat.db"

    def remember(body):  # the pre-recall of turn 2 found turn 1's message: write a fact from it
        return {"tool_calls": [tool_call("write_memory", {"text": "Sarah's hub shows error E-4012"})]}

    fake_chat.script(
        say("Sorry to hear that. **Which firmware** is it on?"),
        remember,
        say("Thanks, noted the E-4012 error on firmware 3.2."),
    )
    proc = chat(
        "--user",
        "sarah",
        "--store",
        str(store),
        stdin="my hub shows E-4012\nstill E-4012, firmware 3.2\n",
        home=tmp_path,
        llm_url=fake_chat.url,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    out = proc.stdout
    assert "Engram chat · sarah" in out and "model test-model" in out
    assert "Which firmware is it on?" in out  # markdown rendered, not shown raw
    assert "Thanks, noted the E-4012 error on firmware 3.2." in out
    assert "recalled before answering: 1 hit\n" in out and "my hub shows E-4012" in out
    assert "✎ wrote sem_" in out and "Sarah's hub shows error E-4012" in out
    assert out.rstrip().endswith("bye")
    mem = make_engram("chat.db").for_user("sarah")  # the same file, with the session's models
    assert [m.text for m in mem.list("semantic")] == ["Sarah's hub shows error E-4012"]
    assert len(mem.list("episodic")) == 2  # the two messages; the replies are not stored


def test_engram_chat_without_an_llm_is_a_one_line_error(tmp_path):
    proc = chat("--user", "sarah", stdin="hello\n", home=tmp_path)
    assert proc.returncode == 1
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and "engram chat needs an LLM" in lines[0] and "ENGRAM_LLM_BASE_URL" in lines[0]
    assert not (tmp_path / "engram.db").exists()  # nothing opened, nothing created
