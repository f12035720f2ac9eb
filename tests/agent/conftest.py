"""A local HTTP server speaking the OpenAI chat-completions protocol with tool calls, scripted per test,
and agents on real SQLite stores with the real models talking to it."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from engram import Engram
from engram.agent import Agent
from tests.polling import until

# A step gets the request body and returns the assistant message (a dict: content and/or tool_calls),
# or (HTTP status, raw body) to answer outside the protocol.
Step = Callable[[dict[str, Any]], "dict[str, Any] | tuple[int, str]"]


class FakeChat:
    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.url = ""
        self.open_connections = 0  # keep-alive connections a client has not closed yet

    def script(self, *steps: Step) -> None:
        self.steps.extend(steps)

    def connections_closed(self, within_s: float = 5.0) -> bool:
        return until(lambda: self.open_connections == 0, within_s)

    def reply(self, body: dict[str, Any]) -> tuple[int, bytes]:
        with self.lock:
            self.requests.append(body)
            if not self.steps:
                return 500, b'{"error": "script exhausted"}'
            step = self.steps.pop(0)
        answer = step(body)
        if isinstance(answer, tuple):
            status, raw = answer
            return status, raw.encode()
        message = {"role": "assistant", "content": None, **answer}
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        payload = {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "model": body.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }
        return 200, json.dumps(payload).encode()


NESTED = "[" * 100_000  # JSON nested deeper than any parser's recursion limit


def say(text: str) -> Step:
    """A step answering with plain text."""
    return lambda body: {"content": text}


def tool_call(name: str, arguments: Any, call_id: str = "call_1") -> dict[str, Any]:
    """One tool call as the protocol carries it (``arguments`` a dict is sent as its JSON text)."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}}


def calls(*entries: Any) -> Step:
    """A step answering with these tool calls (as given: malformed entries stay malformed)."""
    return lambda body: {"tool_calls": list(entries)}


def last_tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool messages at the end of a request, parsed."""
    results = []
    for message in reversed(body["messages"]):
        if message["role"] != "tool":
            break
        results.insert(0, {"tool_call_id": message["tool_call_id"], **json.loads(message["content"])})
    return results


@pytest.fixture
def fake_chat() -> Iterator[FakeChat]:
    chat = FakeChat()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, like a real endpoint: a client must close it

        def setup(self) -> None:
            super().setup()
            with chat.lock:
                chat.open_connections += 1

        def finish(self) -> None:
            super().finish()
            with chat.lock:
                chat.open_connections -= 1

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status, payload = chat.reply(body)
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    chat.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    yield chat
    server.shutdown()
    server.server_close()


@pytest.fixture
def make_agent(
    make_engram: Callable[..., Engram], fake_chat: FakeChat
) -> Iterator[Callable[..., tuple[Agent, Engram]]]:
    """``agent, eng = make_agent(**settings)``: an embedded agent for "sarah" on a fresh SQLite store,
    talking to the fake endpoint; closed at teardown."""
    agents: list[Agent] = []

    def factory(user: str = "sarah", **settings: Any) -> tuple[Agent, Engram]:
        settings = {
            "llm_base_url": fake_chat.url,
            "llm_model": "test-model",
            "llm_max_retries": 0,
            **settings,
        }
        eng = make_engram(f"agent-{len(agents)}.db", **settings)
        agent = Agent.for_engram(eng, user)
        agents.append(agent)
        return agent, eng

    yield factory
    for agent in agents:
        agent.close()
