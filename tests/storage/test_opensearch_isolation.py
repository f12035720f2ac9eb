"""Tenant isolation on OpenSearch is the server's, not only Engram's query builder's.

Raw HTTPS requests made as a tenant (the service account impersonating the tenant's user, exactly as the
store does, but bypassing Engram's filters) read nothing of another tenant. Writes are where document-
level security stops: a raw write as one tenant can overwrite another's document by id; the store never
writes a document it did not first read as the tenant (then with if_seq_no), so through Engram another
tenant's id is NotFound and nothing changes. Also: the isolation suite (tests/test_isolation.py) on an
OpenSearch-backed Engram, and the versioned mappings refusing an index of another version.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from engram import Engram, NotFound
from engram.errors import StorageError
from engram.storage.opensearch import MAPPING_VERSION, OpenSearchOptions, OpenSearchStore
from tests.conftest import make_store, opened_store, opensearch_options
from tests.opensearch_node.node import OpenSearchNode
from tests.test_isolation import (  # the same suite, on OpenSearch (the eng fixture below)
    tenants,  # noqa: F401
    test_cannot_supersede_another_tenants_row,  # noqa: F401
    test_lists_and_use_counts_stay_per_tenant,  # noqa: F401
    test_provenance_cannot_cite_foreign_or_missing_episodes,  # noqa: F401
    test_reads_by_id_are_denied_exactly_like_missing_rows,  # noqa: F401
    test_recall_never_returns_foreign_rows,  # noqa: F401
    test_user_ids_are_not_patterns,  # noqa: F401
)


@pytest.fixture
def eng(request, tmp_path, embedder, reranker, token_encoder):
    engram = Engram(
        make_store("opensearch", tmp_path, request), embedder, reranker, token_encoder=token_encoder
    )
    yield engram
    engram.close()


def as_tenant(node: OpenSearchNode, user: str):
    """Raw requests as a tenant's user: what any holder of the service account could send."""

    def request(method, path, body=None, ndjson=False):
        return node.request(method, path, body, user="svc", impersonate=user, ndjson=ndjson)

    return request


def test_raw_reads_as_a_tenant_see_only_its_own_and_the_catalog(eng, opensearch_node, embedder):
    prefix = eng.store.names.prefix
    sarah, bob = eng.for_user("sarah"), eng.for_user("bob")
    mine = sarah.write("Sarah's locker code is 4411")
    theirs = bob.write("Bob's locker code is 9931")
    bob_turn = bob.remember_turn("my locker sticks")
    cat = eng.catalog.add("Lockers open with a four digit code", title="Lockers")
    bob.forget(bob_turn.id)  # a tombstone of bob's
    raw = as_tenant(opensearch_node, "engram_u_sarah")

    status, found = raw("POST", f"/{prefix}memories/_search", {"size": 100, "query": {"match_all": {}}})
    assert status == 200
    assert {h["_id"] for h in found["hits"]["hits"]} == {mine.id, cat.id}
    assert raw("GET", f"/{prefix}memories/_doc/{theirs.id}")[1]["found"] is False
    docs = raw("POST", f"/{prefix}memories/_mget", {"ids": [theirs.id, mine.id]})[1]["docs"]
    assert [d["found"] for d in docs] == [False, True]
    assert raw("POST", f"/{prefix}memories/_count", {"query": {"term": {"owner": "bob"}}})[1]["count"] == 0
    # k-NN without any filter of ours: the k nearest are taken first, DLS removes bob's after
    vector = [float(x) for x in embedder.embed_query("Bob's locker code")]
    knn = {"size": 10, "query": {"knn": {"embedding": {"vector": vector, "k": 10}}}}
    status, found = raw("POST", f"/{prefix}memories/_search", knn)
    assert status == 200 and theirs.id not in {h["_id"] for h in found["hits"]["hits"]}
    lines = [{"index": f"{prefix}memories"}, {"query": {"term": {"owner": "bob"}}}]
    assert raw("POST", "/_msearch", lines, ndjson=True)[1]["responses"][0]["hits"]["hits"] == []
    assert raw("POST", f"/{prefix}tombstones/_search", {"query": {"match_all": {}}})[1]["hits"]["hits"] == []
    assert raw("POST", f"/{prefix}tombstones/_search", {})[0] == 200
    # API keys, meta and the tenant list are the service account's: no tenant reads them at all
    assert raw("POST", f"/{prefix}store/_search", {"query": {"match_all": {}}})[0] == 403
    # nor can the service account act as anyone but Engram's tenants (admin is not impersonable)
    assert opensearch_node.request("GET", "/_cluster/health", user="svc", impersonate="admin")[0] in (
        401,
        403,
    )
    # the catalog's user reads the catalog only
    catalog = as_tenant(opensearch_node, "engram_catalog")
    found = catalog("POST", f"/{prefix}memories/_search", {"size": 100, "query": {"match_all": {}}})[1]
    assert {h["_id"] for h in found["hits"]["hits"]} == {cat.id}


def test_a_raw_write_is_not_limited_by_dls_but_the_store_never_writes_unread(eng, opensearch_node):
    prefix = eng.store.names.prefix
    sarah, bob = eng.for_user("sarah"), eng.for_user("bob")
    theirs = bob.write("Bob lives in Leith")
    admin_view = opensearch_node.request("GET", f"/{prefix}memories/_doc/{theirs.id}")[1]
    # Through Engram: another tenant's id is NotFound, exactly like a missing one, and nothing changes.
    with pytest.raises(NotFound):
        sarah.forget(theirs.id)
    with pytest.raises(NotFound):
        sarah.write("Sarah lives in Leith", supersedes_id=theirs.id)
    assert eng.store.record_use("sarah", {theirs.id: 5}, datetime.now(UTC)) == {}
    after = opensearch_node.request("GET", f"/{prefix}memories/_doc/{theirs.id}")[1]
    assert (after["_seq_no"], after["_source"]) == (admin_view["_seq_no"], admin_view["_source"])
    # What DLS does not stop: a raw write by id as sarah (a leaked service credential) replaces bob's
    # document, though sarah could not read it. Engram's own writes cannot: each is of a document read
    # as the tenant first (another tenant's reads as not found) and carries if_seq_no/if_primary_term.
    raw = as_tenant(opensearch_node, "engram_u_sarah")
    status, _ = raw(
        "PUT", f"/{prefix}memories/_doc/{theirs.id}?refresh=true", dict(after["_source"], text="x")
    )
    assert status == 200
    assert raw("GET", f"/{prefix}memories/_doc/{theirs.id}")[1]["found"] is False  # and still cannot read it


def test_an_index_of_another_mapping_version_is_refused(opensearch_node, os_prefixes):
    prefix = os_prefixes()
    node = opensearch_node
    assert node.request("PUT", f"/{prefix}tombstones-v99", {"aliases": {f"{prefix}tombstones": {}}})[0] == 200
    options = {k.removeprefix("os_"): v for k, v in opensearch_options(node, prefix).items()}
    with pytest.raises(StorageError, match="mapping version 99"):
        OpenSearchStore(f"opensearchs://{node.address}", OpenSearchOptions(**options))  # type: ignore[arg-type]


def test_indices_are_versioned_behind_aliases(store, request):
    if not isinstance(store, OpenSearchStore):
        pytest.fail("the store fixture here is the OpenSearch one")
    node: OpenSearchNode = request.getfixturevalue("opensearch_node")
    prefix = store.names.prefix
    aliases = node.request("GET", f"/_alias/{prefix}*")[1]
    assert {i: list(a["aliases"]) for i, a in aliases.items()} == {
        f"{prefix}{kind}-v{MAPPING_VERSION}": [f"{prefix}{kind}"]
        for kind in ("memories", "tombstones", "store")
    }
    current = f"{prefix}memories-v{MAPPING_VERSION}"
    mapping = node.request("GET", f"/{prefix}memories/_mapping")[1][current]["mappings"]
    assert mapping["_meta"]["engram_mapping_version"] == MAPPING_VERSION
    assert mapping["properties"]["embedding"]["method"]["engine"] == "lucene"
    assert mapping["properties"]["search_text"]["analyzer"] == "english"


@pytest.fixture
def store(request, tmp_path, embedder):
    yield from opened_store("opensearch", tmp_path, request, embedder)
