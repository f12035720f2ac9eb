"""`engram chat` in a real terminal (tmux), typed into key by key, against a scripted LLM that stores,
supersedes, then fails (500s, an HTML page) both in the turn and in the background consolidation.

The terminal is the person's: no log line may land in the line being typed, each failure is one
message with the setting to check, a background consolidation's result shows between turns with the
texts it stored and replaced, and the in-chat commands work.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from tests.agent.conftest import FakeChat, last_tool_results, tool_call
from tests.polling import until

HTML = "<!DOCTYPE html><html><head><title>Welcome to nginx!</title></head><body>hello</body></html>"
PROMPT = "you ›"


class Terminal:
    """One tmux session on its own socket, running one command in a 200x50 window."""

    def __init__(self, socket: Path, command: str, env: dict[str, str]) -> None:
        self.socket = socket
        self.env = env
        self.tmux("new-session", "-d", "-s", "chat", "-x", "200", "-y", "50", command)

    def tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-S", str(self.socket), *args], capture_output=True, text=True, env=self.env, check=True
        )
        return done.stdout

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-t", "chat", "-l", text)

    def enter(self, text: str = "") -> None:
        if text:
            self.type(text)
        self.tmux("send-keys", "-t", "chat", "Enter")

    def screen(self) -> str:
        """Everything printed so far, scrollback included, wrapped lines joined."""
        return self.tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "chat")

    def cursor_line(self) -> str:
        """The line the cursor is on: the one being typed."""
        row = int(self.tmux("display-message", "-p", "-t", "chat", "#{cursor_y}"))
        return self.tmux("capture-pane", "-p", "-t", "chat").split("\n")[row]

    def wait_for(self, text: str, times: int = 1, within_s: float = 30.0) -> str:
        if not until(lambda: self.screen().count(text) >= times, within_s):
            raise AssertionError(f"{text!r} not shown {times}x; the screen:\n{self.screen()}")
        return self.screen()

    def close(self) -> None:
        subprocess.run(["tmux", "-S", str(self.socket), "kill-server"], env=self.env, capture_output=True)


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Callable[..., Terminal]]:
    opened: list[Terminal] = []

    def start(*args: str, env: dict[str, str]) -> Terminal:
        # The chat's exit status is printed, and the pane kept, so the end can be read.
        command = f'{shlex.join([sys.executable, "-m", "engram", "chat", *args])}; echo "[exit $?]"; sleep 60'
        term = Terminal(tmp_path / "tmux.sock", command, env)
        opened.append(term)
        return term

    yield start
    for term in opened:
        term.close()


def scripted(fake_chat: FakeChat, chat_steps: list[Any], consolidation_steps: list[Any]) -> None:
    """The agent's requests (with tools) and consolidation's (JSON mode) run in different threads of
    the chat: each takes the next step of its own script."""

    def route(body: dict[str, Any]) -> Any:
        steps = consolidation_steps if "response_format" in body else chat_steps
        return steps.pop(0)(body) if steps else (500, '{"error": "script exhausted"}')

    fake_chat.script(*[route] * 40)


def write_then_supersede(body: dict[str, Any]) -> dict[str, Any]:
    """The second model call of turn 1: supersede the fact the first call stored."""
    (stored,) = last_tool_results(body)
    arguments = {"text": "Sarah's hub runs firmware 3.2", "supersedes_id": stored["stored"]["id"]}
    return {"tool_calls": [tool_call("write_memory", arguments, "call_2")]}


def consolidate_move(body: dict[str, Any]) -> dict[str, Any]:
    """Extraction for turns 1 and 2: a new fact, and the firmware fact superseded."""
    prompt = json.loads(body["messages"][-1]["content"])
    episodes = [e["id"] for e in prompt["episodes"]]
    (firmware,) = [f["id"] for f in prompt["stored_facts"] if f["text"] == "Sarah's hub runs firmware 3.2"]
    extraction = {
        "facts": [{"text": "Sarah lives in Lyon", "confidence": 0.9, "supporting_episode_ids": episodes[1:]}],
        "supersessions": [
            {
                "fact_id": firmware,
                "new_text": "Sarah's hub runs firmware 3.3",
                "supporting_episode_ids": episodes[1:],
            }
        ],
    }
    return {"content": json.dumps(extraction)}


def stored(db: Path, text: str) -> bool:
    """Whether the chat's store holds a row with this text (read beside the running chat)."""
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as connection:
        return connection.execute("SELECT 1 FROM memories WHERE text = ?", (text,)).fetchone() is not None


def say(text: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda body: {"content": text}


def test_engram_chat_in_a_terminal_stays_clean_through_failures(tmp_path, fake_chat, terminal):
    chat_steps = [
        lambda body: {"tool_calls": [tool_call("write_memory", {"text": "Sarah's hub runs firmware 3.1"})]},
        write_then_supersede,
        say("Noted: firmware 3.2."),
        say("Welcome to Lyon!"),
        say("Let me check the update."),
        say("You're welcome."),
        lambda body: (500, '{"error": "overloaded"}'),
        lambda body: time.sleep(1) or (200, HTML),  # while it waits, the retry shows on the status line
        say("A fresh start."),
    ]
    consolidation_steps = [
        consolidate_move,
        lambda body: (503, '{"error": "overloaded"}'),  # a retry, logged while the user types
        lambda body: (200, HTML),
    ]
    scripted(fake_chat, chat_steps, consolidation_steps)
    # The window's size is tmux's 200x50: COLUMNS/LINES from outside (pytest-xdist's workers have 80x24)
    # would make rich wrap the lines the test reads at 80.
    outside = {"FORCE_COLOR", "COLUMNS", "LINES"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_") and k not in outside}
    env.update(
        ENGRAM_HOME=str(tmp_path),
        ENGRAM_LLM_BASE_URL=fake_chat.url,
        ENGRAM_LLM_MODEL="test-model",
        ENGRAM_LLM_MAX_RETRIES="1",
        ENGRAM_CONSOLIDATE_EVERY_EPISODES="2",
    )
    term = terminal("--user", "sarah", "--store", str(tmp_path / "chat.db"), env=env)
    log_file = tmp_path / "logs" / "chat.log"
    screen = term.wait_for(PROMPT)
    assert f"logs: {log_file}" in screen and "/help for commands" in screen

    # Turn 1: the model stores a fact, then replaces it; both shown with their text.
    term.enter("my hub runs firmware 3.1, no wait, 3.2")
    screen = term.wait_for("Noted: firmware 3.2.")
    assert re.search(r'✎ stored "Sarah\'s hub runs firmware 3\.1" sem_', screen)
    replacing = r'3\.2" sem_\S+\n\s+replacing "Sarah\'s hub runs firmware 3\.1" sem_'
    assert re.search(r'✎ stored "Sarah\'s hub runs firmware ' + replacing, screen)

    # Turn 2 makes two waiting turns: consolidation runs in the background while the next line is typed.
    term.enter("we moved to Lyon, and the hub is on firmware 3.3 now")
    term.wait_for("Welcome to Lyon!")
    term.wait_for("consolidating this user's recent turns in the background")
    term.type("is the update done")
    assert until(lambda: stored(tmp_path / "chat.db", "Sarah lives in Lyon"), 30)
    until(lambda: False, 0.5)  # the run reports right after its commit
    assert term.cursor_line().rstrip() == f"{PROMPT} is the update done"
    assert "⟳ background consolidation of" not in term.screen()  # not before the line is sent
    term.enter("?")
    screen = term.wait_for("Let me check the update.")
    report = screen[screen.index("is the update done?") : screen.index("Let me check the update.")]
    assert "⟳ background consolidation of 2 turns: 1 stored, 1 replaced" in report
    assert re.search(r'\+ "Sarah lives in Lyon" sem_', report)
    assert '~ "Sarah\'s hub runs firmware 3.2" → "Sarah\'s hub runs firmware 3.3"' in report

    # Turn 4 starts a second run, which fails (a 503, retried, then an HTML page) while the user types.
    term.enter("thanks")
    term.wait_for("You're welcome.")
    term.type("my hub")
    assert until(lambda: not consolidation_steps, 15)
    until(lambda: False, 0.5)  # time for anything else the failing run would print
    assert term.cursor_line().rstrip() == f"{PROMPT} my hub"
    assert "retrying in 0.5s" in log_file.read_text()  # the retry was logged: to the file
    term.enter(" still blinks")
    term.wait_for("thinking… (LLM call failed (HTTP 500), retrying in 0.5s)")  # the spinner's line
    screen = term.wait_for("the LLM failed")
    assert screen.count("⟳ background consolidation failed") == 1
    failed_run = screen[screen.index("my hub still blinks") :].splitlines()[1]
    assert "answered an HTML page (HTTP 200)" in failed_run and "check ENGRAM_LLM_BASE_URL" in failed_run
    assert screen.count("✗ the LLM failed") == 1  # the turn's failure: once, with its hint
    failed_turn = next(line for line in screen.splitlines() if "✗ the LLM failed" in line)
    assert "answered an HTML page" in failed_turn and "check ENGRAM_LLM_BASE_URL" in failed_turn
    assert "Sorry, I could not finish" not in screen  # the fallback reply is not a second message
    for noise in ("retrying", "WARNING", "Traceback", "ERROR"):
        assert noise not in screen
    assert screen.count("answered an HTML page") == 2  # the run's and the turn's: nothing repeated

    # The commands.
    term.enter("/help")
    screen = term.wait_for("anything else is a message to the agent")
    for command in ("/help", "/profile", "/memory QUERY", "/forget ID", "/new"):
        assert f"  {command} " in screen
    assert screen.count(f"logs: {log_file}") == 2  # at the start, and in /help
    term.enter("/profile")
    screen = term.wait_for("core fact")
    profile = screen[screen.rindex("/profile") :]
    assert "Sarah lives in Lyon" in profile and "Sarah's hub runs firmware 3.3" in profile
    assert "firmware 3.2" not in profile  # replaced facts are not the profile
    (lyon,) = re.findall(r"Sarah lives in Lyon\s+(sem_[\w-]{22})", profile)
    term.enter("/memory where does Sarah live")
    screen = term.wait_for("best first")
    assert "Sarah lives in Lyon" in screen[screen.rindex("/memory") :]
    term.enter(f"/forget {lyon}")
    screen = term.wait_for(f'✗ forgot "Sarah lives in Lyon" {lyon}')
    term.enter("/profile")
    screen = term.wait_for("core fact", times=2)
    assert "Sarah lives in Lyon" not in screen[screen.rindex("/profile") :]
    term.enter(f"/forget {lyon}")  # gone: one line saying so
    term.wait_for("error: ")
    term.enter("/frobnicate")
    term.wait_for("unknown command /frobnicate: /help lists the commands")
    term.enter("/new")
    term.wait_for("new conversation (chat-")
    term.enter("hello again")
    term.wait_for("A fresh start.")
    last = fake_chat.requests[-1]["messages"]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "tool"]  # no earlier turns
    assert len(fake_chat.requests) == 12  # 9 of the agent's and 3 of consolidation: no more, no less
    term.tmux("send-keys", "-t", "chat", "C-d")
    screen = term.wait_for("[exit 0]")
    assert "bye" in screen
