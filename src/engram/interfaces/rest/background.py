"""Run an ASGI app with uvicorn on a free loopback port in a background thread (eval, tests)."""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType
from typing import Any

import uvicorn

from engram.interfaces.rest.protocol import JsonErrorsH11Protocol


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BackgroundServer:
    """``with BackgroundServer(app) as url: ...`` serves ``app`` at ``url`` until the block ends."""

    def __init__(self, app: Any, *, start_timeout: float = 30.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server = uvicorn.Server(
            uvicorn.Config(
                app, host="127.0.0.1", port=self.port, log_level="warning", http=JsonErrorsH11Protocol
            )
        )
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._start_timeout = start_timeout

    def __enter__(self) -> str:
        self._thread.start()
        deadline = time.time() + self._start_timeout
        while not self._server.started:
            if time.time() > deadline or not self._thread.is_alive():
                raise RuntimeError("the background server did not start")
            time.sleep(0.02)
        return self.url

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.should_exit = True
        self._thread.join(10)
