"""The OpenSearch store's statements for the shared rules (engram.storage._statements).

OpenSearch has no transactions, so ``OpenSearchRows`` is a unit of work: reads go to the server as the
tenant's user (document-level security shows it nothing else) and are kept; writes change the kept
documents and are sent when the rule is done (``commit``), each update and delete with the
``if_seq_no``/``if_primary_term`` it was read at. A rule that raises sends nothing: a failed
supersession writes nothing, as in the SQL backends. The store holds the tenant's write lease
(``_client.Leases``) around a write, which stands in for their row locks. The reads are ``_mget`` as
the tenant, which the security plugin serves from the last refresh (not realtime): every write
refreshes (``refresh``: ``true`` or ``wait_for``, never ``false``), or the next unit would read an old
version.

The unit of work these statements read and write through (and what a crash can still leave partial)
is ``_unit.UnitOfWork``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from engram.errors import Conflict
from engram.models import Memory, Tombstone, Vectors
from engram.storage._statements import WAITING, RowState
from engram.storage.opensearch._documents import PAGE, ROW_SOURCE, document, iso, memory, tokens_field
from engram.storage.opensearch._layout import MEMORY_FIELDS
from engram.storage.opensearch._token_cache import Version, version_of
from engram.storage.opensearch._unit import Kept, UnitOfWork

# A document's token vectors alone, named by what is left out: an ids search with ``includes`` measured
# 107 ms against 79 for 100 ids (a probe on the test node)
TOKENS_SOURCE = {"excludes": [field for field in (*MEMORY_FIELDS, "embedding") if field != "tokens"]}

if TYPE_CHECKING:
    pass


@dataclass
class OpenSearchRows(UnitOfWork):
    """TenantStatements for one owner, run as that owner's user; K is the memory id."""

    # -- reads ---------------------------------------------------------------------------------
    def search(
        self, index: str, body: dict[str, Any], limit: int, offset: int = 0, preference: str | None = None
    ) -> Iterator[dict[str, Any]]:
        """Hits of a sorted search, ``offset`` skipped, at most ``limit``, page by page (search_after)."""
        body = dict(body, track_total_hits=False)
        after: list[Any] | None = None
        skip, left = offset, limit
        while left > 0:
            size = min(PAGE, skip + left)
            page = dict(body, size=size, **({"search_after": after} if after else {}))
            preferred = {"preference": preference} if preference else {}
            found = self._send(self.client.search, index=index, body=page, **preferred)
            hits = found["hits"]["hits"]
            for hit in hits[skip:]:
                yield hit
                left -= 1
                if not left:
                    return
            skip = max(0, skip - len(hits))
            if len(hits) < size:
                return
            after = hits[-1]["sort"]

    def _mine(self, *filters: dict[str, Any]) -> dict[str, Any]:
        return {"bool": {"filter": [{"term": {"owner": self.owner}}, *filters]}}

    def rows_by_id(self, ids: Sequence[str], owners: Sequence[str]) -> list[Memory]:
        return [memory(d["_source"]) for d in self._mget(ids, ROW_SOURCE) if d["_source"]["owner"] in owners]

    def versions_by_id(self, ids: Sequence[str], owners: Sequence[str]) -> dict[str, Version]:
        """The versions of ``owners``' documents among ``ids`` that the tenant may read: a search with no
        ``_source`` (an ``_mget`` reads each document's source; LoCoMo on OpenSearch, ``rerank=False``:
        p50 99 ms with it, 73 ms so)."""
        return {h["_id"]: version_of(h) for h in self._by_ids(ids, owners, False)}

    def tokens_by_id(self, ids: Sequence[str], owners: Sequence[str]) -> dict[str, bytes]:
        return {doc_id: blob for doc_id, _, blob in self.versioned_tokens(ids, owners) if blob}

    def versioned_tokens(self, ids: Sequence[str], owners: Sequence[str]) -> list[tuple[str, Version, bytes]]:
        """(id, version, packed token vectors; b"" for none) of ``owners``' documents among ``ids`` that the
        tenant may read: a search whose ``_source`` keeps only them (LoCoMo recalls with nothing cached:
        p50 374 ms by an ``_mget`` that names what it keeps, 239 ms so)."""
        return [
            (h["_id"], version_of(h), base64.b64decode(h["_source"].get("tokens") or ""))
            for h in self._by_ids(ids, owners, TOKENS_SOURCE)
        ]

    def _by_ids(self, ids: Sequence[str], owners: Sequence[str], source: Any) -> list[dict[str, Any]]:
        query = {"bool": {"filter": [{"ids": {"values": list(ids)}}, {"terms": {"owner": list(owners)}}]}}
        body = {"query": query, "size": len(ids), "_source": source, "seq_no_primary_term": True}
        found = self._send(self.client.search, index=self.names.memories, body=body)
        hits: list[dict[str, Any]] = found["hits"]["hits"]
        return hits

    def _rows(self, query: dict[str, Any], sort: list[Any], limit: int, offset: int = 0) -> list[Memory]:
        body = {"query": query, "sort": sort, "_source": ROW_SOURCE}
        return [memory(h["_source"]) for h in self.search(self.names.memories, body, limit, offset)]

    def page(self, memory_type: str, include_superseded: bool, limit: int, offset: int) -> list[Memory]:
        query = self._typed(memory_type, include_superseded)
        return self._rows(query, [{"created_at": "desc"}, {"rid": "desc"}], limit, offset)

    def count(self, memory_type: str, include_superseded: bool, limit: int) -> int:
        body = {"query": self._typed(memory_type, include_superseded), "size": 0, "track_total_hits": limit}
        # the total is exact up to track_total_hits, that number past it
        found = self._send(self.client.search, index=self.names.memories, body=body)
        return min(int(found["hits"]["total"]["value"]), limit)

    def _typed(self, memory_type: str, include_superseded: bool) -> dict[str, Any]:
        query = self._mine({"term": {"memory_type": memory_type}})
        if not include_superseded:
            query["bool"]["must_not"] = [{"exists": {"field": "superseded_by"}}]
        return query

    def waiting(self, limit: int) -> list[Memory]:
        query = self._mine({"term": {"memory_type": "episodic"}}, {"term": {"consolidated": WAITING}})
        return self._rows(query, [{"created_at": "asc"}, {"id": "asc"}], limit)

    def without_tokens(self, limit: int) -> list[Memory]:
        return self._rows(self._mine({"term": {"has_tokens": False}}), [{"rid": "asc"}], limit)

    def scan(self, after: int, limit: int) -> list[tuple[int, Memory, int]]:
        body = {
            "query": self._mine({"range": {"rid": {"gt": after}}}),
            "sort": [{"rid": "asc"}],
            "_source": {"excludes": ["embedding", "tokens", "search_text"]},
        }
        hits = self.search(self.names.memories, body, limit)
        return [(h["_source"]["rid"], memory(h["_source"]), h["_source"]["consolidated"]) for h in hits]

    def tombstone_rows(self) -> list[tuple[str, str, datetime, datetime]]:
        body = {"query": self._mine(), "sort": [{"forgotten_at": "asc"}, {"id": "asc"}]}
        hits = self.search(self.names.tombstones, body, 10**9)
        return [
            (
                s["id"],
                s["memory_type"],
                datetime.fromisoformat(s["created_at"]),
                datetime.fromisoformat(s["forgotten_at"]),
            )
            for s in (h["_source"] for h in hits)
        ]

    # -- inserts and supersession --------------------------------------------------------------
    def lock_owner(self) -> None:
        pass  # the unit's tenant lease already keeps the owner's other writers out

    def has_row(self, memory_id: str) -> bool:
        return self._get(memory_id) is not None

    def insert_rows(self, rows: Sequence[Memory], vectors: Vectors, tokens: Sequence[bytes] | None) -> None:
        blobs: Sequence[bytes | None] = tokens if tokens is not None else [None] * len(rows)
        for row, vector, blob in zip(rows, vectors, blobs, strict=True):
            if row.id in self.kept:
                raise Conflict(f"duplicate: memory {row.id} is written twice")
            self.kept[row.id] = Kept(document(row, self.owner, vector, blob), None)

    def set_tokens(self, tokens: Mapping[str, bytes]) -> None:
        self._load(list(tokens))
        for memory_id, blob in tokens.items():
            self._change(memory_id, **tokens_field(blob))

    def lock_row(self, memory_id: str) -> RowState[str] | None:
        kept = self._get(memory_id)
        return None if kept is None else _state(kept.source)

    def mark_superseded(self, key: str, by: str, at: datetime, retract: bool) -> None:
        self._change(key, superseded_by=by, superseded_at=iso(at), retracted=int(retract))

    # -- forgetting ----------------------------------------------------------------------------
    def delete_row(self, memory_id: str) -> RowState[str] | None:
        kept = self._get(memory_id)
        if kept is None:
            return None
        if kept.seq is None:
            del self.kept[memory_id]
        else:
            kept.deleted = True
        return _state(kept.source)

    def quoting(self, episode_id: str) -> list[tuple[str, Memory]]:
        query = self._mine({"term": {"memory_type": "episodic"}}, {"term": {"context_id": episode_id}})
        body = {"query": query, "sort": [{"rid": "asc"}], "_source": False}
        # On the primary: it has every row whose bulk was applied before this forget's (a replica may
        # not yet), which the second look for quotes relies on (``OpenSearchStore.forget``).
        ids = [h["_id"] for h in self.search(self.names.memories, body, 10**9, preference="_primary")]
        ids += [i for i, k in self.kept.items() if k.source.get("context_id") == episode_id and i not in ids]
        self._load(ids)
        found = ((i, self._get(i)) for i in ids)
        return [
            (i, memory(k.source))
            for i, k in found
            if k is not None and k.source.get("context_id") == episode_id
        ]

    def set_context(self, key: str, attrs: str, keyword_text: str) -> None:
        values = json.loads(attrs)
        self._change(key, attrs=values, search_text=keyword_text, context_id=values.get("context_id"))

    def revive(self, memory_id: str, superseded_by: str, retracted: bool) -> None:
        kept = self._get(memory_id)
        if (
            kept is not None
            and kept.source.get("superseded_by") == superseded_by
            and (retracted or not kept.source.get("retracted"))
        ):
            self._change(memory_id, superseded_by=None, superseded_at=None, retracted=0)

    def relink(self, memory_id: str, superseded_by: str, to: str) -> bool:
        kept = self._get(memory_id)
        if kept is None or kept.source.get("superseded_by") != superseded_by:
            return False
        self._change(memory_id, superseded_by=to)
        return True

    def set_supersedes(self, memory_id: str, supersedes: str) -> None:
        self._change(memory_id, supersedes=supersedes)

    def add_tombstones(self, tombstones: Sequence[Tombstone]) -> None:
        ids = [t.id for t in tombstones] + [t["id"] for t in self.new_tombstones]
        if len(set(ids)) != len(ids):  # refused before anything is sent, as a transaction would
            repeated = sorted({i for i in ids if ids.count(i) > 1})
            raise Conflict(f"duplicate: tombstone {', '.join(repeated)} is written twice")
        for t in tombstones:
            self.new_tombstones.append(
                {
                    "id": t.id,
                    "owner": self.owner,
                    "memory_type": t.memory_type,
                    "created_at": iso(t.created_at),
                    "forgotten_at": iso(t.forgotten_at),
                }
            )

    # -- consolidation -------------------------------------------------------------------------
    def claim_waiting(self, episode_ids: Sequence[str]) -> int:
        self._load(list(dict.fromkeys(episode_ids)))
        found = (self._get(i) for i in dict.fromkeys(episode_ids))
        return sum(
            1
            for k in found
            if k is not None and k.source["memory_type"] == "episodic" and k.source["consolidated"] == WAITING
        )

    def lock_typed(self, memory_id: str, memory_type: str) -> tuple[str, Any] | None:
        kept = self._get(memory_id)
        if kept is None or kept.source["memory_type"] != memory_type:
            return None
        return memory_id, kept.source["attrs"]

    def merge_fact(self, key: str, attrs: str, at: datetime) -> None:
        kept = self._get(key)
        if kept is not None:
            self._change(
                key, attrs=json.loads(attrs), use_count=kept.source["use_count"] + 1, last_used_at=iso(at)
            )

    def playbook_succeeded(self, key: str, at: datetime) -> None:
        kept = self._get(key)
        if kept is not None:
            self._change(key, success_count=kept.source["success_count"] + 1, last_success_at=iso(at))

    def playbook_failed(self, key: str, attrs: str) -> None:
        kept = self._get(key)
        if kept is not None:
            self._change(key, failure_count=kept.source["failure_count"] + 1, attrs=json.loads(attrs))

    def record_uses(self, uses: Mapping[str, int], at: str, counts: dict[str, int]) -> None:
        """Add uses to the owner's facts and move last_used_at up to ``at``; ``counts`` gets each
        updated fact's use_count (sent by ``commit``)."""
        self._load(list(uses))
        for memory_id, n in uses.items():
            kept = self._get(memory_id)
            if kept is None or kept.source["memory_type"] != "semantic":
                continue
            last = kept.source.get("last_used_at")
            newer = last is None or datetime.fromisoformat(last) < datetime.fromisoformat(at)
            self._change(
                memory_id, use_count=kept.source["use_count"] + n, last_used_at=at if newer else last
            )
            counts[memory_id] = kept.source["use_count"]

    def mark_episodes(self, episode_ids: Sequence[str], state: int) -> None:
        self._load(list(episode_ids))
        for memory_id in episode_ids:
            kept = self._get(memory_id)
            if kept is not None and kept.source["memory_type"] == "episodic":
                self._change(memory_id, consolidated=state)


def _state(source: Mapping[str, Any]) -> RowState[str]:
    return RowState(
        source["id"],
        source["memory_type"],
        datetime.fromisoformat(source["created_at"]),
        source.get("supersedes"),
        source.get("superseded_by"),
    )
