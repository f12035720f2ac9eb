"""A worker process of `engram serve --workers N`: its own Engram on the shared store.

uvicorn starts each worker as a fresh process (spawn) and imports ``app_from_environment``; the
parent has put the store URL, host and per-process model threads into the environment first, and
has done what must happen once (the admin key, the consolidation worker). SQLite in WAL mode, like
PostgreSQL, lets several processes read and write one store.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator

from fastapi import FastAPI

from engram.auth import ApiKeys
from engram.interfaces.rest.app import create_app
from engram.memory import Engram
from engram.observability.tracing import install_provider
from engram.settings import load_settings


def app_from_environment() -> FastAPI:
    settings = load_settings()
    if settings.otel:  # each worker process has its own tracer provider
        install_provider()
    engram = Engram.from_settings(settings)
    keys = ApiKeys(engram.store)
    app = create_app(engram, keys, host=os.environ.get("ENGRAM_HOST", "127.0.0.1"))
    serving = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(running: FastAPI) -> AsyncIterator[None]:
        async with serving(running):
            yield
        engram.close()  # flushes queued use counts, closes the store and the models' pools

    app.router.lifespan_context = lifespan
    return app
