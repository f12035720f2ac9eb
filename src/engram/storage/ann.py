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

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw
import numpy as np

from engram.storage._ann_file import (
    FORMAT,
    TenantIndex,
    file_key,
    file_name,
    locked,
    new_graph,
    owner_hash,
    read_index,
    stat_key,
    write_index,
)

__all__ = ["MIN_WANTED_SHARE", "TenantIndex", "TenantIndexes", "file_name", "read_index", "write_index"]

log = logging.getLogger(__name__)

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
        if file_key(self._path(owner)) != loaded.file_key:
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

    def drop(self, owner: str) -> bool:
        """Forget the owner's index and delete its file (the owner was deleted); whether there was one."""
        with self._cond:
            if owner in self._queue:
                self._queue.remove(owner)
        with self._mutex:
            self._loaded.pop(owner, None)
            self._small.pop(owner, None)
        path = self._path(owner)
        there = path.exists()
        path.unlink(missing_ok=True)
        (self.folder / (file_name(owner) + ".lock")).unlink(missing_ok=True)  # a builder's lock file
        return there

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
            return index is not None and file_key(path) == index.file_key and _fresh(conn, owner, index)

        try:
            usable = self._load_usable(conn, owner)
            if current(usable):
                return usable
            self.folder.mkdir(mode=0o700, exist_ok=True)
            with locked(self.folder / (file_name(owner) + ".lock")) as got:
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
        if loaded is None or file_key(path) != loaded.file_key:
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
            counts = _rows(
                conn,
                "SELECT memory_type, sum(live), count(*) FROM memory_vec WHERE owner = ? GROUP BY 1",
                (owner,),
            )
            live = {str(t): int(n) for t, n, _ in counts}
            total = {str(t): int(n) for t, _, n in counts}
            n = _count(conn, "SELECT count(*) FROM memory_vec WHERE owner = ? AND rid > ?", (owner, after))
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
            found = _rows(conn, "SELECT id FROM memories WHERE rid = ? AND owner = ?", (hwm, owner))
        finally:
            conn.execute("COMMIT")
        if vectors is None or not found:
            return None
        if base is not None:
            with base.lock:
                index = base.index.copy()
        else:
            index = new_graph(vectors.shape[1])
        for start in range(0, len(keys), BUILD_CHUNK):
            if self._closed:
                return None
            # One thread: a build must not take the cores the requests are served on.
            index.add(keys[start : start + BUILD_CHUNK], vectors[start : start + BUILD_CHUNK], threads=1)
        del vectors  # the graph holds its own int8 copy
        header = {
            "format": FORMAT,
            "owner": owner_hash(owner),
            "hwm": hwm,
            "hwm_id": str(found[0][0]),
            "size": len(index),
            "live": live,
            "total": total,
        }
        payload = index.save()  # the graph's bytes: None only when saving to a path
        if payload is None:
            return None
        path = self._path(owner)
        write_index(path, header, payload)
        return TenantIndex(index, hwm, str(found[0][0]), len(index), live, total, stat_key(path.stat()))


def _hwm_holds(conn: apsw.Connection, owner: str, index: TenantIndex) -> bool:
    """Whether the owner's row at the index's high-water mark is still the one it was built with."""
    rows = _rows(conn, "SELECT id FROM memories WHERE rid = ? AND owner = ?", (index.hwm, owner))
    return bool(rows) and rows[0][0] == index.hwm_id


def _fresh(conn: apsw.Connection, owner: str, index: TenantIndex) -> bool:
    """Whether rows written since the build, and rows of the graph forgotten since, are both under
    REBUILD_FRACTION of it: the first cost an exact scan per search, the second dilute the candidates."""
    limit = REBUILD_FRACTION * index.size
    return _gone(conn, owner, index) <= limit and _delta(conn, owner, index.hwm) <= limit


def _gone(conn: apsw.Connection, owner: str, index: TenantIndex) -> int:
    """Rows of the graph forgotten since it was built (still in it, filtered out at every search)."""
    sql = "SELECT count(*) FROM memories WHERE owner = ? AND rid <= ?"  # on the narrow (owner) index
    return index.size - _count(conn, sql, (owner, index.hwm))


def _delta(conn: apsw.Connection, owner: str, hwm: int) -> int:
    """The owner's rows written after the index was built (a range of its clustered vectors)."""
    sql = "SELECT count(*) FROM memory_vec WHERE owner = ? AND rid > ?"
    return _count(conn, sql, (owner, hwm))


def _count_rows(conn: apsw.Connection, owner: str, cap: int) -> int:
    """The owner's rows, counted up to ``cap`` on the narrow (owner) index of ``memories``."""
    sql = "SELECT count(*) FROM (SELECT 1 FROM memories WHERE owner = ? LIMIT ?)"
    return _count(conn, sql, (owner, cap))


# apsw types a row as a tuple of any SQLite value; these statements know what they selected.
def _rows(conn: apsw.Connection, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    return conn.execute(sql, params).fetchall()


def _count(conn: apsw.Connection, sql: str, params: tuple[Any, ...]) -> int:
    return int(_rows(conn, sql, params)[0][0])
