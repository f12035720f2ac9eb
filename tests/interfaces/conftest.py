"""A real server: uvicorn on a free port in a thread, over a fresh SQLite file, with real models."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest

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
