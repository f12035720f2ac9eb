"""The search-engine backend: OpenSearch 2.19 (BM25 with the english analyzer, lucene k-NN), with
tenant isolation enforced by the server.

Isolation: the store runs as one service account (ENGRAM_OS_USER) and sends every tenant-scoped request
as that tenant's internal user, by impersonation (``opendistro_security_impersonate_as``). The user is
created on the tenant's first request (a random password nobody keeps; an ``owner`` attribute), and the
role ``{prefix}tenant`` limits its reads by document-level security to documents whose ``owner`` is
that attribute, plus the catalog's. Engram still sends its own owner filter (inside the k-NN clause: DLS
filters after the k nearest are taken). DLS does not cover writes, so every update and delete is of a
document first read as the tenant, written back with ``if_seq_no``/``if_primary_term``: another
tenant's id is NotFound and nothing changes (tests/storage/test_opensearch_isolation.py).

Consistency: writes refresh the shards they touched before answering (``refresh=true``, measured
against ``wait_for``: see ``engram.settings.DEFAULT_OS_REFRESH``), so the next recall sees them. This is
also what makes the units of work correct, not only recall: a unit reads the documents it will write by
``_mget`` as the tenant, and the security plugin serves a DLS user's get/mget from the last refresh, not
realtime; a write left unrefreshed would be read at its old version and the next write refused (or
worse, decided on stale content). So every write refreshes, and the settings allow no ``false``
(``OsRefresh``: ``true`` or ``wait_for``). A tenant's writes take its lease (``_client.Leases``); rules
run as units of work (``_statements``), the tenant listed (``note_tenant``) before its first commit.

Ranking differences from SQLite: the text leg is Lucene's BM25 over the english analyzer (stemmed,
stopwords dropped), each query word a phrase, as PostgreSQL's. The dense leg is Lucene's HNSW with the
owner and type filter inside the k-NN clause; Lucene searches exactly when the filter leaves fewer
documents than it would visit, which is the case for most tenants.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from engram.errors import Conflict, StorageError
from engram.models import Memory, Tombstone, Vectors
from engram.storage._rules import StoreRules, drop_quotes
from engram.storage.base import (
    CATALOG_OWNER,
    Candidates,
    LegHit,
    SearchFilter,
    Supersession,
    Tenant,
    check_insert,
    check_model,
    model_keys,
    owner_of,
)
from engram.storage.opensearch._client import (
    Leases,
    OpenSearchOptions,
    connect,
    errors,
    parse_url,
)
from engram.storage.opensearch._documents import (
    ROW_SOURCE,
    bare_fields,
    document,
    iso,
    memory,
    narrowing,
)
from engram.storage.opensearch._journal import clear_forgotten_quotes, settle
from engram.storage.opensearch._layout import (
    ADDED_STORE_FIELDS,
    KINDS,
    MAPPING_VERSION,
    STORE_FIELDS,
    Names,
    index_body,
)
from engram.storage.opensearch._lexical import bm25_score, cosine_score, stats_searches, weighted_words
from engram.storage.opensearch._meta import OpenSearchMeta
from engram.storage.opensearch._statements import OpenSearchRows
from engram.storage.opensearch._tenant_users import TenantUsers
from engram.storage.opensearch._token_cache import TokenCache, version_of
from engram.text import fts_words
from engram.validation import validate_user_id

if TYPE_CHECKING:
    from opensearchpy import OpenSearch

_log = logging.getLogger(__name__)


class OpenSearchStore(StoreRules[str]):
    """Store and KeyStore on OpenSearch; see the module docstring."""

    def __init__(self, url: str, options: OpenSearchOptions | None = None) -> None:
        self.options = options or OpenSearchOptions()
        self.endpoint = parse_url(url, self.options)
        self.names = Names(self.options.index_prefix)
        self._client: OpenSearch = connect(self.endpoint, self.options)
        self._leases = Leases(self._client, self.names.store, self._settle)
        self._tenants = TenantUsers(self._admin)
        self._token_cache = TokenCache(self.options.token_cache_mb * 2**20)
        self._one_shard = False  # an appended row is one bulk, without a lease (``insert``)
        self._settled: list[str] = []  # the tenants whose unfinished unit this open settled
        try:
            self._tenants.ensure_role(self.names, self._label)
            for kind in KINDS[1:]:
                self._ensure_index(kind, 0)
            added = {name: STORE_FIELDS[name] for name in ADDED_STORE_FIELDS}
            self._admin("PUT", f"/{self.names.store}/_mapping", {"properties": added})  # idempotent
            memories = self._index_version("memories")
            self._memories_ready = memories is not None
            if memories is not None:
                self._check_version("memories", memories)
                self._one_shard = self._shards() == 1
                self._settled = self._leases.settle_left()  # units dead writers left (lease expired)
        except BaseException:
            self._client.close()
            raise

    # -- setup -----------------------------------------------------------------------------------
    def _admin(self, method: str, path: str, body: Any = None, params: Any = None) -> Any:
        with errors():
            return self._client.transport.perform_request(method, path, body=body, params=params)

    def _index_version(self, kind: str) -> int | None:
        """The mapping version behind a kind's alias, or None if the store has no such index yet."""
        alias = self.names.alias(kind)
        with errors():  # the alias as the index too: /_alias/{name} alone would need aliases/get on '*'
            found = self._client.indices.get_alias(index=alias, name=alias, ignore=404)
        concrete = [name for name in found if name.startswith(alias + "-v")]
        return int(concrete[0].rsplit("-v", 1)[1]) if concrete else None

    def _ensure_index(self, kind: str, dim: int) -> None:
        version = self._index_version(kind)
        if version is None:
            body = index_body(kind, dim, self.options.shards, self.options.replicas)
            body["aliases"] = {self.names.alias(kind): {}}
            try:
                with errors():
                    self._client.indices.create(index=self.names.concrete(kind), body=body)
            except StorageError as exc:  # another process created it first: fine; anything else is not
                if "resource_already_exists_exception" not in str(getattr(exc.__cause__, "error", "")):
                    raise
            version = self._index_version(kind)
        self._check_version(kind, version)

    def _check_version(self, kind: str, version: int | None) -> None:
        if version == MAPPING_VERSION:
            return
        found = f"{self._label}: index {self.names.alias(kind)} has mapping version {version}"
        if version is not None and version > MAPPING_VERSION:
            raise StorageError(f"{found}, newer than this Engram's {MAPPING_VERSION}: upgrade Engram")
        # The exact call: the URL without its credentials, which migrate reads from ENGRAM_OS_*.
        call = f"migrate({self._label!r}, index_prefix={self.names.prefix!r})"
        raise StorageError(
            f"{found}, this Engram uses {MAPPING_VERSION}: stop the store's writers and migrate it: "
            f'python -c "from engram.storage.opensearch import migrate; print({call})"'
        )

    def ensure_model(self, name: str, dim: int, kind: str = "embedding") -> None:
        super().ensure_model(name, dim, kind)  # ModelError for another model: nothing is created
        # Read back: two first starts may both have read nothing; the one whose create lost (a 409 item
        # add_meta lets pass) finds the other's model here.
        check_model(self._meta().read_meta(model_keys(kind)), kind, name, dim, self._label)
        if kind == "embedding" and not self._memories_ready:
            self._ensure_index("memories", dim)  # the k-NN field needs the dimension
            self._memories_ready = True
            self._one_shard = self._shards() == 1

    def _settle(self, owner: str, unit: dict[str, Any]) -> None:
        outcome = settle(self._client, self.names.memories, unit, self.options.refresh)
        _log.warning("settled a write of %r left unfinished (%s)", owner, outcome)

    def repair(self) -> dict[str, Any]:
        """Settle every unit a dead writer left (``_journal``), as every open does: completed or rolled
        back; and clear forgotten turns' words from replies that still quote them. The tenants whose
        unit was settled (by this call, or by this store's open), the replies cleared, and how many
        leases are still held."""
        settled = self._settled + (self._leases.settle_left() if self._memories_ready else [])
        self._settled = []
        quotes = clear_forgotten_quotes(self._client, self.names, self.options.refresh)
        with errors():
            held = self._client.count(index=self.names.store, body={"query": {"term": {"kind": "lock"}}})
        return {"settled": settled, "quotes_cleared": quotes, "held": int(held["count"])}

    def _shards(self) -> int:
        """The memories index's shards: its bulks apply their items in order only on one shard."""
        with errors():
            found = self._client.indices.get_settings(
                index=self.names.alias("memories"), name="index.number_of_shards"
            )
        return int(next(iter(found.values()))["settings"]["index"]["number_of_shards"])

    # -- writes that need no lease ---------------------------------------------------------------
    def insert(
        self,
        tenant: Tenant,
        rows: Sequence[Memory],
        vectors: Vectors,
        supersede: Mapping[str, Supersession] | None = None,
        tokens: Sequence[bytes] | None = None,
    ) -> set[str]:
        """New rows that supersede nothing (an appended turn, a new fact) are one bulk request without
        the lease: they read nothing and change no other row, and the turn a row quotes is checked in
        that same bulk (``UnitOfWork.append``). Supersession reads and then changes: the shared rule."""
        if supersede or not self._one_shard:
            return super().insert(tenant, rows, vectors, supersede, tokens)
        owner = owner_of(tenant)
        check_insert(owner, rows, vectors, supersede, tokens)
        if not rows:
            return set()
        if len({row.id for row in rows}) != len(rows):
            raise Conflict("duplicate: a memory is written twice in one insert")
        blobs: Sequence[bytes | None] = tokens if tokens is not None else [None] * len(rows)
        docs = [document(r, owner, v, b) for r, v, b in zip(rows, vectors, blobs, strict=True)]
        quoting = zip(rows, docs, strict=True)
        bare = {r.id: dict(d, **bare_fields(r)) for r, d in quoting if getattr(r, "context_id", None)}
        if owner and owner not in self._tenants.noted:
            self._meta().note_tenant(owner)  # before the rows: a listed tenant may have no rows
            self._tenants.noted.add(owner)
        return set(self._rows(owner).append(docs, bare))

    def forget(
        self, tenant: Tenant, memory_id: str, at: datetime, *, revive_retracted: bool = False
    ) -> Tombstone:
        """The shared rule, then a second look for turns that quote a forgotten turn: an appended turn
        takes no lease, and one whose check passed just before the delete is seen only now."""
        tombstone = super().forget(tenant, memory_id, at, revive_retracted=revive_retracted)
        self._token_cache.drop([memory_id])
        if tombstone.memory_type == "episodic":
            with self._tenant_statements(tenant, write=True) as rows:
                drop_quotes(rows, memory_id)
        return tombstone

    # -- transactions ---------------------------------------------------------------------------
    @property
    def _label(self) -> str:
        return self.endpoint.label  # never the credentials

    def _rows(self, owner: str) -> OpenSearchRows:
        return OpenSearchRows(
            self._client,
            self.names,
            owner,
            self._tenants.user(owner),
            self.options.refresh,
            remake_user=lambda: self._tenants.remake(owner),
        )

    @contextlib.contextmanager
    def _tenant_statements(self, tenant: Tenant, *, write: bool) -> Iterator[OpenSearchRows]:
        owner = owner_of(tenant)
        rows = self._rows(owner)
        if not write:
            yield rows
            return
        with self._leases.hold(owner, None) as lease:
            rows.lease = lease
            yield rows
            if owner and owner not in self._tenants.noted and rows.pending():
                self._meta().note_tenant(owner)  # before the commit: a listed tenant may have no rows
                self._tenants.noted.add(owner)
            rows.commit()

    def _meta(self) -> OpenSearchMeta:
        return OpenSearchMeta(self._client, self.names.store, self.options.refresh)

    @contextlib.contextmanager
    def _store_statements(self, *, write: bool) -> Iterator[OpenSearchMeta]:
        yield self._meta()

    # -- search legs ---------------------------------------------------------------------------
    def _filter(self, tenant: Tenant, where: SearchFilter) -> dict[str, Any]:
        query: dict[str, Any] = {
            "filter": [
                {"terms": {"owner": where.owners(tenant)}},
                {"terms": {"memory_type": sorted(where.memory_types)}},
                *narrowing(where),
            ]
        }
        if not where.include_superseded:
            query["must_not"] = [{"exists": {"field": "superseded_by"}}]
        return query

    def _text_body(
        self, tenant: Tenant, words: list[str], stats: list[dict[str, Any]], where: SearchFilter, limit: int
    ) -> dict[str, Any] | None:
        """The text leg's search, from the owners' statistics (``_lexical``); None if no row has a word."""
        should = weighted_words(where.owners(tenant), words, stats)
        if not should:
            return None
        bool_query = {"should": should, "minimum_should_match": 1, **self._filter(tenant, where)}
        return {"size": limit, "query": {"bool": bool_query}, "sort": ["_score", {"rid": "asc"}]}

    def _stats(self, tenant: Tenant, words: list[str], where: SearchFilter) -> list[dict[str, Any]]:
        """The searches of the text leg's per-owner statistics (none without words or types)."""
        return stats_searches(where.owners(tenant), words) if words and where.memory_types else []

    def _msearch(self, tenant: Tenant, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        lines: list[dict[str, Any]] = []
        for body in bodies:
            lines += [{"index": self.names.memories}, body]
        found = self._tenants.send_as(owner_of(tenant), self._client.msearch, body=lines)
        answers: list[dict[str, Any]] = found["responses"]
        for answer in answers:
            if "error" in answer:
                raise StorageError(f"OpenSearch search failed: {answer['error']}")
        return answers

    def _vector_body(
        self, tenant: Tenant, vector: Vectors, where: SearchFilter, limit: int
    ) -> dict[str, Any]:
        knn = {
            "vector": [float(x) for x in vector],
            "k": limit,
            "filter": {"bool": self._filter(tenant, where)},
        }
        return {"size": limit, "query": {"knn": {"embedding": knn}}}

    def _search(self, tenant: Tenant, body: dict[str, Any]) -> list[dict[str, Any]]:
        found = self._tenants.send_as(
            owner_of(tenant), self._client.search, index=self.names.memories, body=body, _source=False
        )
        hits: list[dict[str, Any]] = found["hits"]["hits"]
        return hits

    def search_text(self, tenant: Tenant, query: str, where: SearchFilter, limit: int) -> list[LegHit]:
        words = fts_words(query)
        stats = self._stats(tenant, words, where)
        body = self._text_body(tenant, words, self._msearch(tenant, stats), where, limit) if stats else None
        return (
            []
            if body is None
            else [LegHit(h["_id"], bm25_score(h["_score"])) for h in self._search(tenant, body)]
        )

    def search_vector(self, tenant: Tenant, vector: Vectors, where: SearchFilter, limit: int) -> list[LegHit]:
        if not where.memory_types:
            return []
        hits = self._search(tenant, self._vector_body(tenant, vector, where, limit))
        return [LegHit(h["_id"], cosine_score(h["_score"])) for h in hits]

    def search_candidates(
        self, tenant: Tenant, query: str, vector: Vectors, where: SearchFilter, limit: int, tokens: bool
    ) -> Candidates:
        """Both legs with their rows, in two ``_msearch``: the dense leg with the text leg's per-owner
        statistics, then the text leg. Token vectors (``tokens``): the rows' and those of the turns they
        replied to, from the process's cache at the version the legs saw (``_token_cache``), the rest
        in one search more (after one for the quoted turns' versions)."""
        if not where.memory_types:
            return Candidates([], [], [], {} if tokens else None)
        words = fts_words(query)
        stats = self._stats(tenant, words, where)
        versioned = {"_source": ROW_SOURCE, "seq_no_primary_term": True}  # a version keys the token cache
        dense = self._vector_body(tenant, vector, where, limit) | versioned
        *stats_answers, dense_answer = self._msearch(tenant, [*stats, dense])
        text = self._text_body(tenant, words, stats_answers, where, limit) if stats else None
        text_hits = self._msearch(tenant, [text | versioned])[0]["hits"]["hits"] if text else []
        dense_hits = dense_answer["hits"]["hits"]
        found = {h["_id"]: h for h in [*text_hits, *dense_hits]}
        rows = [memory(h["_source"]) for h in found.values()]
        return Candidates(
            [LegHit(h["_id"], bm25_score(h["_score"])) for h in text_hits],
            [LegHit(h["_id"], cosine_score(h["_score"])) for h in dense_hits],
            rows,
            self._tokens(tenant, where, found, rows) if tokens else None,
        )

    def _tokens(
        self, tenant: Tenant, where: SearchFilter, found: Mapping[str, Any], rows: Sequence[Memory]
    ) -> dict[str, bytes]:
        """The packed token vectors of the legs' rows (``found``: their hits, with versions) and of the
        turns they quote: cached at the same version, else fetched (and cached)."""
        versions = {i: version_of(h) for i, h in found.items()}
        rows_api, owners = self._rows(owner_of(tenant)), where.owners(tenant)
        quoted = [c for m in rows if (c := getattr(m, "context_id", None)) and c not in found]
        if not self._token_cache.max_bytes:  # no cache: every row's and quoted turn's in one request
            return rows_api.tokens_by_id([*found, *quoted], owners)
        if quoted:
            versions |= rows_api.versions_by_id(quoted, owners)
        blobs = self._token_cache.get(versions)
        missing = [i for i in versions if i not in blobs]
        if missing:
            fetched = rows_api.versioned_tokens(missing, owners)
            self._token_cache.put(fetched)
            blobs |= {doc_id: blob for doc_id, _, blob in fetched}
        return {doc_id: blob for doc_id, blob in blobs.items() if blob}

    # -- what the engine does its own way ------------------------------------------------------
    def _record_use(
        self, owner: str, uses: Mapping[str, int], at: datetime, max_wait_s: float | None
    ) -> dict[str, int]:
        rows = self._rows(owner_of(owner))  # '' is refused: it is the catalog's owner value
        counts: dict[str, int] = {}
        with self._leases.hold(owner, max_wait_s) as lease:
            rows.lease = lease
            rows.record_uses(uses, iso(at), counts)
            rows.commit()
        self._token_cache.advance(rows.rewritten)  # a use count leaves the token vectors as they were
        return counts

    def delete_user(self, user_id: str) -> dict[str, int]:
        """Under the tenant's lease (no write of it meanwhile): its documents in both memory indices,
        then its keys, sessions and listing, then its internal user. Lucene keeps a deleted document's
        terms in its segment until a merge; BM25's per-owner statistics are counted from the live
        documents at each query (``_lexical``), so nothing of the owner's is stored beside them."""
        owner = validate_user_id(user_id)
        counts: dict[str, int] = {}
        with self._leases.hold(owner, None):
            for kind, index in (("memories", self.names.memories), ("tombstones", self.names.tombstones)):
                query = {"query": {"term": {"owner": owner}}}
                with errors():
                    done = self._client.delete_by_query(
                        index=index, body=query, refresh=True, conflicts="proceed", ignore=404
                    )
                if done.get("deleted"):
                    counts[kind] = int(done["deleted"])
            counts |= self._meta().erase_owner(owner)
        self._token_cache.clear()  # the cache does not know owners; a deletion is rare
        with errors():
            self._client.indices.refresh(index=self.names.store)  # the lease just released: gone at once
        if self._tenants.delete(owner):
            counts["internal_user"] = 1
        return counts

    def stats(self) -> dict[str, Any]:
        with errors():
            found = self._client.search(
                index=self.names.store, body={"size": 100, "query": {"term": {"kind": "meta"}}}
            )
            catalog = self._client.count(
                index=self.names.memories, body={"query": {"term": {"owner": CATALOG_OWNER}}}, ignore=404
            )
        meta = {h["_source"]["key"]: h["_source"]["value"] for h in found["hits"]["hits"]}
        return {"url": self._label, "counts": {"catalog": catalog.get("count", 0)}, "meta": meta}

    def close(self) -> None:
        self._client.close()
