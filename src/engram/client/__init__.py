"""The REST clients: ``Client`` (blocking, httpx.Client) and ``AsyncClient`` (asyncio, httpx.AsyncClient),
each one user's memory in an Engram service with the embedded ``UserMemory`` API. Both run the same
plans of each verb (engram.client._core), so they send the same requests and raise the same errors."""

from engram.client._core import MAX_PAGE
from engram.client.aio import AsyncClient
from engram.client.sync import Client
from engram.errors import ClientClosed, ServiceUnavailable, Unauthorized

__all__ = ["MAX_PAGE", "AsyncClient", "Client", "ClientClosed", "ServiceUnavailable", "Unauthorized"]
