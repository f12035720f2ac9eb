"""Token vectors kept in the process between recalls, checked against each document's version.

A row's token vectors are ~22 KB of base64 in ``_source`` (int8, the default format): fetched with the
rows of both legs, they were ~4.8 MB a recall on LoCoMo dev and most of its time (recall p50 250 ms
against 30 ms on SQLite, the search itself ~30 ms of it: docs/benchmarks.md, "Token vectors on
OpenSearch"). The legs now bring the rows without them, each with its version (``Version``);
what this cache holds at that version is used, and only the rest is fetched. Any write of a document
(a supersession, a use count, ``engram reindex``) gives it a new version, so a stale entry is never
used; it is replaced by the next fetch or evicted. A use count, which recall writes for the facts it
returns, rewrites a fact with the token vectors it had: its entry moves to the version written
(``advance``) instead of being fetched again by the next recall.

Isolation: an id is only looked up after the tenant's own search (document-level security) returned it
at that version, so the cache gives no tenant a row it could not read. A forgotten row's entry is
dropped, and deleting a user empties the cache, in the process that does it; other processes of the
store keep such entries (never served: no search returns the id again) until evicted or restarted.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

# (_index, _seq_no, _primary_term): changes with every write of the document, and with a migration to a
# new concrete index (whose sequence numbers start again)
Version = tuple[str, int, int]


def version_of(hit: Mapping[str, Any]) -> Version:
    """A search hit's version (searched with ``seq_no_primary_term``)."""
    return (hit["_index"], hit["_seq_no"], hit["_primary_term"])


ENTRY_BYTES = 400  # what an entry costs beside its blob (id, version, tuples, dict slot; ~355 measured)


class TokenCache:
    """Least recently used token blobs, at most ``max_bytes`` with ``ENTRY_BYTES`` each (0: keeps
    nothing)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, tuple[Version, bytes]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, versions: Mapping[str, Version]) -> dict[str, bytes]:
        """The blobs held for these ids at exactly these versions (b"" for a row that has none)."""
        found: dict[str, bytes] = {}
        with self._lock:
            for doc_id, version in versions.items():
                entry = self._entries.get(doc_id)
                if entry is not None and entry[0] == version:
                    self._entries.move_to_end(doc_id)
                    found[doc_id] = entry[1]
        return found

    def put(self, fetched: Iterable[tuple[str, Version, bytes]]) -> None:
        """Keep (id, version, blob) for the next recalls, dropping the least recently used past the
        budget; a blob larger than the whole budget is not kept."""
        with self._lock:
            for doc_id, version, blob in fetched:
                old = self._entries.pop(doc_id, None)
                if old is not None:
                    self._bytes -= ENTRY_BYTES + len(old[1])
                if ENTRY_BYTES + len(blob) > self.max_bytes:
                    continue
                self._entries[doc_id] = (version, blob)
                self._bytes += ENTRY_BYTES + len(blob)
            while self._bytes > self.max_bytes and self._entries:
                self._bytes -= ENTRY_BYTES + len(self._entries.popitem(last=False)[1][1])

    def advance(self, rewritten: Mapping[str, tuple[Version, Version]]) -> None:
        """Move entries held at a document's version before a rewrite that left its token vectors as
        they were (a use count) to the version it wrote: the next recall finds them; an entry at any
        other version is left to miss."""
        with self._lock:
            for doc_id, (before, after) in rewritten.items():
                entry = self._entries.get(doc_id)
                if entry is not None and entry[0] == before:
                    self._entries[doc_id] = (after, entry[1])

    def drop(self, ids: Iterable[str]) -> None:
        with self._lock:
            for doc_id in ids:
                entry = self._entries.pop(doc_id, None)
                if entry is not None:
                    self._bytes -= ENTRY_BYTES + len(entry[1])

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    @property
    def size_bytes(self) -> int:
        return self._bytes
