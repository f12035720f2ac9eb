"""A whole store to JSON Lines and back, into any backend: backups, moves, model changes.

One record per line, streamed both ways, so memory stays flat however large the store is::

    {"engram_export": 2, "exported_at": "...", "embedding_model": "..."}      first line
    {"memory": {every field}, "consolidated": 0 | 1 | 2}                      tenant by tenant, write order
    {"tombstone": {"id", "user_id", "memory_type", "created_at", "forgotten_at"}}
    {"key": {"id", "user_id", "label", "created_at", "revoked_at", "scope", "expires_at"},
     "key_hash": "..."}                                                      with keys only
    {"engram_export_end": {"lines": N, "counts": {kind: n}, "sha256": "..."}}  last line

Kept: ids, times, supersession chains (both links, retractions), use counts and last use, playbook
counters and refinements, episode contexts, consolidation marks (so nothing is consolidated twice),
tombstones, and with ``keys`` the API keys (their hashes: the keys themselves go on working). Not
kept: vectors, which are derived — the import embeds with the target's models, so an export and an
import also move a store to another embedding model.

The trailer makes a cut file detectable: it counts the lines before it and holds the SHA-256 of
them (each line's text without its line break, followed by ``\n``). An import reads the file twice:
first it checks every line and the trailer, and a file cut anywhere (mid-line or on a line boundary),
with a line changed, or with anything after its trailer is refused before anything is written; then it
writes, ``import_chunk`` rows at a time. An export without a trailer (format 1, from an Engram before
it, or one cut short) is refused unless the caller passes ``allow_no_trailer`` (``engram import --all
--allow-no-trailer``): its lines are still all checked first, but a cut on a line boundary cannot be
seen. A row, tombstone or key already in the target and identical to the export's is skipped, so an
import that stopped midway (a store failure, a kill) is resumed by running it again; one that differs
is a Conflict naming it. A failure after the first write says at which line the import stopped and
what it had written.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, TextIO

from pydantic import TypeAdapter, ValidationError
from rich.progress import Progress

from engram.errors import Conflict, EngramError, ImportFileError, InvalidInput, NotFound, StorageError
from engram.models import EpisodicMemory, Memory, Tombstone, Vectors, utcnow
from engram.providers.base import Embedder
from engram.settings import EngramSettings
from engram.storage.base import ApiKeyRecord, Store, Tenant, episode_marks
from engram.validation import check_storable, validate_user_id

FORMAT_VERSION = 2  # 2: a trailer ends the file (format 1 has none; old Engrams refuse format 2 upfront)
READABLE_VERSIONS = (1, 2)
TRAILER = "engram_export_end"
PAGE = 500  # rows read per query while exporting
MAX_WAITING = 1_000_000_000  # a resumed import reads all of a tenant's unconsolidated turns, once
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
    """Write every tenant's rows and tombstones, the catalog's, with ``keys`` the API keys, and the
    trailer that counts and checksums them; returns the counts per kind."""
    tenants: list[Tenant] = [None, *engram.store.tenants()]
    return _export(engram, out, tenants, engram.store.export_keys() if keys else [])


def export_user(engram: TransferTarget, user_id: str, out: TextIO) -> dict[str, int]:
    """Everything of one user in the same format (a data-rights request): the user's rows of every
    type, tombstones and API keys (their hashes), and the trailer; no catalog row, nothing of anyone
    else. ``import_store`` reads it back like a whole store's export. NotFound (before a line is
    written) when the store holds nothing of that user: no row, tombstone or key."""
    validate_user_id(user_id)
    store = engram.store
    user_keys = [(record, key_hash) for record, key_hash in store.export_keys() if record.user_id == user_id]
    # Looked up in the tenant list, not read as the user: that would make tenant state for any id
    # asked about (OpenSearch makes a tenant's internal user at its first request).
    if not user_keys and user_id not in store.tenants():
        raise NotFound(user_id, what="user")
    return _export(engram, out, [user_id], user_keys)


def _export(
    engram: TransferTarget, out: TextIO, tenants: Sequence[Tenant], keys: Sequence[tuple[ApiKeyRecord, str]]
) -> dict[str, int]:
    store = engram.store
    counts: dict[str, int] = {}
    digest = hashlib.sha256()
    lines = 0

    def write(record: dict[str, Any]) -> None:
        nonlocal lines
        line = json.dumps(record, ensure_ascii=False) + "\n"
        try:
            line.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate, stored before session ids were checked: escaped
            line = json.dumps(record) + "\n"  # the import names its line and refuses it
        out.write(line)
        digest.update(line.encode("utf-8", "surrogatepass"))
        lines += 1

    def emit(record: dict[str, Any], kind: str) -> None:
        write(record)
        counts[kind] = counts.get(kind, 0) + 1

    header = {"engram_export": FORMAT_VERSION, "exported_at": utcnow().isoformat()}
    write(header | {"embedding_model": engram.embedder.name})
    for tenant in tenants:
        after = 0
        while page := store.scan(tenant, after, PAGE):
            for _, row, consolidated in page:
                emit({"memory": row.model_dump(mode="json"), "consolidated": consolidated}, row.memory_type)
            after = page[-1][0]
        for tombstone in store.tombstones(tenant):
            emit({"tombstone": tombstone.model_dump(mode="json")}, "tombstones")
    for record, key_hash in keys:
        emit({"key": asdict(record) | _iso(record), "key_hash": key_hash}, "keys")
    out.write(json.dumps({TRAILER: {"lines": lines, "counts": counts, "sha256": digest.hexdigest()}}) + "\n")
    return counts


def import_store(
    engram: TransferTarget, source: TextIO, *, allow_no_trailer: bool = False, progress: bool = False
) -> dict[str, int]:
    """Write an export into this store; returns the counts per kind written, with ``skipped`` (rows,
    tombstones and keys there already: a resumed import) when there were any. ``source`` is read twice
    (checked whole, then written), so it must be seekable: a file or a StringIO. A bad line names its
    number, and nothing is written unless every line and the trailer are sound. ``progress``: a
    progress bar of the lines written (a terminal's)."""
    if not source.seekable():
        raise InvalidInput("an export is read twice (checked, then written): pass a file, not a stream")
    start = source.tell()
    total = check_export(source, allow_no_trailer)
    source.seek(start)
    loader = _Loader(engram)
    source.readline()  # the header, checked
    reached = 0  # the line read last: a failure says how far the import got
    try:
        with Progress(disable=not progress, transient=True) as bar:
            task = bar.add_task("importing", total=total)
            for reached, record in _records(source):  # reached: read after the loop, in the error
                if isinstance(record, _Row):
                    loader.add_row(record.row, record.consolidated)
                elif isinstance(record, Tombstone):
                    loader.add_tombstone(record)
                elif isinstance(record, _Key):
                    loader.add_key(record.record, record.key_hash)
                bar.update(task, completed=reached)
            loader.finish()
    except EngramError as exc:
        if not loader.written:
            raise
        stopped = (
            f"the import stopped at line {reached}, after writing {loader.written} records "
            f"({_summary(loader.counts)}): {exc}. Run it again to resume: what is written is skipped"
        )
        raise (Conflict(stopped) if isinstance(exc, Conflict) else StorageError(stopped)) from exc
    return loader.counts


@dataclass
class _Row:
    row: Memory
    consolidated: int


@dataclass
class _Key:
    record: ApiKeyRecord
    key_hash: str


def _records(lines: Iterable[str]) -> Iterator[tuple[int, _Row | Tombstone | _Key | dict[str, Any]]]:
    """(line number, record) of every line after the header (read already): rows, tombstones and keys
    decoded, the trailer as its dict. A line that is not one of them is an ImportFileError naming it."""
    for number, line in enumerate(lines, start=2):
        if not line.strip():
            continue
        record = _parse(line, number)
        try:
            if "memory" in record:
                row = _MEMORY.validate_python(record["memory"])
                check_storable(getattr(row, "session_id", None), "session_id")  # not as strict as a write:
                check_storable(getattr(row, "title", None), "title")  # older rows move as they are
                yield number, _Row(row, int(record.get("consolidated", 0)))
            elif "tombstone" in record:
                yield number, Tombstone.model_validate(record["tombstone"])
            elif "key" in record:
                yield number, _Key(ApiKeyRecord(**_times(record["key"])), str(record["key_hash"]))
            elif TRAILER in record:
                yield number, record[TRAILER]
            else:
                raise ImportFileError(f"line {number}: no memory, tombstone or key")
        except (ValidationError, TypeError, KeyError, ValueError) as exc:
            if isinstance(exc, ImportFileError):
                raise
            raise ImportFileError(f"line {number}: {exc}") from None


def check_export(source: TextIO, allow_no_trailer: bool) -> int:
    """Read the whole export once, writing nothing: the header, every record, and the trailer's line
    count, counts and checksum; returns the lines. ImportFileError on the first thing wrong."""
    digest = hashlib.sha256()
    counts: dict[str, int] = {}
    lines = 0
    trailer: Any = None

    def hashed(stream: Iterable[str]) -> Iterator[str]:
        nonlocal lines
        for line in stream:
            if line.strip() and trailer is None:
                text = line.rstrip("\r\n") + "\n"
                if not text.startswith(f'{{"{TRAILER}"'):
                    digest.update(text.encode("utf-8", "surrogatepass"))
                    lines += 1
            yield line

    stream = hashed(source)
    first = next(stream, None)
    header = _parse(first, 1) if first else {}
    version = header.get("engram_export")
    if version not in READABLE_VERSIONS or isinstance(version, bool):
        raise ImportFileError(
            f"not an Engram export of format {FORMAT_VERSION} "
            f"({f'first line: {str(header)[:80]}' if first else 'the file is empty'}); "
            "`engram export` writes one"
        )
    for number, record in _records(stream):
        if trailer is not None:
            raise ImportFileError(f"line {number}: the export goes on after its trailer")
        if isinstance(record, dict):
            trailer = record
            continue
        kind = (
            record.row.memory_type
            if isinstance(record, _Row)
            else "tombstones"
            if isinstance(record, Tombstone)
            else "keys"
        )
        counts[kind] = counts.get(kind, 0) + 1
    if trailer is None:
        if allow_no_trailer:
            return lines
        raise ImportFileError(
            f"the export has no trailer after its {lines} lines: it was cut short (a partial backup: "
            "importing it would lose what came after the cut), or written by an older Engram "
            "(format 1). To import what is there anyway, pass --allow-no-trailer "
            "(Python: allow_no_trailer=True)"
        )
    if not isinstance(trailer, dict) or trailer.get("lines") != lines or trailer.get("counts") != counts:
        raise ImportFileError(
            f"the export does not match its trailer: {lines} lines holding {_summary(counts)}, the trailer "
            f"says {str(trailer)[:200]}; it was changed or put together from parts"
        )
    if trailer.get("sha256") != digest.hexdigest():
        raise ImportFileError("the export's checksum does not match its trailer: a line was changed")
    return lines


def _summary(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {kind}" for kind, n in counts.items()) or "nothing"


class _Loader:
    """Buffers rows of one tenant into chunks; a turn whose context (the turn before it) is not
    written yet waits until it is, so every context survives the trip. What the target holds already,
    identical, is skipped (a resumed import); anything else there under an export's id is a Conflict."""

    def __init__(self, engram: TransferTarget) -> None:
        self.engram = engram
        self.store = engram.store
        self.chunk_size = engram.settings.import_chunk
        self.tenant: Tenant = None
        self.rows: list[tuple[Memory, int]] = []
        self.waiting: list[tuple[Memory, int]] = []  # contexts not written yet
        self.tombstones: list[Tombstone] = []
        self.counts: dict[str, int] = {}
        self.written = 0
        self.keys_there: dict[str, tuple[ApiKeyRecord, str]] | None = None  # read at the first key
        self.unmarked: set[str] | None = None  # the tenant's waiting turns, read when a resume needs them
        self.tombstones_there: dict[str, Tombstone] | None = None  # the tenant's, read at its first

    def add_row(self, row: Memory, consolidated: int) -> None:
        if row.user_id != self.tenant:
            self.finish()
            self.tenant = row.user_id
            self.unmarked = self.tombstones_there = None
        self.rows.append((row, consolidated))
        if len(self.rows) >= self.chunk_size:
            self._write_rows()

    def add_tombstone(self, tombstone: Tombstone) -> None:
        if tombstone.user_id != self.tenant:
            self.finish()
            self.tenant = tombstone.user_id
            self.unmarked = self.tombstones_there = None
        self.tombstones.append(tombstone)
        if len(self.tombstones) >= self.chunk_size:
            self._write_tombstones()

    def add_key(self, record: ApiKeyRecord, key_hash: str) -> None:
        self.finish()
        if self.keys_there is None:
            self.keys_there = {r.id: (r, h) for r, h in self.store.export_keys()}
        there = self.keys_there.get(record.id)
        if there is not None:
            if there != (record, key_hash):
                raise Conflict(f"API key {record.id} is in the store already, and differs from the export's")
            self._count("skipped", 1)
            return
        self.store.add_key(record, key_hash)  # revoked ones arrive revoked: never live for a moment
        self._count("keys", 1)
        self.written += 1

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
        there = {
            m.id: m for m in self.store.fetch(self.tenant, sorted(ids | contexts), include_catalog=False)
        }
        known: set[str | None] = {*ids, *there, None}
        ready = [item for item in batch if final or _context_id(item[0]) in known]
        self.waiting += [item for item in batch if not final and _context_id(item[0]) not in known]
        new = [(row, mark) for row, mark in ready if row.id not in there]
        for row, _ in ready:
            if row.id in there and _dump(there[row.id]) != _dump(row):
                raise Conflict(f"memory {row.id} is in the store already, and differs from the export's")
        rows = [row for row, _ in new]
        if rows:
            vectors, tokens = self.engram.encode_rows(rows)
            self.store.insert(self.tenant, rows, vectors, None, tokens)
            self.written += len(rows)
        for row in rows:
            self._count(row.memory_type, 1)
        if len(new) < len(ready):
            self._count("skipped", len(ready) - len(new))
        self._mark(new, [item for item in ready if item[0].id in there])
        if self.waiting and not final:  # a context written just now frees the turns that quote it
            written = {row.id for row, _ in ready}
            freed = [item for item in self.waiting if _context_id(item[0]) in written]
            self.waiting = [item for item in self.waiting if _context_id(item[0]) not in written]
            self.rows += freed

    def _mark(self, new: list[tuple[Memory, int]], resumed: list[tuple[Memory, int]]) -> None:
        """Apply the consolidation marks of the turns just written, and of turns a stopped import wrote
        but did not get to mark (the mark is a second transaction)."""
        if self.tenant is None:
            return
        if any(m in (1, 2) and row.memory_type == "episodic" for row, m in resumed):
            if self.unmarked is None:
                self.unmarked = {e.id for e in self.store.waiting_episodes(self.tenant, MAX_WAITING)}
            new = new + [item for item in resumed if item[0].id in self.unmarked]
        for mark in (1, 2):  # consolidated, skipped
            marked = [row.id for row, m in new if m == mark and row.memory_type == "episodic"]
            if marked:
                self.store.apply_consolidation(
                    self.tenant, episode_marks(marked, utcnow(), self.engram.embedder.dim, skipped=mark == 2)
                )
                if self.unmarked is not None:
                    self.unmarked -= set(marked)

    def _write_tombstones(self) -> None:
        if not self.tombstones:
            return
        batch, self.tombstones = self.tombstones, []
        if self.tombstones_there is None:
            self.tombstones_there = {t.id: t for t in self.store.tombstones(self.tenant)}
        there = self.tombstones_there
        new = []
        for tombstone in batch:
            if tombstone.id not in there:
                new.append(tombstone)
            elif _dump(there[tombstone.id]) != _dump(tombstone):
                raise Conflict(
                    f"tombstone {tombstone.id} is in the store already, and differs from the export's"
                )
        if new:
            self.store.add_tombstones(self.tenant, new)
            self._count("tombstones", len(new))
            self.written += len(new)
        if len(new) < len(batch):
            self._count("skipped", len(batch) - len(new))

    def _count(self, kind: str, n: int) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + n


def _dump(record: Memory | Tombstone) -> Any:
    return record.model_dump(mode="json")


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
        "expires_at": record.expires_at.isoformat() if record.expires_at else None,
    }


def _times(raw: dict[str, Any]) -> dict[str, Any]:
    def parse(value: Any) -> datetime | None:
        if value is None:
            return None
        at = datetime.fromisoformat(str(value))
        return at if at.tzinfo else at.replace(tzinfo=UTC)

    times = {name: parse(raw.get(name)) for name in ("revoked_at", "expires_at")}
    return {**raw, "created_at": parse(raw["created_at"]), **times}
