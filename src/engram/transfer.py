"""A whole store to JSON Lines and back, into any backend: backups, moves, model changes.

One record per line, streamed both ways, so memory stays flat however large the store is::

    {"engram_export": 1, "exported_at": "...", "embedding_model": "..."}      first line
    {"memory": {every field}, "consolidated": 0 | 1 | 2}                      tenant by tenant, write order
    {"tombstone": {"id", "user_id", "memory_type", "created_at", "forgotten_at"}}
    {"key": {"id", "user_id", "label", "created_at", "revoked_at"}, "key_hash": "..."}   with keys only

Kept: ids, times, supersession chains (both links, retractions), use counts and last use, playbook
counters and refinements, episode contexts, consolidation marks (so nothing is consolidated twice),
tombstones, and with ``keys`` the API keys (their hashes: the keys themselves go on working). Not
kept: vectors, which are derived — the import embeds with the target's models, so an export and an
import also move a store to another embedding model. Importing needs ids the target does not have
(an id already there is a Conflict that names it); rows are written ``import_chunk`` at a time.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any, Protocol, TextIO

from pydantic import TypeAdapter, ValidationError

from engram.errors import ImportFileError
from engram.models import EpisodicMemory, Memory, Tombstone, Vectors, utcnow
from engram.providers.base import Embedder
from engram.settings import EngramSettings
from engram.storage.base import ApiKeyRecord, Store, Tenant, episode_marks

FORMAT_VERSION = 1
PAGE = 500  # rows read per query while exporting
_MEMORY: TypeAdapter[Memory] = TypeAdapter(Memory)


class TransferTarget(Protocol):
    """What an export reads and an import writes through: the facade (``Engram``) is one. A transfer
    touches every role of the store (rows, tombstones, keys, consolidation marks) and embeds with the
    target's models."""

    @property
    def settings(self) -> EngramSettings: ...

    @property
    def store(self) -> Store: ...

    @property
    def embedder(self) -> Embedder: ...

    def encode_rows(self, rows: Sequence[Memory]) -> tuple[Vectors, list[bytes] | None]: ...


def export_store(engram: TransferTarget, out: TextIO, *, keys: bool = False) -> dict[str, int]:
    """Write every tenant's rows and tombstones, the catalog's, and with ``keys`` the API keys."""
    store = engram.store
    counts: dict[str, int] = {}

    def emit(record: dict[str, Any], kind: str) -> None:
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
        counts[kind] = counts.get(kind, 0) + 1

    out.write(
        json.dumps(
            {
                "engram_export": FORMAT_VERSION,
                "exported_at": utcnow().isoformat(),
                "embedding_model": engram.embedder.name,
            }
        )
        + "\n"
    )
    tenants: list[Tenant] = [None, *store.tenants()]
    for tenant in tenants:
        after = 0
        while page := store.scan(tenant, after, PAGE):
            for _, row, consolidated in page:
                emit({"memory": row.model_dump(mode="json"), "consolidated": consolidated}, row.memory_type)
            after = page[-1][0]
        for tombstone in store.tombstones(tenant):
            emit({"tombstone": tombstone.model_dump(mode="json")}, "tombstones")
    if keys:
        for record, key_hash in store.export_keys():
            emit({"key": asdict(record) | _iso(record), "key_hash": key_hash}, "keys")
    return counts


def import_store(engram: TransferTarget, lines: Iterable[str]) -> dict[str, int]:
    """Write an export into this store; returns counts per kind. A bad line names its number."""
    loader = _Loader(engram)
    numbered = iter(enumerate(lines, start=1))
    first = next(numbered, None)
    header = _parse(first[1], 1) if first else {}
    if header.get("engram_export") != FORMAT_VERSION:
        raise ImportFileError(
            f"not an Engram export of format {FORMAT_VERSION} (first line: {str(header)[:80]}); "
            "`engram export` writes one"
        )
    for number, line in numbered:
        if not line.strip():
            continue
        record = _parse(line, number)
        try:
            if "memory" in record:
                loader.add_row(_MEMORY.validate_python(record["memory"]), int(record.get("consolidated", 0)))
            elif "tombstone" in record:
                loader.add_tombstone(Tombstone.model_validate(record["tombstone"]))
            elif "key" in record:
                loader.add_key(ApiKeyRecord(**_times(record["key"])), str(record["key_hash"]))
            else:
                raise ImportFileError(f"line {number}: no memory, tombstone or key")
        except (ValidationError, TypeError, KeyError, ValueError) as exc:
            raise ImportFileError(f"line {number}: {exc}") from None
    loader.finish()
    return loader.counts


class _Loader:
    """Buffers rows of one tenant into chunks; a turn whose context (the turn before it) is not
    written yet waits until it is, so every context survives the trip."""

    def __init__(self, engram: TransferTarget) -> None:
        self.engram = engram
        self.store = engram.store
        self.chunk_size = engram.settings.import_chunk
        self.tenant: Tenant = None
        self.rows: list[tuple[Memory, int]] = []
        self.waiting: list[tuple[Memory, int]] = []  # contexts not written yet
        self.tombstones: list[Tombstone] = []
        self.counts: dict[str, int] = {}

    def add_row(self, row: Memory, consolidated: int) -> None:
        if row.user_id != self.tenant:
            self.finish()
            self.tenant = row.user_id
        self.rows.append((row, consolidated))
        if len(self.rows) >= self.chunk_size:
            self._write_rows()

    def add_tombstone(self, tombstone: Tombstone) -> None:
        if tombstone.user_id != self.tenant:
            self.finish()
            self.tenant = tombstone.user_id
        self.tombstones.append(tombstone)
        if len(self.tombstones) >= self.chunk_size:
            self._write_tombstones()

    def add_key(self, record: ApiKeyRecord, key_hash: str) -> None:
        self.finish()
        self.store.add_key(record, key_hash)  # revoked ones arrive revoked: never live for a moment
        self._count("keys", 1)

    def finish(self) -> None:
        """Write what is buffered for the current tenant, waiting turns included."""
        while self.rows:  # a chunk written can free waiting turns into the next one
            self._write_rows()
        if self.waiting:  # their context is not in the export: written without it, as the store would
            self.rows, self.waiting = self.waiting, []
            self._write_rows(final=True)
        self._write_tombstones()

    def _write_rows(self, final: bool = False) -> None:
        if not self.rows:
            return
        batch, self.rows = self.rows, []
        ids = {row.id for row, _ in batch}
        contexts = {c for row, _ in batch if (c := _context_id(row)) is not None} - ids
        present = {m.id for m in self.store.fetch(self.tenant, sorted(contexts), include_catalog=False)}
        known: set[str | None] = {*ids, *present, None}
        ready = [item for item in batch if final or _context_id(item[0]) in known]
        self.waiting += [item for item in batch if not final and _context_id(item[0]) not in known]
        rows = [row for row, _ in ready]
        if rows:
            vectors, tokens = self.engram.encode_rows(rows)
            self.store.insert(self.tenant, rows, vectors, None, tokens)
        for row in rows:
            self._count(row.memory_type, 1)
        for mark in (1, 2):  # consolidated, skipped
            marked = [row.id for row, m in ready if m == mark and row.memory_type == "episodic"]
            if marked and self.tenant is not None:
                self.store.apply_consolidation(
                    self.tenant, episode_marks(marked, utcnow(), self.engram.embedder.dim, skipped=mark == 2)
                )
        if self.waiting and not final:  # a context written just now frees the turns that quote it
            written = {row.id for row in rows}
            freed = [item for item in self.waiting if _context_id(item[0]) in written]
            self.waiting = [item for item in self.waiting if _context_id(item[0]) not in written]
            self.rows += freed

    def _write_tombstones(self) -> None:
        if self.tombstones:
            batch, self.tombstones = self.tombstones, []
            self.store.add_tombstones(self.tenant, batch)
            self._count("tombstones", len(batch))

    def _count(self, kind: str, n: int) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + n


def _context_id(row: Memory) -> str | None:
    """The turn a row's context was taken from (only turns have one)."""
    return row.context_id if isinstance(row, EpisodicMemory) else None


def _parse(line: str, number: int) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ImportFileError(f"line {number} is not JSON: {exc}") from None
    if not isinstance(record, dict):
        raise ImportFileError(f"line {number} is not a JSON object")
    return record


def _iso(record: ApiKeyRecord) -> dict[str, str | None]:
    return {
        "created_at": record.created_at.isoformat(),
        "revoked_at": record.revoked_at.isoformat() if record.revoked_at else None,
    }


def _times(raw: dict[str, Any]) -> dict[str, Any]:
    def parse(value: Any) -> datetime | None:
        if value is None:
            return None
        at = datetime.fromisoformat(str(value))
        return at if at.tzinfo else at.replace(tzinfo=UTC)

    return {**raw, "created_at": parse(raw["created_at"]), "revoked_at": parse(raw.get("revoked_at"))}
