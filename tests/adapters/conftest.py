"""The adapters run against the real frameworks (LangGraph, LangChain, LlamaIndex from PyPI) over a real
Engram: a fresh SQLite file with the packaged models (tests/conftest.py), embedded or served over REST."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from engram import Client, Engram
from engram.auth import ApiKeys
from engram.interfaces.rest import create_app
from engram.interfaces.rest.background import BackgroundServer


@pytest.fixture
def sarah_client(eng: Engram) -> Iterator[Client]:
    """Sarah's memory over the real REST service (a thread on a free port) in front of ``eng``."""
    keys = ApiKeys(eng.store)
    with BackgroundServer(create_app(eng, keys)) as url, Client(url, keys.create("sarah")[0]) as client:
        yield client
