"""Engram: persistent, multi-tenant memory for LLM agents.

from engram import Engram
eng = Engram.open()
mem = eng.for_user("sarah")
mem.remember_turn("I moved to Edinburgh")
hits = mem.recall("where do I live?")
"""

from importlib.metadata import version

from engram.client import AsyncClient, Client, ServiceUnavailable, Unauthorized
from engram.errors import (
    Conflict,
    EngramError,
    ImportFileError,
    InvalidInput,
    ModelError,
    NotFound,
    PermissionDenied,
    StorageError,
)
from engram.memory import CatalogAdmin, Engram, UserMemory
from engram.models import (
    CatalogItem,
    EpisodicMemory,
    Hit,
    Memory,
    ProceduralMemory,
    SemanticMemory,
    Step,
    Tombstone,
)
from engram.retrieval.config import RetrievalConfig
from engram.settings import EngramSettings

__all__ = [
    "AsyncClient",
    "CatalogAdmin",
    "CatalogItem",
    "Client",
    "Conflict",
    "Engram",
    "EngramError",
    "EngramSettings",
    "EpisodicMemory",
    "Hit",
    "ImportFileError",
    "InvalidInput",
    "Memory",
    "ModelError",
    "NotFound",
    "PermissionDenied",
    "ProceduralMemory",
    "RetrievalConfig",
    "SemanticMemory",
    "ServiceUnavailable",
    "Step",
    "StorageError",
    "Tombstone",
    "Unauthorized",
    "UserMemory",
]
__version__ = version("engram-memory")  # one source: pyproject.toml
