"""Shared fixtures: the real packaged models (loaded once) and fresh stores on real SQLite files."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engram import Engram
from engram.providers.onnx import OnnxCrossEncoder, OnnxEmbedder, OnnxTokenEncoder
from engram.settings import EngramSettings
from engram.storage.base import Store
from engram.storage.sqlite import SQLiteStore


@pytest.fixture(scope="session")
def embedder() -> OnnxEmbedder:
    return OnnxEmbedder.packaged()


@pytest.fixture(scope="session")
def reranker() -> OnnxCrossEncoder:
    return OnnxCrossEncoder.packaged()


@pytest.fixture(scope="session")
def token_encoder() -> OnnxTokenEncoder:
    return OnnxTokenEncoder.packaged()


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never touch the developer's real store or config."""
    monkeypatch.setenv("ENGRAM_HOME", str(tmp_path_factory.mktemp("home")))
    monkeypatch.delenv("ENGRAM_STORE", raising=False)
    monkeypatch.delenv("ENGRAM_CONFIG", raising=False)


STORE_KINDS = ["sqlite", "postgres"]


@pytest.fixture(scope="session")
def pg_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Admin URL of a PostgreSQL >= 15 with pgvector: $ENGRAM_TEST_PG_URL, else a bundled server
    (PyPI pgserver: PostgreSQL 16 + pgvector) started here and stopped after the session."""
    url = os.environ.get("ENGRAM_TEST_PG_URL")
    if url:
        yield url
        return
    import pgserver

    server = pgserver.get_server(tmp_path_factory.mktemp("pg"), cleanup_mode="stop")
    yield server.get_uri()
    server.cleanup()


@pytest.fixture
def pg_urls(pg_server_url: str) -> Iterator[tuple[str, str]]:
    """A fresh database: (admin URL, runtime URL as the non-owner engram_app role)."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    name = f"engram_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    admin = make_conninfo(pg_server_url, dbname=name)
    yield admin, make_conninfo(admin, user="engram_app", password="")
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def make_store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    if kind == "sqlite":
        return SQLiteStore(tmp_path / "engram.db")
    from engram.storage.postgres import PostgresStore

    admin, runtime = request.getfixturevalue("pg_urls")
    return PostgresStore(runtime, admin_url=admin)


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path, embedder: OnnxEmbedder) -> Iterator[Store]:
    s = make_store(request.param, tmp_path, request)
    s.ensure_model(embedder.name, embedder.dim)
    yield s
    s.close()


@pytest.fixture
def make_engram(
    tmp_path: Path, embedder: OnnxEmbedder, reranker: OnnxCrossEncoder, token_encoder: OnnxTokenEncoder
) -> Iterator[Callable[..., Engram]]:
    """Engrams on fresh SQLite files with the default pipeline (all three packaged models)."""
    opened: list[Engram] = []

    def factory(name: str = "engram.db", **settings: object) -> Engram:
        eng = Engram(
            SQLiteStore(tmp_path / name),
            embedder,
            reranker,
            token_encoder=token_encoder,
            settings=EngramSettings(**settings),  # type: ignore[arg-type]
        )
        opened.append(eng)
        return eng

    yield factory
    for eng in opened:
        eng.close()


@pytest.fixture
def eng(make_engram: Callable[..., Engram]) -> Engram:
    return make_engram()
