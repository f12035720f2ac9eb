"""The approximate index's files and graphs (see engram.storage.ann): the header format, atomic writes,
the owner's lock, and one owner's loaded graph."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import struct
import threading
import zlib
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# onnxruntime's native module must be loaded before usearch's: the other order segfaults on import
# (usearch 2.26.6 + onnxruntime 1.32, measured here); Engram loads onnxruntime for its models anyway.
import onnxruntime  # noqa: F401  # isort: skip
from usearch.index import Index  # isort: skip

MAGIC = b"ENGRAMANN1"
FORMAT = 1
# HNSW: 16 links per node and a wide build beam give near-exact neighbourhoods on 384-d sentence
# embeddings; vectors kept as int8 (a quarter of float32: ~140 MB at 250k rows) because every
# candidate is re-scored exactly from memory_vec, so quantisation only has to find them, not rank them.
CONNECTIVITY = 16
EXPANSION_ADD = 128


def file_name(owner: str) -> str:
    """The index file of an owner: a hash, so no tenant id is ever written in a name."""
    return hashlib.sha256(f"engram-ann:{owner}".encode()).hexdigest()[:32] + ".usearch"


def owner_hash(owner: str) -> str:
    """What a file's header records of its owner (never the id itself)."""
    return hashlib.sha256(owner.encode()).hexdigest()


def new_graph(ndim: int) -> Index:
    """An empty HNSW graph with the parameters above (cosine, int8)."""
    return Index(ndim=ndim, metric="cos", dtype="i8", connectivity=CONNECTIVITY, expansion_add=EXPANSION_ADD)


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
            # usearch declares a setter for it, but unannotated: mypy reads the property as read-only.
            self.index.expansion_search = count  # type: ignore[misc]
            matches = self.index.search(vector, count, threads=1)
        return [int(k) for k in matches.keys]


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
            key = stat_key(os.fstat(f.fileno()))
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
            or header["owner"] != owner_hash(owner)
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


def stat_key(st: os.stat_result) -> tuple[int, int]:
    return (st.st_ino, st.st_mtime_ns)


def file_key(path: Path) -> tuple[int, int] | None:
    try:
        return stat_key(path.stat())
    except OSError:
        return None


@contextlib.contextmanager
def locked(path: Path) -> Iterator[bool]:
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
