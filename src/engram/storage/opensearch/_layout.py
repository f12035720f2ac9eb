"""The OpenSearch store's indices, their versioned mappings, and the tenant role the server enforces.

Three indices per store, each a versioned concrete index behind an alias (``{prefix}memories`` ->
``{prefix}memories-v2``): a new mapping version is a new index, filled by ``_reindex`` and swapped in
by one atomic alias change (``_migrate``: ``engram.storage.opensearch.migrate``), so readers never see
a half-migrated store.

* ``memories``: every memory type and the catalog in one index, ``memory_type`` a keyword field. Recall
  searches all types at once: one index means one text search and one k-NN search per shard instead
  of four merged ones (BM25's statistics are still each owner's own: ``_lexical``). Measured on the
  test node (6k 384-d documents, 50 tenants, both legs in one _msearch, k = 80): one index p50 63.6 /
  p95 68.5 ms, an index per type 68.6 / 82.6 ms.
* ``tombstones``: what a forget leaves (no text).
* ``store``: what no tenant owns, by document kind: ``meta`` (models), ``key`` (API keys by hash),
  ``session`` (sign-in sessions by their token's hash), ``tenant`` (user ids, for the consolidation
  worker and exports) and ``lock`` (a tenant's write lease).

Tenants read through the role ``{prefix}tenant``: document-level security shows a tenant's identity
only documents whose ``owner`` is its own (and the catalog's, owner ''). The role grants no access to
``store``: only the service account reads keys.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from engram.storage.opensearch._lexical import SIMILARITY, similarity

# The mappings below; a change is a new version, migrated by reindex + alias swap. 2: search_text's
# similarity scores with per-owner statistics Engram sends (``_lexical``), not the shard's. 3: the recall
# filter's fields (session_id, event_time, metadata_terms), derived from each document by the migration.
# 4: the embedding is not stored in ``_source`` (k-NN derived source, ``index_body``): no document change.
MAPPING_VERSION = 4
KINDS = ("memories", "tombstones", "store")
TENANT_USER_PREFIXES = ("engram_u_", "engram_h_")  # the service account may impersonate only these
CATALOG_USER = "engram_catalog"
_READABLE_NAME = re.compile(r"^[A-Za-z0-9._-]{1,100}$")
_NOT_INDEXED = {"type": "object", "enabled": False}
_TIME = {"type": "date_nanos"}  # microseconds survive (date keeps milliseconds): sorts agree with SQL

MEMORY_FIELDS: dict[str, Any] = {
    "id": {"type": "keyword"},
    "rid": {"type": "long"},  # write order: the export cursor, and the tie-break of every sort
    "owner": {"type": "keyword"},
    "memory_type": {"type": "keyword"},
    "text": {"type": "text", "index": False},
    # BM25 over the keyword text, with each owner's own statistics (``_lexical``)
    "search_text": {"type": "text", "analyzer": "english", "similarity": SIMILARITY},
    "created_at": _TIME,
    "event_at": _TIME,
    "metadata": _NOT_INDEXED,
    "attrs": _NOT_INDEXED,
    "context_id": {"type": "keyword"},  # the turn an episode quotes: forgetting it clears the quote
    # What a recall filter reads (engram.recall_filter): a turn's session, the row's event time
    # (models.event_time), its top-level scalar metadata as terms (recall_filter.metadata_term).
    "session_id": {"type": "keyword"},
    # date, not date_nanos: a fact's valid_from may be before 1970 (date_nanos starts there); recall
    # filters compare it to the millisecond
    "event_time": {"type": "date"},
    "metadata_terms": {"type": "keyword"},
    "last_used_at": _TIME,
    "use_count": {"type": "integer"},
    "success_count": {"type": "integer"},
    "failure_count": {"type": "integer"},
    "last_success_at": _TIME,
    "supersedes": {"type": "keyword"},
    "superseded_by": {"type": "keyword"},
    "superseded_at": _TIME,
    "retracted": {"type": "integer"},
    "consolidated": {"type": "byte"},
    "tokens": {"type": "binary"},  # packed late-interaction vectors, base64 in _source
    "has_tokens": {"type": "boolean"},  # binary fields are not searchable: rows_without_tokens reads this
}
TOMBSTONE_FIELDS: dict[str, Any] = {
    "id": {"type": "keyword"},
    "owner": {"type": "keyword"},
    "memory_type": {"type": "keyword"},
    "created_at": _TIME,
    "forgotten_at": _TIME,
}
# A lease's journal (``_journal``): kept in _source, never searched. Added to a store index made before it.
UNIT_FIELD: dict[str, Any] = {"type": "object", "enabled": False}
STORE_FIELDS: dict[str, Any] = {
    "kind": {"type": "keyword"},
    "key": {"type": "keyword"},
    "value": {"type": "keyword", "index": False},
    "id": {"type": "keyword"},
    "key_hash": {"type": "keyword"},
    "user_id": {"type": "keyword"},
    "label": {"type": "keyword", "index": False},
    "created_at": _TIME,
    "revoked_at": _TIME,
    "owner": {"type": "keyword"},
    "expires_ms": {"type": "long"},  # a session's expiry, or a key's
    "scope": {"type": "keyword"},  # a key's: added in place to stores made before (ADDED_STORE_FIELDS)
    "unit": UNIT_FIELD,  # a lease's journal (_journal): added in place as well
}
ADDED_STORE_FIELDS = ("scope", "unit")  # fields added to the store index's mapping without a new version


class Names:
    """The aliases and concrete index names of one store (``prefix`` + kind)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.memories = f"{prefix}memories"
        self.tombstones = f"{prefix}tombstones"
        self.store = f"{prefix}store"
        self.role = f"{prefix}tenant"

    def alias(self, kind: str) -> str:
        return f"{self.prefix}{kind}"

    def concrete(self, kind: str, version: int = MAPPING_VERSION) -> str:
        return f"{self.prefix}{kind}-v{version}"


def index_body(kind: str, dim: int, shards: int, replicas: int) -> dict[str, Any]:
    """Settings and mapping of one index kind at MAPPING_VERSION (``dim``: the embedding's size)."""
    fields = {"memories": MEMORY_FIELDS, "tombstones": TOMBSTONE_FIELDS, "store": STORE_FIELDS}[kind]
    properties = dict(fields)
    settings: dict[str, Any] = {"number_of_shards": shards, "number_of_replicas": replicas}
    if kind == "memories":
        settings["knn"] = True
        # The embedding is kept once as a vector, not also as 384 numbers of JSON text in _source (7-8 KB
        # a row, most of the disk): the k-NN plugin puts it back into _source wherever _source is read
        # (get, mget, search, _reindex), so rewriting a document from its _source keeps its vector.
        settings["knn.derived_source.enabled"] = True
        settings["similarity"] = {SIMILARITY: similarity()}
        properties["embedding"] = {
            "type": "knn_vector",
            "dimension": dim,
            # lucene: faiss and nmslib need native libraries; cosine as the other backends rank
            "method": {
                "name": "hnsw",
                "engine": "lucene",
                "space_type": "cosinesimil",
                "parameters": {"m": 16, "ef_construction": 128},
            },
            # no second copy of each vector as binary doc values (1.5 KB a row): only the plugin's
            # script scoring reads them; the k-NN query and derived source read the vector itself
            "doc_values": False,
        }
    return {
        "settings": {"index": settings},
        "mappings": {
            "dynamic": "strict",
            "_meta": {"engram_mapping_version": MAPPING_VERSION, "kind": kind},
            "properties": properties,
        },
    }


def tenant_user(owner: str) -> str:
    """The internal user a tenant's requests run as (impersonated): readable when the id allows it."""
    if owner == "":
        return CATALOG_USER
    if _READABLE_NAME.fullmatch(owner):
        return TENANT_USER_PREFIXES[0] + owner
    return TENANT_USER_PREFIXES[1] + hashlib.sha256(owner.encode()).hexdigest()[:40]


def tenant_role(names: Names) -> dict[str, Any]:
    """The role of every tenant user: read and write the memory indices, reads limited by DLS to the
    user's ``owner`` attribute (and the catalog's rows). DLS does not limit writes: the store reads a
    document as the tenant before it writes it (see ``_statements``). The patterns name this store's
    versioned indices exactly (``{prefix}memories-v*``): ``{prefix}memories*`` would also grant the
    indices of another store whose prefix begins with ``{prefix}memories``."""
    own = "${attr.internal.owner}"
    return {
        "description": "Engram tenants: DLS on owner (see engram.storage.opensearch)",
        "cluster_permissions": [
            "indices:data/read/msearch",
            "indices:data/read/mget",
            "indices:data/write/bulk",
        ],
        "index_permissions": [
            {
                "index_patterns": [f"{names.memories}-v*"],
                "dls": json.dumps({"terms": {"owner": [own, ""]}}),
                "allowed_actions": ["read", "write"],
            },
            {
                "index_patterns": [f"{names.tombstones}-v*"],
                "dls": json.dumps({"term": {"owner": own}}),
                "allowed_actions": ["read", "write"],
            },
        ],
    }


def role_mapping() -> dict[str, Any]:
    return {"users": [f"{p}*" for p in TENANT_USER_PREFIXES] + [CATALOG_USER]}


def same_role(found: Any, wanted: Mapping[str, Any]) -> bool:
    """Whether the role read back grants what ``tenant_role`` sets (the plugin adds empty fields)."""
    if not isinstance(found, dict):
        return False
    if sorted(found.get("cluster_permissions", [])) != sorted(wanted["cluster_permissions"]):
        return False

    def grants(perms: Any) -> list[tuple[Any, ...]]:
        return sorted(
            (sorted(p.get("index_patterns", [])), p.get("dls"), sorted(p.get("allowed_actions", [])))
            for p in perms or []
        )

    return grants(found.get("index_permissions")) == grants(wanted["index_permissions"])
