"""The handles' common base and the catalog's: every handle is bound to one tenant at construction and
passes it to every Store call. ``CatalogAdmin`` writes the shared catalog; one user's handles are in
engram.memory.user.

``list`` methods shadow the builtin inside the class bodies, so annotations there spell it
``builtins.list``.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from engram.errors import InvalidInput, NotFound
from engram.memory.engine import Engine
from engram.models import CatalogItem, Memory, Tombstone, new_id, utcnow
from engram.storage.base import CATALOG, Tenant
from engram.validation import aware, build_row, check_metadata, check_title


class TenantHandle:
    """Operations common to user and catalog handles; ``_tenant`` is fixed at construction."""

    _tenant: Tenant

    def __init__(self, engram: Engine) -> None:
        self._engram = engram

    def get(self, memory_id: str) -> Memory:
        """The row, if it is in this handle's scope (catalog rows are readable by every tenant)."""
        rows = self._engram.store.fetch(self._tenant, [memory_id], include_catalog=True)
        if not rows:
            raise NotFound(str(memory_id))
        return rows[0]

    def forget(self, memory_id: str, *, revive_retracted: bool = False) -> Tombstone:
        """Hard-delete one of this tenant's rows; an audit tombstone without text remains. Forgetting
        the newest fact of a chain makes the one before it live again, unless a harsh correction had
        retracted it (it was never true); ``revive_retracted=True`` makes even that one live again."""
        self._deny_catalog_write(memory_id)
        tombstone = self._engram.store.forget(
            self._tenant, memory_id, utcnow(), revive_retracted=revive_retracted
        )
        if self._tenant is not None:
            self._engram.session_tails.drop(self._tenant, memory_id)
        return tombstone

    def _deny_catalog_write(self, memory_id: str) -> None:
        pass


class CatalogAdmin(TenantHandle):
    """The shared catalog: rows with no owner, readable by every tenant, written only here."""

    _tenant = CATALOG

    def add(
        self,
        text: str,
        title: str = "",
        metadata: Mapping[str, Any] | None = None,
        created_at: datetime | None = None,
    ) -> CatalogItem:
        meta = check_metadata(metadata)  # before any work: JSON must hold it as given
        row = build_row(
            CatalogItem,
            id=new_id("catalog"),
            text=self._engram._check_text(text),
            title=check_title(title),
            user_id=None,
            created_at=aware(created_at) or utcnow(),
            metadata=meta,
        )
        self._engram._store_row(CATALOG, row)
        return row

    def list(self, *, limit: int = 50, offset: int = 0) -> builtins.list[Memory]:
        return self._engram.store.list_memories(CATALOG, "catalog", limit=limit, offset=offset)

    def count(self, *, limit: int) -> int:
        """How many catalog rows there are, counted up to ``limit``, reading none."""
        return self._engram.store.count_memories(CATALOG, "catalog", limit=limit)

    def import_json(self, items: Sequence[Any], *, progress: bool = False) -> dict[str, Any]:
        """Import catalog items ``[{"title", "text", ...}]``; an invalid list writes nothing."""
        if not isinstance(items, Sequence) or isinstance(items, str | bytes):
            raise InvalidInput("a catalog import is a JSON array of items")
        return self._engram.import_json(items, progress=progress)
