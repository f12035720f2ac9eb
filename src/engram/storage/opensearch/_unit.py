"""The OpenSearch store's unit of work: what stands in for a transaction (engram.storage.opensearch).

OpenSearch has no transactions. A ``UnitOfWork`` keeps the documents a rule read (as the tenant's user,
with their versions) and what the rule did to them, and sends it all when the rule is done (``commit``),
each update and delete with the ``if_seq_no``/``if_primary_term`` it was read at. A rule that raises
sends nothing. The store holds the tenant's write lease (``_client.Leases``) around a unit that writes,
which stands in for the SQL backends' row locks.

``commit`` sends new documents (rows, tombstones) first, then the updates and deletes (two bulks):

* a unit that sends both first writes its journal into its lease, in the write that confirms the
  lease is still ours (``_journal``): a process that dies between the bulks leaves a unit the next
  writer of the tenant, the next open or ``engram repair`` completes or rolls back;
* a refused or failed first bulk takes back what of it landed (nothing is left);
* before the second bulk the lease is confirmed again if a quarter of its TTL has gone since (a unit
  that outlived it, another writer having taken the tenant over, takes its new documents back and
  fails with Conflict); a unit older than half the TTL re-stamps it before its first bulk;
* a refused second bulk (409: a document changed under a writer that holds no lease) takes the new
  documents back and fails with Conflict; a second bulk whose answer was lost (a 502, a reset) is read
  back: all of it landed is success, none of it takes the new documents back and raises;
* a take-back that fails keeps the journal (the lease is not released): the unit is settled by the
  tenant's next write from this process, or by another's once the lease expires;
* appended rows (``append``) are one bulk and take no lease.

What can still be left partial: a second bulk whose items are refused in part (a 429 on some shards)
leaves the items that were applied; the store logs a warning naming the ids when a take-back fails.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engram.errors import Conflict, StorageError, StoreBusy
from engram.storage.opensearch._client import Lease, Refresh, as_user, errors
from engram.storage.opensearch._journal import journal
from engram.storage.opensearch._layout import Names
from engram.storage.opensearch._token_cache import Version, version_of

if TYPE_CHECKING:
    from opensearchpy import OpenSearch


_log = logging.getLogger(__name__)
# Before a unit's second bulk its lease is confirmed again only once this fraction of its TTL has gone
# since the confirm that journaled the unit: fresher, no other writer can have taken it over.
JOURNAL_FRESH = 0.25


@dataclass
class Kept:
    """A document read in this unit of work, and what the rule did to it."""

    source: dict[str, Any]
    seq: tuple[int, int] | None  # (seq_no, primary_term) as read; None: new in this unit
    deleted: bool = False
    changed: bool = False
    index: str = ""  # the concrete index it was read from (a version: _token_cache)


@dataclass
class UnitOfWork:
    """One owner's reads and pending writes, run as that owner's user."""

    client: OpenSearch
    names: Names
    owner: str
    user: str
    refresh: Refresh
    lease: Lease | None = None  # the tenant's write lease, held around a unit of work that writes
    kept: dict[str, Kept] = field(default_factory=dict)
    new_tombstones: list[dict[str, Any]] = field(default_factory=list)
    # id -> (version read, version written) of each document ``commit`` rewrote (not deleted)
    rewritten: dict[str, tuple[Version, Version]] = field(default_factory=dict)
    # Makes the owner's user again when another process deleted it (delete_user) while this one had
    # it cached: the request it refused (changing nothing) is then sent once more, as the new user.
    remake_user: Callable[[], str] | None = None

    def _send(self, call: Callable[..., Any], **kwargs: Any) -> Any:
        """``call(**kwargs)`` (a client method) as the owner's user."""
        try:
            with errors():
                return call(**kwargs, headers=as_user(self.user))
        except StorageError as exc:
            if self.remake_user is None or f"No such user:{self.user}" not in str(exc):
                raise
        self.user = self.remake_user()
        with errors():
            return call(**kwargs, headers=as_user(self.user))

    def _mget(self, ids: Sequence[str], source: Any = True) -> list[dict[str, Any]]:
        """The documents among ``ids`` the tenant may read; ``source``: True, or a _source filter."""
        if not ids:
            return []
        docs = [{"_id": i, "_source": source} for i in ids]
        found = self._send(self.client.mget, index=self.names.memories, body={"docs": docs})
        return [d for d in found["docs"] if d.get("found")]

    # -- commit ---------------------------------------------------------------------------------------
    def _load(self, ids: Sequence[str]) -> None:
        """Read the owner's documents among ``ids`` (as the tenant) into the unit, with their versions."""
        for doc in self._mget([i for i in ids if i not in self.kept]):
            if doc["_source"]["owner"] == self.owner:  # the catalog's rows are readable, never writable
                seq = (doc["_seq_no"], doc["_primary_term"])
                self.kept[doc["_id"]] = Kept(doc["_source"], seq, index=doc["_index"])

    def _get(self, memory_id: str) -> Kept | None:
        self._load([memory_id])
        kept = self.kept.get(memory_id)
        return None if kept is None or kept.deleted else kept

    def _change(self, memory_id: str, **values: Any) -> None:
        kept = self._get(memory_id)
        if kept is not None:
            kept.source.update(values)
            kept.changed = True

    def pending(self) -> bool:
        """Whether ``commit`` has anything to send."""
        return bool(self.new_tombstones) or any(
            (k.seq is None and not k.deleted) or (k.seq is not None and (k.changed or k.deleted))
            for k in self.kept.values()
        )

    def commit(self) -> None:
        """Send the unit's writes: new documents first, then updates and deletes at their versions."""
        created = [
            (self.names.memories, i, k.source)
            for i, k in self.kept.items()
            if k.seq is None and not k.deleted
        ]
        created += [(self.names.tombstones, t["id"], t) for t in self.new_tombstones]
        changed = [(i, k) for i, k in self.kept.items() if k.seq is not None and (k.changed or k.deleted)]
        if not created and not changed:
            return
        if self.lease is not None and created and changed:  # two bulks: journaled, in the lease's confirm
            self.lease.confirm(journal(created, changed))
        elif self.lease is not None:
            self.lease.renew_if_old()
        made = self._create(created) if created else []
        if not changed:
            return
        lines: list[dict[str, Any]] = []
        for memory_id, kept in changed:
            assert kept.seq is not None
            at = {
                "_index": self.names.memories,
                "_id": memory_id,
                "if_seq_no": kept.seq[0],
                "if_primary_term": kept.seq[1],
            }
            lines += [{"delete": at}] if kept.deleted else [{"index": at}, kept.source]
        try:
            if made and self.lease is not None:  # still ours: stamped just before the first bulk, or now
                self.lease.renew_if_old(JOURNAL_FRESH)
            items = self._bulk(lines)
        except Conflict:
            self._take_back(made)
            raise
        except Exception:
            if self._landed(changed) == len(changed):
                return  # the answer was lost, the write was not
            self._take_back(made)
            raise
        failed = _failed(items)
        for (memory_id, kept), item in zip(changed, items, strict=True):
            if not kept.deleted and "error" not in item and kept.seq is not None:
                self.rewritten[memory_id] = ((kept.index, *kept.seq), version_of(item))
        if failed:
            self._take_back(made)
            _raise_failed(
                [changed[n][0] for n, _ in failed],
                [item for _, item in failed],
                "changed meanwhile by another writer",
            )

    def append(self, docs: Sequence[dict[str, Any]], rewrite: Mapping[str, dict[str, Any]]) -> list[str]:
        """New rows in one bulk and no lease (an appended turn: nothing is read, nothing else changes).

        A row that quotes a turn outside the batch (``context_id``) is followed by an empty update of
        that turn, which the node answers 404 if the turn is gone (forgotten meanwhile). The index has
        one shard, whose bulk applies its items in order: a check that passed was applied after the
        row, and so before any forget's delete of the turn, whose refresh then shows the row to that
        forget's second look for quotes (``OpenSearchStore.forget``). A row whose check failed is
        written again as ``rewrite`` gives it (without the context), at the version its create made;
        the ids of those rows are returned. The bulk runs as the service account (the security plugin
        refuses a DLS user an update, even an empty one); it creates only the owner's new documents,
        as the tenant's user could, and the empty update changes nothing (the turn's id is one the
        tenant read)."""
        index = self.names.memories
        created = [(index, d["id"], dict(d)) for d in docs]
        batch = {d["id"] for d in docs}
        checks = [(d["id"], c) for d in docs if (c := d.get("context_id")) and c not in batch]
        lines = [line for _, i, d in created for line in ({"create": {"_index": index, "_id": i}}, d)]
        for _, context_id in checks:
            lines += [{"update": {"_index": index, "_id": context_id}}, {"doc": {}}]
        try:
            with errors():  # as the service account: the plugin refuses a DLS user any update
                done = self.client.bulk(body=lines, refresh=self.refresh)
        except Exception:
            self._take_back(self._as_sent(created))  # whatever of it landed
            raise
        items = [item for entry in done["items"] for item in entry.values()]
        made = {i: item for (_, i, _), item in zip(created, items, strict=False)}
        answers = items[len(created) :]
        refused = [(i, item) for i, item in made.items() if "error" in item]
        unsure = [item for item in answers if "error" in item and item.get("status") != 404]
        if refused or unsure:
            self._take_back([(index, i) for i, item in made.items() if "error" not in item])
            if refused:
                _raise_failed([i for i, _ in refused], [item for _, item in refused], "already there")
            _raise_failed([c for _, c in checks], unsure, "changed meanwhile by another writer")
        gone = [row for (row, _), item in zip(checks, answers, strict=True) if item.get("status") == 404]
        lines = []
        for row in gone:
            at = {"if_seq_no": made[row]["_seq_no"], "if_primary_term": made[row]["_primary_term"]}
            lines += [{"index": {"_index": index, "_id": row, **at}}, rewrite[row]]
        failed = _failed(self._bulk(lines)) if lines else []
        # 409: the forget's second look already cleared the row; anything else: the row may still quote
        # a forgotten turn, so the rows are taken back and the write fails.
        bad = [(n, item) for n, item in failed if item.get("status") != 409]
        if bad:
            self._take_back([(index, i) for i in made])
            _raise_failed([gone[n] for n, _ in bad], [item for _, item in bad], "changed meanwhile")
        return gone

    def _create(self, created: list[tuple[str, str, dict[str, Any]]]) -> list[tuple[str, str]]:
        """Create the new documents, all or none; the ones this unit made (to take back)."""
        lines = [
            line for index, i, source in created for line in ({"create": {"_index": index, "_id": i}}, source)
        ]
        try:
            failed = _failed(self._bulk(lines))
        except Exception:
            self._take_back(self._as_sent(created))  # whatever of it landed
            raise
        refused = {n: item for n, item in failed if not self._left_by_an_earlier_forget(created[n], item)}
        made = [(index, i) for n, (index, i, _) in enumerate(created) if n not in refused]
        if refused:
            self._take_back(made)
            _raise_failed([created[n][1] for n in refused], list(refused.values()), "already there")
        return made

    def _left_by_an_earlier_forget(self, doc: tuple[str, str, dict[str, Any]], item: dict[str, Any]) -> bool:
        """Whether a refused tombstone is the one a forget of this same row left when it was interrupted
        between its two bulks (the row is still there, read at its version in this unit): a retry then
        completes that forget rather than failing on it forever."""
        index, memory_id, source = doc
        kept = self.kept.get(memory_id)
        if index != self.names.tombstones or item.get("status") != 409 or kept is None:
            return False
        if kept.seq is None or not kept.deleted:
            return False
        with errors():
            found = self.client.get(index=self.names.tombstones, id=memory_id, ignore=404)
        there: dict[str, Any] = found.get("_source") or {} if found.get("found") else {}
        return bool(there) and all(there.get(k) == source[k] for k in ("owner", "memory_type"))

    def _as_sent(self, created: list[tuple[str, str, dict[str, Any]]]) -> list[tuple[str, str]]:
        """The new documents of a bulk whose answer was lost that are there as this unit sent them
        (read back, realtime, as the service account; a row's ``rid`` is unique to its write): a
        document of that id that was there before is not this unit's to take back."""
        docs = [{"_index": index, "_id": i} for index, i, _ in created]
        try:
            with errors():
                found = self.client.mget(body={"docs": docs})["docs"]
        except Exception:
            return []
        return [
            (index, i)
            for (index, i, source), doc in zip(created, found, strict=True)
            if doc.get("found") and _same(doc["_source"], source)
        ]

    def _landed(self, changed: list[tuple[str, Kept]]) -> int:
        """How many of a failed second bulk's writes landed after all (read back, realtime, as the
        service account): -1 if that cannot be told."""
        try:
            with errors():
                found = self.client.mget(
                    index=self.names.memories,
                    body={"docs": [{"_id": i, "_source": False} for i, _ in changed]},
                )
        except Exception:  # the write's own error is what the caller gets
            return -1
        now = {d["_id"]: (d["_seq_no"], d["_primary_term"]) for d in found["docs"] if d.get("found")}
        return sum(1 for i, k in changed if ((i not in now) if k.deleted else now.get(i, k.seq) != k.seq))

    def _bulk(self, lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Run a bulk request (refreshing what it wrote); its answer's items, in order."""
        done = self._send(self.client.bulk, body=lines, refresh=self.refresh)
        return [item for entry in done["items"] for item in entry.values()]

    def _take_back(self, docs: list[tuple[str, str]]) -> None:
        """Delete what this unit created (best effort: the unit's own error is the one raised)."""
        if not docs:
            return
        try:
            self._bulk([{"delete": {"_index": index, "_id": i}} for index, i in docs])
        except Exception as exc:
            _log.warning("could not take back %s after a failed write: %s", [i for _, i in docs], exc)
            if self.lease is not None and self.lease.unit is not None:
                self.lease.keep = True  # its journal stays: the tenant's next write settles the unit


def _failed(items: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """A bulk answer's items that failed, by position."""
    return [(n, item) for n, item in enumerate(items) if "error" in item]


def _same(stored: Mapping[str, Any], sent: Mapping[str, Any]) -> bool:
    """Whether a stored document is the one sent: a row by its write-order number, a tombstone whole."""
    return stored.get("rid") == sent["rid"] if "rid" in sent else dict(stored) == dict(sent)


def _raise_failed(ids: list[str], items: list[dict[str, Any]], conflict: str) -> None:
    """The error of a bulk's refused items: Conflict for 409s, StoreBusy for 429s (the node's queue is
    full: try again later), StorageError for anything else."""
    statuses = {item.get("status") for item in items}
    if statuses == {409}:
        raise Conflict(f"{conflict}: {', '.join(sorted(ids))}")
    if statuses <= {409, 429}:
        raise StoreBusy(f"OpenSearch is busy (429) and refused a write of {', '.join(sorted(ids))}")
    other = next(item for item in items if item.get("status") not in (409, 429))
    raise StorageError(f"OpenSearch refused a write: {other.get('error')}")
