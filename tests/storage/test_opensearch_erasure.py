"""Deleting a user on OpenSearch from one process while another process of the service has that
tenant's internal user in its cache: the other process keeps working for everyone, and the deleted id,
used again, gets a fresh internal user there too."""

from __future__ import annotations

from engram.models import SemanticMemory, new_id
from engram.storage.opensearch import OpenSearchStore
from tests.conftest import make_store
from tests.storage.test_conformance import ALL
from tests.storage.test_conformance_erasure import T0


def fact(user: str, text: str) -> SemanticMemory:
    return SemanticMemory(id=new_id("semantic"), text=text, user_id=user, created_at=T0)


def test_a_user_deleted_by_another_process_can_come_back(request, tmp_path, embedder):
    first = make_store("opensearch", tmp_path, request)
    assert isinstance(first, OpenSearchStore)
    second = OpenSearchStore(first.endpoint.label, first.options)
    try:
        first.ensure_model(embedder.name, embedder.dim)
        second.ensure_model(embedder.name, embedder.dim)
        row = fact("sarah", "Sarah owns a hub")
        second.insert("sarah", [row], embedder.embed_documents([row.text]))  # second caches her user
        assert first.delete_user("sarah")["internal_user"] == 1
        assert second.fetch("sarah", [row.id]) == []  # a read as her: her user is made again
        again = fact("sarah", "Sarah is back")
        first.delete_user("sarah")
        second.insert("sarah", [again], embedder.embed_documents([again.text]))  # a write, likewise
        assert [m.text for m in first.list_memories("sarah", "semantic")] == ["Sarah is back"]
        assert "sarah" in first.tenants()  # listed again by the process that had listed her before
        first.delete_user("sarah")
        hits = second.search_text("sarah", "back", ALL, 5)  # a search, likewise
        assert hits == []
    finally:
        second.close()
        first.close()
