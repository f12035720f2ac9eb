"""The memory facade: ``Engram`` and its tenant-scoped handles.

``facade`` (Engram: open a store, hand out handles, consolidate), ``engine`` (what the handles share:
store, models, encoding, import), ``handles`` (UserMemory, CatalogAdmin, MemoryReader) and ``stores``
(a store URL to a backend). Import from here (or from ``engram``); the modules may move.
"""

from engram.memory.engine import Engine
from engram.memory.facade import Engram
from engram.memory.handles import CatalogAdmin
from engram.memory.reader import MemoryReader
from engram.memory.stores import open_store, sqlite_path
from engram.memory.user import SESSION_LOOKBACK, WRITABLE_TYPES, UserMemory
from engram.validation import validate_user_id

__all__ = [
    "SESSION_LOOKBACK",
    "WRITABLE_TYPES",
    "CatalogAdmin",
    "Engine",
    "Engram",
    "MemoryReader",
    "UserMemory",
    "open_store",
    "sqlite_path",
    "validate_user_id",
]
