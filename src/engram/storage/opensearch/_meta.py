"""StoreStatements on OpenSearch: meta records, API keys, sign-in sessions and the tenant list in the
``store`` index.

They run as the service account itself (no tenant's user may read this index). An API key document's
id is its hash, so ``find_key`` (every request) is one realtime GET rather than a search; a session's
is its token's hash likewise. A session document uses the mapping's fields (no new version): ``id`` the
key it was made from, ``expires_ms`` its expiry.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from engram.errors import Conflict
from engram.storage._statements import KeyLookup
from engram.storage.base import ApiKeyRecord, SessionLookup
from engram.storage.opensearch._client import Refresh, errors
from engram.storage.opensearch._documents import iso

if TYPE_CHECKING:
    from opensearchpy import OpenSearch

_PAGE = 1000


class OpenSearchMeta:
    def __init__(self, client: OpenSearch, index: str, refresh: Refresh) -> None:
        self.client = client
        self.index = index
        self.refresh = refresh

    def _search(self, query: dict[str, Any], sort: list[Any]) -> Iterator[dict[str, Any]]:
        after: list[Any] | None = None
        while True:
            body = {"query": query, "sort": sort, "size": _PAGE, **({"search_after": after} if after else {})}
            with errors():
                hits = self.client.search(index=self.index, body=body, seq_no_primary_term=True)["hits"][
                    "hits"
                ]
            yield from hits
            if len(hits) < _PAGE:
                return
            after = hits[-1]["sort"]

    def read_meta(self, keys: Sequence[str]) -> dict[str, str]:
        with errors():
            found = self.client.mget(index=self.index, body={"ids": [f"meta:{k}" for k in keys]})
        return {d["_source"]["key"]: d["_source"]["value"] for d in found["docs"] if d.get("found")}

    def add_meta(self, values: Mapping[str, str]) -> None:
        lines: list[dict[str, Any]] = []
        for key, value in values.items():
            lines += [
                {"create": {"_index": self.index, "_id": f"meta:{key}"}},
                {"kind": "meta", "key": key, "value": value},
            ]
        with errors():
            self.client.bulk(body=lines, refresh=self.refresh)  # a key recorded already stays (409 item)

    def insert_key(self, record: ApiKeyRecord, key_hash: str) -> None:
        if self.get_key(record.id) is not None:
            raise Conflict(f"duplicate: API key {record.id} exists")
        doc = {
            "kind": "key",
            "id": record.id,
            "key_hash": key_hash,
            "user_id": record.user_id,
            "label": record.label,
            "created_at": iso(record.created_at),
            "revoked_at": iso(record.revoked_at) if record.revoked_at else None,
            "scope": record.scope,
            "expires_ms": _ms(record.expires_at) if record.expires_at else None,
        }
        with errors():
            self.client.create(index=self.index, id=f"key:{key_hash}", body=doc, refresh=self.refresh)

    def get_key(self, key_id: str) -> ApiKeyRecord | None:
        found = self.select_keys("id", key_id)
        return found[0][0] if found else None

    def select_keys(self, by: KeyLookup | None, value: str | None) -> list[tuple[ApiKeyRecord, str]]:
        if by == "key_hash" and value is not None:  # the hot path: a realtime GET, no search
            with errors():
                found = self.client.get(index=self.index, id=f"key:{value}", ignore=404)
            return [(_record(found["_source"]), value)] if found.get("found") else []
        filters: list[dict[str, Any]] = [{"term": {"kind": "key"}}]
        if by is not None:
            filters.append({"term": {by: value}})
        hits = self._search({"bool": {"filter": filters}}, [{"created_at": "asc"}, {"id": "asc"}])
        return [(_record(h["_source"]), h["_source"]["key_hash"]) for h in hits]

    def revoke_key(self, key_id: str, at: datetime) -> bool:
        query = {"bool": {"filter": [{"term": {"kind": "key"}}, {"term": {"id": key_id}}]}}
        for hit in self._search(query, [{"created_at": "asc"}, {"id": "asc"}]):
            if hit["_source"].get("revoked_at"):
                return False
            source = dict(hit["_source"], revoked_at=iso(at))
            try:
                with errors():
                    self.client.index(
                        index=self.index,
                        id=hit["_id"],
                        body=source,
                        if_seq_no=hit["_seq_no"],
                        if_primary_term=hit["_primary_term"],
                        refresh=self.refresh,
                    )
            except Conflict:  # revoked meanwhile by another caller: this one revoked nothing
                return False
            return True
        return False

    def erase_owner(self, owner: str) -> dict[str, int]:
        """Delete the owner's keys, their sessions and its tenant listing; counts by kind."""
        counts: dict[str, int] = {}
        for record, _ in self.select_keys("user_id", owner):
            counts["sessions"] = counts.get("sessions", 0) + self.delete_sessions("key_id", record.id)
        for name, kind, column in (("keys", "key", "user_id"), ("tenant", "tenant", "owner")):
            query = {"bool": {"filter": [{"term": {"kind": kind}}, {"term": {column: owner}}]}}
            with errors():
                done = self.client.delete_by_query(
                    index=self.index, body={"query": query}, refresh=True, conflicts="proceed"
                )
            counts[name] = int(done.get("deleted", 0))
        return {kind: n for kind, n in counts.items() if n}

    def note_tenant(self, owner: str) -> None:
        """List a user id (ids only) for the consolidation worker and exports."""
        with errors():
            self.client.index(
                index=self.index,
                id=f"tenant:{owner}",
                body={"kind": "tenant", "owner": owner},
                refresh=self.refresh,
            )

    def tenants(self) -> list[str]:
        hits = self._search({"term": {"kind": "tenant"}}, [{"owner": "asc"}])
        return [h["_source"]["owner"] for h in hits]

    def insert_session(self, token_hash: str, key_id: str, expires_at: datetime) -> None:
        doc = {"kind": "session", "id": key_id, "expires_ms": _ms(expires_at)}
        with errors():
            self.client.create(index=self.index, id=f"session:{token_hash}", body=doc, refresh=self.refresh)

    def select_session(self, token_hash: str) -> tuple[str, datetime] | None:
        with errors():
            found = self.client.get(index=self.index, id=f"session:{token_hash}", ignore=404)
        if not found.get("found"):
            return None
        source = found["_source"]
        return source["id"], _time(source["expires_ms"])

    def delete_sessions(self, by: SessionLookup, value: str) -> int:
        if by == "token_hash":
            with errors():
                found = self.client.delete(
                    index=self.index, id=f"session:{value}", refresh=self.refresh, ignore=404
                )
            return 1 if found.get("result") == "deleted" else 0
        return self._delete_sessions({"term": {"id": value}})

    def delete_expired_sessions(self, at: datetime) -> None:
        self._delete_sessions({"range": {"expires_ms": {"lt": _ms(at)}}})

    def _delete_sessions(self, condition: dict[str, Any]) -> int:
        query = {"bool": {"filter": [{"term": {"kind": "session"}}, condition]}}
        with errors():
            done = self.client.delete_by_query(
                index=self.index, body={"query": query}, refresh=True, conflicts="proceed"
            )
        return int(done.get("deleted", 0))


def _ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def _time(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _record(source: Mapping[str, Any]) -> ApiKeyRecord:
    return ApiKeyRecord(
        id=source["id"],
        user_id=source.get("user_id"),
        label=source.get("label") or "",
        created_at=datetime.fromisoformat(source["created_at"]),
        revoked_at=datetime.fromisoformat(source["revoked_at"]) if source.get("revoked_at") else None,
        scope=source.get("scope") or "write",  # a key from before scopes: as it always was
        expires_at=_time(source["expires_ms"]) if source.get("expires_ms") else None,
    )
