"""The journal of an OpenSearch unit of work that takes two bulks, and settling one a writer left.

A unit that creates documents and changes others sends two bulks (``_unit.UnitOfWork.commit``); a
process that dies between them would leave the first without the second (a supersession's new fact
beside the live old one, a consolidation's facts with their episodes still waiting). So before its
first bulk the unit writes what it is about to do into the tenant's lease document, in the same
write that confirms the lease (no extra request): the ids it creates, each with what marks it as
this unit's (a row's ``rid``, a tombstone's ``forgotten_at``), and the ids it changes with the
versions it read them at. Releasing the lease deletes the journal with it.

A lease left with a journal (its writer died, or could not take its writes back) is settled before
anyone writes the tenant again: by the next writer that takes the expired lease over, this store's
next write when it was its own, the store's next open, or ``engram repair``. Settling reads the
changed documents (realtime, as the service account): if any is no longer at the version the unit
read, the second bulk was applied (it is one request, applied whole or refused item by item) and the
unit is complete; otherwise the unit is rolled back: the documents it created, where they are still
as it wrote them, are deleted. Either way a supersession leaves one live fact, a consolidation either
its facts with its episodes marked or neither, a forget its tombstone with the row gone or neither.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from engram.errors import StorageError
from engram.storage.opensearch._client import Refresh, errors
from engram.storage.opensearch._documents import bare_fields, memory

if TYPE_CHECKING:
    from opensearchpy import OpenSearch

    from engram.storage.opensearch._layout import Names
    from engram.storage.opensearch._unit import Kept


def journal(
    created: Sequence[tuple[str, str, dict[str, Any]]], changed: Sequence[tuple[str, Kept]]
) -> dict[str, Any]:
    """What a unit writes into its lease before its first bulk (see the module docstring)."""
    return {
        "created": [{"index": index, "id": i, "mark": _mark(source)} for index, i, source in created],
        "changed": [{"id": i, "seq": list(kept.seq or ()), "deleted": kept.deleted} for i, kept in changed],
    }


def _mark(source: dict[str, Any]) -> dict[str, Any]:
    if "rid" in source:
        return {"rid": source["rid"]}
    return {"owner": source["owner"], "forgotten_at": source["forgotten_at"]}


def settle(client: OpenSearch, memories: str, unit: dict[str, Any], refresh: Refresh) -> str:
    """Complete or roll back the unit a journal names: "complete" or "rolled back"."""
    changed = unit.get("changed", [])
    if _second_bulk_landed(client, memories, changed):
        return "complete"
    created = unit.get("created", [])
    if not created:
        return "rolled back"
    with errors():
        found = client.mget(body={"docs": [{"_index": c["index"], "_id": c["id"]} for c in created]})["docs"]
    lines = [
        {
            "delete": {
                "_index": doc["_index"],
                "_id": doc["_id"],
                "if_seq_no": doc["_seq_no"],
                "if_primary_term": doc["_primary_term"],
            }
        }
        for c, doc in zip(created, found, strict=True)
        if doc.get("found") and all(doc["_source"].get(k) == v for k, v in c["mark"].items())
    ]
    if lines:
        with errors():
            done = client.bulk(body=lines, refresh=refresh)
        items = [item for entry in done["items"] for item in entry.values()]
        bad = [item for item in items if "error" in item and item.get("status") not in (404, 409)]
        if bad:  # the journal stays: the next writer or repair tries again
            raise StorageError(f"could not roll back an interrupted write: {bad[0].get('error')}")
    return "rolled back"


def _second_bulk_landed(client: OpenSearch, memories: str, changed: list[dict[str, Any]]) -> bool:
    if not changed:
        return True  # a unit that changes nothing sends one bulk: nothing to roll back
    with errors():
        found = client.mget(
            index=memories, body={"docs": [{"_id": c["id"], "_source": False} for c in changed]}
        )
    for c, doc in zip(changed, found["docs"], strict=True):
        if (
            not doc.get("found")
            if c["deleted"]
            else [doc.get("_seq_no"), doc.get("_primary_term")] != c["seq"]
        ):
            return True
    return False


def clear_forgotten_quotes(client: OpenSearch, names: Names, refresh: Refresh) -> int:
    """Drop the quoted words of forgotten turns from the turns that still quote them; how many were
    cleared. What a forget leaves only if its process died between its commit and its second look for
    quotes (a reply appended in that instant, see ``OpenSearchStore.forget``): ``engram repair`` runs it."""
    cleared, after = 0, None
    while True:
        page: dict[str, Any] = {
            "size": 500,
            "query": {"term": {"memory_type": "episodic"}},
            "sort": [{"id": "asc"}],
            "_source": ["owner"],
        }
        with errors():
            stones = client.search(
                index=names.tombstones, body=page | ({"search_after": after} if after else {})
            )
        hits = stones["hits"]["hits"]
        if not hits:
            return cleared
        after = hits[-1]["sort"]
        owners = {h["_id"]: h["_source"]["owner"] for h in hits}
        query = {"bool": {"filter": [{"terms": {"context_id": list(owners)}}]}}
        with errors():
            quoting = client.search(
                index=names.memories,
                body={"size": 10_000, "query": query, "seq_no_primary_term": True},
                preference="_primary",
            )["hits"]["hits"]
        lines: list[dict[str, Any]] = []
        for hit in quoting:
            source = hit["_source"]
            if owners.get(source.get("context_id")) != source["owner"]:
                continue
            at = {"if_seq_no": hit["_seq_no"], "if_primary_term": hit["_primary_term"]}
            lines += [{"index": {"_index": hit["_index"], "_id": hit["_id"], **at}}]
            lines += [dict(source, **bare_fields(memory(source)))]
        if lines:
            with errors():
                done = client.bulk(body=lines, refresh=refresh)
            cleared += sum(1 for entry in done["items"] for item in entry.values() if "error" not in item)
