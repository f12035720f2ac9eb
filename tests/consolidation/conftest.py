"""A local HTTP server speaking the OpenAI chat-completions protocol, scripted per test."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.polling import until

# A script step gets the request body and returns (HTTP status, message content or raw body, delay s).
Step = Callable[[dict[str, Any]], tuple[int, str, float]]


class FakeLLM:
    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.url = ""
        self.open_connections = 0  # keep-alive connections a client has not closed yet
        self.clients: list[Any] = []  # LLM clients a test made: closed at teardown
        self.trickle_s = 0.0  # > 0: the body goes out a byte at a time, this long apart

    def connections_closed(self, within_s: float = 5.0) -> bool:
        return until(lambda: self.open_connections == 0, within_s)

    def script(self, *steps: Step) -> None:
        self.steps.extend(steps)

    def reply(self, body: dict[str, Any]) -> tuple[int, bytes, float]:
        with self.lock:
            self.requests.append(body)
            if not self.steps:
                return 500, b'{"error": "script exhausted"}', 0.0
            step = self.steps.pop(0)
        status, content, delay = step(body)
        if status != 200:
            return status, content.encode(), delay
        payload = {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "model": body.get("model"),
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
            ],
        }
        return 200, json.dumps(payload).encode(), delay


def ok(fn: Callable[[dict[str, Any]], dict[str, Any]]) -> Step:
    """A step answering with the JSON ``fn`` builds from the prompt payload the client sent."""
    return lambda body: (200, json.dumps(fn(json.loads(body["messages"][1]["content"]))), 0.0)


def raw(status: int, content: str, delay: float = 0.0) -> Step:
    return lambda body: (status, content, delay)


@pytest.fixture
def fake_llm():
    llm = FakeLLM()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, like a real endpoint: a client must close it

        def setup(self):
            super().setup()
            with llm.lock:
                llm.open_connections += 1

        def finish(self):
            super().finish()
            with llm.lock:
                llm.open_connections -= 1

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status, payload, delay = llm.reply(body)
            time.sleep(delay)
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                for at in range(0, len(payload), 1 if llm.trickle_s else len(payload) or 1):
                    self.wfile.write(payload[at : at + (1 if llm.trickle_s else len(payload))])
                    self.wfile.flush()
                    time.sleep(llm.trickle_s)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    llm.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    yield llm
    for client in llm.clients:
        client.close()
    server.shutdown()
    server.server_close()
