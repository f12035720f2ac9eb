"""Shared fixtures: the real packaged models (loaded once) and fresh stores on real SQLite files."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engram import Engram
from engram.providers.onnx import OnnxCrossEncoder, OnnxEmbedder
from engram.settings import EngramSettings
from engram.storage.base import Store
from engram.storage.sqlite import SQLiteStore


@pytest.fixture(scope="session")
def embedder() -> OnnxEmbedder:
    return OnnxEmbedder.packaged()


@pytest.fixture(scope="session")
def reranker() -> OnnxCrossEncoder:
    return OnnxCrossEncoder.packaged()


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never touch the developer's real store or config."""
    monkeypatch.setenv("ENGRAM_HOME", str(tmp_path_factory.mktemp("home")))
    monkeypatch.delenv("ENGRAM_STORE", raising=False)
    monkeypatch.delenv("ENGRAM_CONFIG", raising=False)


STORE_KINDS = ["sqlite"]


def make_store(kind: str, tmp_path: Path) -> Store:
    if kind == "sqlite":
        return SQLiteStore(tmp_path / "engram.db")
    raise AssertionError(kind)


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path, embedder: OnnxEmbedder) -> Iterator[Store]:
    s = make_store(request.param, tmp_path)
    s.ensure_model(embedder.name, embedder.dim)
    yield s
    s.close()


@pytest.fixture
def make_engram(
    tmp_path: Path, embedder: OnnxEmbedder, reranker: OnnxCrossEncoder
) -> Iterator[Callable[..., Engram]]:
    opened: list[Engram] = []

    def factory(name: str = "engram.db", **settings: object) -> Engram:
        eng = Engram(
            SQLiteStore(tmp_path / name),
            embedder,
            reranker,
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
