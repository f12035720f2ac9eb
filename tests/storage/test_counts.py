"""Counting a tenant's rows of one type without reading them (the inspector's tab counts), on every
backend: the count stops at its limit, sees only the tenant's rows, and leaves superseded rows out
unless asked."""

from __future__ import annotations

import pytest

from engram.errors import InvalidInput
from engram.models import CatalogItem, new_id
from engram.storage.base import CATALOG, Supersession
from tests.storage.test_conformance import T0, episode, fact, put


def test_rows_are_counted_up_to_a_limit_in_the_tenants_scope(store, embedder):
    put(store, embedder, "sarah", *(episode("sarah", f"turn {i}") for i in range(5)))
    old = put(store, embedder, "sarah", fact("sarah", "Sarah lives in Bristol"))
    new = fact("sarah", "Sarah lives in Edinburgh")
    put(store, embedder, "sarah", new, supersede={new.id: Supersession(old.id, retract=False, at=T0)})
    put(store, embedder, "bob", *(episode("bob", f"bob's turn {i}") for i in range(3)))
    item = CatalogItem(id=new_id("catalog"), text="Lumio Hub v2 manual", user_id=None, created_at=T0)
    put(store, embedder, CATALOG, item)

    assert store.count_memories("sarah", "episodic", limit=100) == 5
    assert store.count_memories("sarah", "episodic", limit=3) == 3  # stops at the limit
    assert store.count_memories("sarah", "semantic", limit=100) == 1  # the live fact
    assert store.count_memories("sarah", "semantic", include_superseded=True, limit=100) == 2
    assert store.count_memories("sarah", "procedural", limit=100) == 0
    assert store.count_memories("sarah", "catalog", limit=100) == 0  # catalog rows are the catalog's
    assert store.count_memories("bob", "episodic", limit=100) == 3
    assert store.count_memories("nobody", "episodic", limit=100) == 0
    assert store.count_memories(CATALOG, "catalog", limit=100) == 1
    for limit in (0, -1):
        with pytest.raises(InvalidInput, match="limit"):
            store.count_memories("sarah", "episodic", limit=limit)
