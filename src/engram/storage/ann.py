"""Approximate per-tenant vector indexes (usearch HNSW) for the SQLite store's heavy tenants.

The dense leg of a small tenant is an exact scan of its vectors in ``memory_vec`` (a few ms per
thousand rows). Past ``min_rows`` rows a tenant gets its own HNSW graph, so its dense leg costs about
the same at 250k rows as at 5k. The index is a cache of ``memory_vec``, never a source of truth:

* **Files.** ``<db>.ann/<sha256(owner)>.usearch``: a header (magic, JSON with the owner's hash, the
  high-water mark, the payload's length and CRC-32) and the usearch graph. Written to a temporary file,
  fsynced, then renamed over the old one: a reader sees a whole old file or a whole new one. A file whose
  magic, owner hash, length or CRC is wrong is ignored (and rebuilt), never searched. No tenant id ever
  appears in a file name.
* **Freshness.** The index holds every row of the owner (any type, live or not) up to its high-water
  mark ``hwm`` (the highest rid at build time). Rows written later have larger rids and are searched
  exactly (the delta: ``rid > hwm``, a contiguous range of the owner's clustered vectors). Candidates
  from the graph are joined back to ``memory_vec`` and ``memories`` by (owner, rid) and re-scored
  exactly, with the type and ``live`` filters applied there: forgotten rows are gone from both tables,
  superseded ones fail ``live = 1``, another tenant's rows fail the owner test.
* **Reused rids.** SQLite reuses the largest rid after it is deleted. If the row at ``hwm`` is no
  longer the one recorded at build time, a new row may sit at a rid the graph knows under an old
  vector, below the delta: the index is then not used (exact scan) until it is rebuilt. While that
  row is still there, every later row got a larger rid.
* **Rebuilds** run on one background thread per store, at most one per owner across processes (an
  advisory file lock), when the delta passes ``REBUILD_FRACTION`` of the index (the graph is then
  extended with the new rows, on a copy), when as many of its rows were forgotten (rebuilt from the
  rows that exist), or when the index or its file is unusable. Loading a file is also done there: a
  request never waits for an index, it scans exactly until the index is ready. Other processes notice
  a new file by its inode and load it the same way.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import math
import os
import struct
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import apsw
import numpy as np

# onnxruntime's native module must be loaded before usearch's: the other order segfaults on import
# (usearch 2.26.6 + onnxruntime 1.32, measured here); Engram loads onnxruntime for its models anyway.
import onnxruntime  # noqa: F401  # isort: skip
from usearch.index import Index  # isort: skip

log = logging.getLogger(__name__)

MAGIC = b"ENGRAMANN1"
FORMAT = 1
# HNSW: 16 links per node and a wide build beam give near-exact neighbourhoods on 384-d sentence
# embeddings; vectors kept as int8 (a quarter of float32: ~140 MB at 250k rows) because every
# candidate is re-scored exactly from memory_vec, so quantisation only has to find them, not rank them.
CONNECTIVITY = 16
EXPANSION_ADD = 128
# Graph candidates per search: the top ``limit`` of the filtered rows come from at least this many
# exactly re-scored candidates (recall@10 >= 0.98 of the exact scan measured with 400: bench/bench_ann.py).
MIN_CANDIDATES = 400
# Below this share of the index, the filtered rows (e.g. only playbooks of a tenant of episodes) are
# too few for a graph search to find enough of them: scan exactly.
MIN_WANTED_SHARE = 0.1
REBUILD_FRACTION = 0.05  # rebuild once the exact delta is 5% of the index (its scan ~1/20 of the full one)
# Graphs held in memory per process, in rows (~550 bytes each at 384-d int8 with 16 links: ~550 MB);
# the least recently searched are dropped past it and reloaded from their files on demand.
MAX_LOADED_ROWS = 1_000_000
RECHECK_S = 30.0  # how long a tenant found small is not counted again
RETRY_S = 5.0  # the least time between two background refreshes of one owner (a build elsewhere, a stale one)
BUILD_CHUNK = 8192  # rows added per usearch call, between which a closing store stops the build


def file_name(owner: str) -> str:
    """The index file of an owner: a hash, so no tenant id is ever written in a name."""
    return hashlib.sha256(f"engram-ann:{owner}".encode()).hexdigest()[:32] + ".usearch"


@dataclass(frozen=True)
class TenantIndex:
    """One owner's loaded graph and what it covers."""

    index: Index
    hwm: int  # highest rid in the graph
    hwm_id: str  # memories.id at rid ``hwm`` when built (see "Reused rids")
    size: int  # rows in the graph
    live: dict[str, int]  # live rows per memory type at build time (sizes the over-fetch)
    total: dict[str, int]  # all rows per memory type at build time
    file_key: tuple[int, int]  # (inode, mtime_ns) of the file it came from
    # One search at a time per graph: whether usearch's Python binding keeps concurrent callers on
    # separate search contexts is not documented, and a search takes ~1 ms.
    lock: threading.Lock = field(default_factory=threading.Lock, compare=False)

    def wanted_share(self, memory_types: Collection[str], include_superseded: bool) -> float:
        counts = self.total if include_superseded else self.live
        return sum(counts.get(t, 0) for t in memory_types) / max(self.size, 1)

    def candidates(self, limit: int, share: float, floor: int) -> int:
        """Graph candidates to fetch so that about ``limit`` survive a filter keeping ``share`` of the
        rows (x1.5 for the filter's unevenness), never fewer than ``floor``."""
        return min(self.size, max(floor, math.ceil(1.5 * limit / max(share, 1e-9))))

    def search(self, vector: np.ndarray, count: int) -> list[int]:
        """Rids of the graph's ``count`` nearest rows; the beam is as wide as the answer (a wider beam
        is what buys recall)."""
        with self.lock:
            self.index.expansion_search = count
            matches = self.index.search(vector, count, threads=1)
        return [int(k) for k in matches.keys]


class TenantIndexes:
    """The per-owner indexes of one SQLite store: lookup on the request path, builds in the background."""

    def __init__(self, folder: Path, min_rows: int, connect: Callable[[], apsw.Connection]) -> None:
        self.folder = folder
        self.min_rows = min_rows  # 0: never build
        self.min_candidates = MIN_CANDIDATES
        self._connect = connect
        self._loaded: OrderedDict[str, TenantIndex] = OrderedDict()  # least recently searched first
        self.max_loaded_rows = MAX_LOADED_ROWS
        self._mutex = threading.Lock()  # guards _loaded (request threads and the build thread)
        self._small: dict[str, float] = {}  # owner -> when it was last found under min_rows
        self._attempted: dict[str, float] = {}  # owner -> when its last background refresh ended
        self._queue: list[str] = []
        self._busy: set[str] = set()
        self._cond = threading.Condition()
        self._worker: threading.Thread | None = None
        self._closed = False

    # -- request path -------------------------------------------------------------------------
    def get(self, conn: apsw.Connection, owner: str) -> TenantIndex | None:
        """The owner's usable index, or None (then scan exactly). Never blocks on building or loading:
        a missing, stale or changed index is queued for the background thread."""
        if self.min_rows <= 0:
            return None
        with self._mutex:
            loaded = self._loaded.get(owner)
            if loaded is not None:
                self._loaded.move_to_end(owner)
        if loaded is None:
            checked = self._small.get(owner)
            if checked is not None and time.monotonic() - checked < RECHECK_S:
                return None
            if self._path(owner).exists() or _count_rows(conn, owner, self.min_rows) >= self.min_rows:
                self._small.pop(owner, None)
                self.schedule(owner)
            else:
                if len(self._small) > 100_000:  # a bound on memory, not a cache policy
                    self._small.clear()
                self._small[owner] = time.monotonic()
            return None
        if _file_key(self._path(owner)) != loaded.file_key:
            self.schedule(owner)  # another process wrote a newer one: load it, keep this one meanwhile
        if not _hwm_holds(conn, owner, loaded):  # rids may have been reused: see the module docstring
            self.schedule(owner)
            return None
        if _delta(conn, owner, loaded.hwm) > REBUILD_FRACTION * loaded.size:
            self.schedule(owner)
        return loaded

    # -- background ---------------------------------------------------------------------------
    def schedule(self, owner: str) -> None:
        with self._cond:
            if self._closed or owner in self._queue or owner in self._busy:
                return
            if time.monotonic() - self._attempted.get(owner, -RETRY_S) < RETRY_S:
                return
            self._queue.append(owner)
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._run, name="engram-ann", daemon=True)
                self._worker.start()
            self._cond.notify_all()

    def wait_idle(self, timeout: float = 600.0) -> bool:
        """Wait until nothing is queued or building (tests, benchmarks); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._queue or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._queue.clear()
            self._cond.notify_all()
            worker = self._worker
        if worker is not None:
            worker.join(timeout=30)  # a build stops at its next chunk
        with self._mutex:
            self._loaded.clear()

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._closed or not self._queue:
                    self._worker = None
                    self._cond.notify_all()
                    return
                owner = self._queue.pop(0)
                self._busy.add(owner)
            try:
                if self.refresh(owner) is None:  # too small, or built elsewhere: not again for a while
                    self._small[owner] = time.monotonic()
            except Exception:  # a failed build leaves the exact scan in place; never kill the thread
                log.exception("approximate index build failed; the exact scan stays in use")
                self._small[owner] = time.monotonic()
            finally:
                with self._cond:
                    if len(self._attempted) > 100_000:  # a bound on memory, not a cache policy
                        self._attempted.clear()
                    self._attempted[owner] = time.monotonic()
                    self._busy.discard(owner)
                    self._cond.notify_all()

    def refresh(self, owner: str) -> TenantIndex | None:
        """Load the owner's file if usable; rebuild it (under the owner's file lock) if it is missing,
        unusable or no longer fresh (``_fresh``). Returns the index now in use, if any."""
        conn = self._connect()
        path = self._path(owner)

        def current(index: TenantIndex | None) -> bool:  # fresh, and what the file on disk holds
            return index is not None and _file_key(path) == index.file_key and _fresh(conn, owner, index)

        try:
            usable = self._load_usable(conn, owner)
            if current(usable):
                return usable
            self.folder.mkdir(mode=0o700, exist_ok=True)
            with _locked(self.folder / (file_name(owner) + ".lock")) as got:
                if not got:  # another process is building it; its file is loaded when it is there
                    return usable
                usable = self._load_usable(conn, owner)  # it may have finished meanwhile
                if current(usable):
                    return usable
                # Few forgotten rows in the graph: extend it with the new rows (seconds, not minutes
                # at 250k rows); else rebuild it from the rows that exist.
                fine = usable is not None and _gone(conn, owner, usable) <= REBUILD_FRACTION * usable.size
                base = usable if fine else None
                built = self._build(conn, owner, base)
                if built is None and base is not None and not self._closed:  # nothing new to add
                    built = self._build(conn, owner, None)
                if built is not None:
                    self._keep(owner, built)
                elif not self._closed:  # fell under min_rows: the exact scan is cheap again
                    with self._mutex:
                        self._loaded.pop(owner, None)
                    path.unlink(missing_ok=True)
                return built
        finally:
            conn.close()

    # -- files --------------------------------------------------------------------------------
    def _path(self, owner: str) -> Path:
        return self.folder / file_name(owner)

    def _load_usable(self, conn: apsw.Connection, owner: str) -> TenantIndex | None:
        """The owner's index (the one loaded, or its file if that changed) if it is whole, the owner's,
        and the row at its high-water mark is still the one it was built with."""
        with self._mutex:
            loaded = self._loaded.get(owner)
        path = self._path(owner)
        if loaded is None or _file_key(path) != loaded.file_key:
            loaded = read_index(path, owner) or loaded
        if loaded is None or not _hwm_holds(conn, owner, loaded):
            with self._mutex:  # unusable: requests scan exactly, throttled like a small tenant
                self._loaded.pop(owner, None)
            return None
        self._keep(owner, loaded)
        return loaded

    def _keep(self, owner: str, index: TenantIndex) -> None:
        """Hold ``index`` in memory, dropping the least recently searched ones past max_loaded_rows
        (they are reloaded from their files when searched again)."""
        with self._mutex:
            self._loaded[owner] = index
            self._loaded.move_to_end(owner)
            while sum(i.size for i in self._loaded.values()) > self.max_loaded_rows and len(self._loaded) > 1:
                self._loaded.popitem(last=False)

    def _build(self, conn: apsw.Connection, owner: str, base: TenantIndex | None) -> TenantIndex | None:
        """Build the owner's graph from one snapshot of its vectors and write it atomically: from
        scratch, or ``base`` plus the rows written after it (a copy: searches go on using ``base``)."""
        after = base.hwm if base is not None else 0
        conn.execute("BEGIN")  # one read snapshot: the rows, the counts and the high-water mark agree
        try:
            counts = conn.execute(
                "SELECT memory_type, sum(live), count(*) FROM memory_vec WHERE owner = ? GROUP BY 1", (owner,)
            ).fetchall()
            live = {t: int(n) for t, n, _ in counts}
            total = {t: int(n) for t, _, n in counts}
            n = conn.execute(
                "SELECT count(*) FROM memory_vec WHERE owner = ? AND rid > ?", (owner, after)
            ).fetchone()[0]
            if sum(total.values()) < max(self.min_rows, 1) or n == 0:
                return None
            keys = np.empty(n, dtype=np.uint64)
            vectors: np.ndarray | None = None
            rows = conn.execute(
                "SELECT rid, embedding FROM memory_vec WHERE owner = ? AND rid > ? ORDER BY rid",
                (owner, after),
            )
            for i, (rid, blob) in enumerate(rows):
                vector = np.frombuffer(blob, dtype=np.float32)
                if vectors is None:  # filled in place: one float32 copy of the rows, not two
                    vectors = np.empty((n, vector.size), dtype=np.float32)
                keys[i], vectors[i] = rid, vector
            hwm = int(keys[-1])
            found = conn.execute(
                "SELECT id FROM memories WHERE rid = ? AND owner = ?", (hwm, owner)
            ).fetchone()
        finally:
            conn.execute("COMMIT")
        if vectors is None or found is None:
            return None
        if base is not None:
            with base.lock:
                index = base.index.copy()
        else:
            index = Index(
                ndim=vectors.shape[1],
                metric="cos",
                dtype="i8",
                connectivity=CONNECTIVITY,
                expansion_add=EXPANSION_ADD,
            )
        for start in range(0, len(keys), BUILD_CHUNK):
            if self._closed:
                return None
            # One thread: a build must not take the cores the requests are served on.
            index.add(keys[start : start + BUILD_CHUNK], vectors[start : start + BUILD_CHUNK], threads=1)
        del vectors  # the graph holds its own int8 copy
        header = {
            "format": FORMAT,
            "owner": hashlib.sha256(owner.encode()).hexdigest(),
            "hwm": hwm,
            "hwm_id": str(found[0]),
            "size": len(index),
            "live": live,
            "total": total,
        }
        path = self._path(owner)
        write_index(path, header, index.save())
        return TenantIndex(index, hwm, str(found[0]), len(index), live, total, _file_key(path))


def write_index(path: Path, header: dict[str, object], payload: bytes | bytearray) -> None:
    """Write ``MAGIC | u32 header length | header JSON | payload`` to a temporary file, fsync it, and
    rename it over ``path`` (then fsync the folder): readers see the old file or the new one, whole."""
    header = {**header, "length": len(payload), "crc32": zlib.crc32(payload)}
    head = json.dumps(header).encode()
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(MAGIC + struct.pack("<I", len(head)) + head)
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_index(path: Path, owner: str) -> TenantIndex | None:
    """The index in ``path`` if the file is whole and is this owner's; None otherwise (never raises
    for a bad file: a truncated, foreign or corrupt file just means "scan exactly and rebuild")."""
    try:
        with open(path, "rb") as f:
            key = _stat_key(os.fstat(f.fileno()))
            data = f.read()
    except OSError:
        return None
    start = len(MAGIC) + 4
    if len(data) < start or not data.startswith(MAGIC):
        return None
    (head_len,) = struct.unpack("<I", data[len(MAGIC) : start])
    try:
        header = json.loads(data[start : start + head_len])
        payload = memoryview(data)[start + head_len :]
        if (
            header["format"] != FORMAT
            or header["owner"] != hashlib.sha256(owner.encode()).hexdigest()
            or len(payload) != header["length"]
            or zlib.crc32(payload) != header["crc32"]
        ):
            return None
        index = Index.restore(payload)  # copied into the index (view=False)
    except (ValueError, KeyError, TypeError, RuntimeError):
        return None
    if index is None or index.size != header["size"]:
        return None
    return TenantIndex(
        index, header["hwm"], header["hwm_id"], header["size"], header["live"], header["total"], key
    )


def _hwm_holds(conn: apsw.Connection, owner: str, index: TenantIndex) -> bool:
    """Whether the owner's row at the index's high-water mark is still the one it was built with."""
    row = conn.execute("SELECT id FROM memories WHERE rid = ? AND owner = ?", (index.hwm, owner)).fetchone()
    return row is not None and row[0] == index.hwm_id


def _fresh(conn: apsw.Connection, owner: str, index: TenantIndex) -> bool:
    """Whether rows written since the build, and rows of the graph forgotten since, are both under
    REBUILD_FRACTION of it: the first cost an exact scan per search, the second dilute the candidates."""
    limit = REBUILD_FRACTION * index.size
    return _gone(conn, owner, index) <= limit and _delta(conn, owner, index.hwm) <= limit


def _gone(conn: apsw.Connection, owner: str, index: TenantIndex) -> int:
    """Rows of the graph forgotten since it was built (still in it, filtered out at every search)."""
    sql = "SELECT count(*) FROM memories WHERE owner = ? AND rid <= ?"  # on the narrow (owner) index
    return index.size - int(conn.execute(sql, (owner, index.hwm)).fetchone()[0])


def _delta(conn: apsw.Connection, owner: str, hwm: int) -> int:
    """The owner's rows written after the index was built (a range of its clustered vectors)."""
    sql = "SELECT count(*) FROM memory_vec WHERE owner = ? AND rid > ?"
    return int(conn.execute(sql, (owner, hwm)).fetchone()[0])


def _count_rows(conn: apsw.Connection, owner: str, cap: int) -> int:
    """The owner's rows, counted up to ``cap`` on the narrow (owner) index of ``memories``."""
    sql = "SELECT count(*) FROM (SELECT 1 FROM memories WHERE owner = ? LIMIT ?)"
    return int(conn.execute(sql, (owner, cap)).fetchone()[0])


def _stat_key(st: os.stat_result) -> tuple[int, int]:
    return (st.st_ino, st.st_mtime_ns)


def _file_key(path: Path) -> tuple[int, int] | None:
    try:
        return _stat_key(path.stat())
    except OSError:
        return None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[bool]:
    """An exclusive advisory lock on ``path`` if free (True), else False at once: one builder per owner
    across processes; the lock goes with the process if it dies."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)
