"""A real server: uvicorn on a free port in a thread, over a fresh SQLite file, with real models."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import httpx
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from engram import Engram
from engram.auth import ApiKeys
from engram.interfaces.rest import create_app
from engram.interfaces.rest.background import BackgroundServer
from engram.settings import EngramSettings
from engram.storage.sqlite import SQLiteStore


@dataclass
class Service:
    url: str
    engram: Engram
    keys: ApiKeys
    admin_key: str
    user_keys: dict[str, str]
    clients: list[httpx.Client] = field(default_factory=list)

    def client(self, user: str | None = None, key: str | None = None) -> httpx.Client:
        token = key or (self.admin_key if user is None else self.user_keys[user])
        headers = {"Authorization": f"Bearer {token}"} if token != "-" else {}
        client = httpx.Client(base_url=self.url, headers=headers, timeout=30)
        self.clients.append(client)
        return client


@pytest.fixture
def make_service(tmp_path, embedder, reranker, token_encoder):
    """``with make_service(**settings) as svc:`` a server over its own store, with those settings."""

    @contextlib.contextmanager
    def serve(name: str = "svc.db", **settings: object) -> Iterator[Service]:
        engram = Engram(
            SQLiteStore(tmp_path / name),
            embedder,
            reranker,
            token_encoder=token_encoder,
            settings=EngramSettings(**settings),  # type: ignore[arg-type]
        )
        keys = ApiKeys(engram.store)
        admin_key, _ = keys.create(None, "test admin")
        user_keys = {user: keys.create(user)[0] for user in ("sarah", "bob")}
        try:
            with BackgroundServer(create_app(engram, keys)) as url:
                svc = Service(url, engram, keys, admin_key, user_keys)
                yield svc
                for client in svc.clients:
                    client.close()
        finally:
            engram.close()

    return serve


@pytest.fixture
def service(make_service):
    with make_service() as svc:
        yield svc


def cli_user_key(env: dict[str, str], user: str) -> str:
    """A user key made by `engram keys create` on the store ``env`` names."""
    import re
    import sys

    created = subprocess.run(
        [sys.executable, "-m", "engram", "keys", "create", "--user", user],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    match = re.search(r"(egk_\S+)", created)
    assert match, created
    return match.group(1)


def start_serve(env: dict[str, str], port: int, *args: str) -> subprocess.Popen[bytes]:
    """`engram serve` as a real process on ``port``, once /healthz answers (killed if it never does)."""
    import sys
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "engram", "serve", "--port", str(port), *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("engram serve did not come up")


@contextlib.asynccontextmanager
async def mcp_session(url: str, key: str, path: str = "/mcp") -> AsyncIterator[ClientSession]:
    """An initialized session of the official MCP client, over streamable HTTP with a bearer key."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http,
        streamable_http_client(f"{url}{path}", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session
