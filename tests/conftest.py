"""Shared fixtures: the real packaged models (loaded once) and fresh stores on real SQLite files."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engram import Engram
from engram.providers.onnx import OnnxEmbedder, OnnxTokenEncoder
from engram.providers.onnx_rerank import OnnxCrossEncoder
from engram.settings import EngramSettings
from engram.storage.base import Store
from engram.storage.sqlite import SQLiteStore
from tests.opensearch_node.node import USERS as OS_USERS
from tests.opensearch_node.node import OpenSearchNode, start_node
from tests.opensearch_node.pool import PrefixPool


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


STORE_KINDS = ["sqlite", "postgres", "opensearch"]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto` (addopts): one worker per core, at most two. The CI machine has two; more workers would
    each load the models and start PostgreSQL for little gain. PYTEST_XDIST_AUTO_NUM_WORKERS, when set,
    is read by xdist's own hook (None here hands over to it)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return min(2, os.cpu_count() or 1)


def xdist_scope(nodeid: str) -> str:
    """The unit a worker runs whole (`--dist loadscope`, addopts): every test that needs the OpenSearch
    node (its file or its store parameter says so) in one, so one JVM starts for the run and its index
    prefixes are reused; any other test with the rest of its module, whose module fixtures (the eval
    gate's corpus, the browser) are then made once."""
    return "opensearch" if "opensearch" in nodeid else nodeid.split("::", 1)[0]


# Handed out first (xdist otherwise starts the units with the most tests): the longest units, each
# ~20-90 s of one core, so that neither worker is left running one of them alone at the end.
LONG_SCOPES = (
    "opensearch",
    "tests/test_eval_gate.py",
    "tests/interfaces/test_openapi_fuzz.py",
    "tests/interfaces/test_serve.py",
    "tests/test_client_parity.py",
    "tests/clients/test_typescript_client.py",
)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """loadscope with the scopes above. (xdist's own grouping by mark, loadgroup, rewrites node ids,
    which pytest 9.2 no longer lets it do: the marks are silently ignored, pytest-xdist#1386.)"""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class OpenSearchTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            first = next((scope for scope in LONG_SCOPES if scope in self.workqueue), None)
            if first is not None:
                self.workqueue.move_to_end(first, last=False)
            super()._assign_work_unit(node)

    return OpenSearchTogether(config, log)


@pytest.fixture(scope="session")
def pg_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Admin URL of a PostgreSQL >= 15 with pgvector: $ENGRAM_TEST_PG_URL, else a bundled server
    (PyPI pgserver: PostgreSQL 16 + pgvector) started here and stopped after the session."""
    url = os.environ.get("ENGRAM_TEST_PG_URL")
    if url:
        yield url
        return
    import pgserver
    import psycopg

    server = pgserver.get_server(tmp_path_factory.mktemp("pg"), cleanup_mode="stop")
    # A throwaway server: no flush to disk per commit, CREATE DATABASE or DROP (each PostgreSQL test
    # makes and drops a database). Only a crash of the machine itself loses data with these off; the
    # tests kill Engram's processes, never PostgreSQL, so every test sees the same server behaviour.
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        for setting in ("fsync", "synchronous_commit", "full_page_writes"):
            conn.execute(f"ALTER SYSTEM SET {setting} = off")
        conn.execute("SELECT pg_reload_conf()")
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


@pytest.fixture(scope="session")
def opensearch_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenSearchNode]:
    """A real OpenSearch 2.19 (security plugin, HTTPS on 127.0.0.1) for the session: jars from Maven
    Central (tests/opensearch_node); a missing java/mvn/openssl fails with what to install."""
    node = start_node(tmp_path_factory.mktemp("opensearch"))
    yield node
    node.stop()


@pytest.fixture(scope="session")
def os_pool(opensearch_node: OpenSearchNode) -> PrefixPool:
    return PrefixPool(opensearch_node)


@pytest.fixture
def os_prefixes(os_pool: PrefixPool) -> Iterator[Callable[[], str]]:
    """Fresh index prefixes for this test's stores, their indices deleted after it."""
    with os_pool.prefixes() as taken:

        def take() -> str:
            taken.append(os_pool.acquire())
            return taken[-1]

        yield take


def opensearch_options(node: OpenSearchNode, prefix: str) -> dict[str, object]:
    """The settings an Engram on the test node uses (the service account, the node's CA, one copy)."""
    return {
        "os_user": "svc",
        "os_password": OS_USERS["svc"][0],
        "os_ca_certs": str(node.ca),
        "os_index_prefix": prefix,
        "os_replicas": 0,
    }


def make_store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    if kind == "sqlite":
        return SQLiteStore(tmp_path / "engram.db")
    if kind == "opensearch":
        from engram.storage.opensearch import OpenSearchOptions, OpenSearchStore

        node: OpenSearchNode = request.getfixturevalue("opensearch_node")
        prefix = request.getfixturevalue("os_prefixes")()
        options = {k.removeprefix("os_"): v for k, v in opensearch_options(node, prefix).items()}
        return OpenSearchStore(f"opensearchs://{node.address}", OpenSearchOptions(**options))  # type: ignore[arg-type]
    from engram.storage.postgres import PostgresStore

    admin, runtime = request.getfixturevalue("pg_urls")
    return PostgresStore(runtime, admin_url=admin)


def opened_store(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, embedder: OnnxEmbedder
) -> Iterator[Store]:
    """A fixture's body: a store of ``kind`` with the embedder's model registered, closed afterwards."""
    s = make_store(kind, tmp_path, request)
    s.ensure_model(embedder.name, embedder.dim)
    yield s
    s.close()


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path, embedder: OnnxEmbedder) -> Iterator[Store]:
    yield from opened_store(request.param, tmp_path, request, embedder)


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
