"""`engram chat`, run as a real subprocess with piped stdin, against the scripted OpenAI-protocol server."""

from __future__ import annotations

import io
import os
import subprocess
import sys

from rich.console import Console

from engram.agent.chat import run_chat
from engram.consolidation.llm import LLMError
from engram.errors import EngramError
from tests.agent.conftest import NESTED, say, tool_call

ENGRAM = [sys.executable, "-m", "engram"]


def chat(*args, stdin, home, llm_url=None):
    # FORCE_COLOR would make rich write its own escape codes into the pipe.
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_") and k != "FORCE_COLOR"}
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
    assert '✎ stored "Sarah\'s hub shows error E-4012" sem_' in out
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


def test_engram_chat_survives_a_hostile_llm(tmp_path, fake_chat):
    fake_chat.script(
        say("Done.\x1b[2J\x1b]0;pwned\x07\x9b31m [bold]not markup[/bold] [/x] ok"),
        lambda body: (200, NESTED),  # a body too deeply nested to parse
        lambda body: {
            "tool_calls": [tool_call("write_memory", {"text": "Sarah\x1b[2J has \x1b]8;;x\x07a hub"})]
        },
        say("Still here."),
    )
    proc = chat(
        "--user",
        "sarah",
        "--store",
        str(tmp_path / "chat.db"),
        stdin="hello\nagain\nonce more\n",
        home=tmp_path,
        llm_url=fake_chat.url,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    out = proc.stdout
    assert "Traceback" not in proc.stderr + out
    for control in ("\x1b", "\x07", "\x9b"):
        assert control not in out
    assert "Done.[2J]0;pwned31m [bold]not markup[/bold] [/x] ok" in out  # text, not markup
    assert out.count("unexpected chat-completions response") == 1  # one message per failure
    assert "the LLM failed: unexpected chat-completions response" in out
    # the log records went to the chat's log file; only the note that --store named a new store
    assert [line for line in proc.stderr.splitlines() if not line.startswith("note: no store was at")] == []
    assert (
        "agent turn failed: unexpected chat-completions response"
        in (tmp_path / "logs" / "chat.log").read_text()
    )
    assert '✎ stored "Sarah[2J has ]8;;xa hub" sem_' in out  # a stored memory's text
    assert "Still here." in out and out.rstrip().endswith("bye")


def test_error_text_is_never_read_as_markup(make_agent, monkeypatch):
    agent, _ = make_agent()
    failures = iter([EngramError("the store said [/x]"), RuntimeError("a bug [/red]"), None])
    respond = agent.respond

    def failing(message):
        failure = next(failures)
        if failure is not None:
            raise failure
        return respond(message)

    def refused(*args, **kwargs):
        raise LLMError("the LLM said [/x] [bold]")

    monkeypatch.setattr(agent, "respond", failing)
    monkeypatch.setattr(agent.llm, "chat", refused)
    monkeypatch.setattr("sys.stdin", io.StringIO("one\ntwo\nthree\n"))
    console = Console(file=io.StringIO(), width=200)
    run_chat(agent, console, user="sarah", where="here")
    out = console.file.getvalue()
    assert "error: the store said [/x]\n" in out
    assert "error: RuntimeError: a bug [/red]\n" in out
    assert "the LLM failed: the LLM said [/x] [bold]\n" in out
    assert out.rstrip().endswith("bye")
