"""The per-tenant HNSW index of the SQLite store (engram.storage.ann), against the exact scan.

Real SQLite files, real embeddings from the packaged model; the threshold is set low (``MIN_ROWS``) so
a tenant of a few hundred rows is "heavy". The reference is always a second store object on the same
file with the index off (``ann_min_rows=0``): the exact scan the product used before.
"""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from engram.models import EpisodicMemory, Memory, SemanticMemory, new_id
from engram.providers.onnx import OnnxEmbedder
from engram.storage.ann import file_name, read_index
from engram.storage.base import SearchFilter, Supersession
from engram.storage.sqlite import SQLiteStore

MIN_ROWS = 200
CANDIDATES = 40  # graph candidates per search, far below the tenants' sizes: the graph really decides
ALL = SearchFilter(frozenset({"episodic", "semantic", "procedural", "catalog"}))
WITH_HISTORY = SearchFilter(ALL.memory_types, include_superseded=True)
NOW = datetime(2026, 1, 1, tzinfo=UTC)

_PARTS = (
    ["I", "my sister", "our team", "the landlord", "my doctor", "the kids", "my manager"],
    ["booked", "cancelled", "moved", "fixed", "forgot", "bought", "painted", "lost"],
    ["the hub", "a flight to Lisbon", "the dentist appointment", "a yoga class", "the blue car", "a guitar"],
    ["yesterday", "last week", "on Monday", "in May", "this morning", "two years ago"],
)


def sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(p) for p in _PARTS) + f" (note {seed}-{i})" for i in range(n)]


@pytest.fixture(scope="module")
def corpus(embedder: OnnxEmbedder) -> dict[str, tuple[list[str], np.ndarray]]:
    """Texts and real embeddings: two heavy tenants, one light one, and later writes."""
    out = {}
    for name, n, seed in (("alice", 320, 1), ("bob", 260, 2), ("carol", 30, 3), ("later", 12, 4)):
        texts = sentences(n, seed)
        out[name] = (texts, np.asarray(embedder.embed_documents(texts), dtype=np.float32))
    return out


def _rows(user: str, texts: list[str], semantic_every: int = 10) -> list[Memory]:
    """Mostly turns, every ``semantic_every``-th row a fact (so supersession can be tested)."""
    rows: list[Memory] = []
    for i, text in enumerate(texts):
        if i % semantic_every == semantic_every - 1:
            rows.append(SemanticMemory(id=new_id("semantic"), text=text, user_id=user, created_at=NOW))
        else:
            rows.append(
                EpisodicMemory(id=new_id("episodic"), text=text, user_id=user, created_at=NOW, timestamp=NOW)
            )
    return rows


@pytest.fixture
def stores(
    tmp_path: Path, corpus: dict[str, tuple[list[str], np.ndarray]], embedder: OnnxEmbedder
) -> Iterator[tuple[SQLiteStore, SQLiteStore, dict[str, list[Memory]]]]:
    """(store with the index, the same file with exact scans only, rows written per user)."""
    approx = SQLiteStore(tmp_path / "s.db", ann_min_rows=MIN_ROWS)
    approx.ann.min_candidates = CANDIDATES
    exact = SQLiteStore(tmp_path / "s.db", ann_min_rows=0)
    approx.ensure_model(embedder.name, embedder.dim)
    written = {}
    for user in ("carol", "bob", "alice"):  # alice last: her rows hold the largest rids
        texts, vectors = corpus[user]
        written[user] = _rows(user, texts)
        approx.insert(user, written[user], vectors)
    yield approx, exact, written
    approx.close()
    exact.close()


def ids(
    store: SQLiteStore, user: str, vector: np.ndarray, k: int = 10, where: SearchFilter = ALL
) -> list[str]:
    return [h.id for h in store.search_vector(user, vector, where, k)]


def test_a_heavy_tenant_gets_an_index_that_agrees_with_the_exact_scan(stores, corpus, embedder):
    approx, exact, _ = stores
    query = np.asarray(
        embedder.embed_query("when did my sister book the flight to Lisbon?"), dtype=np.float32
    )
    assert ids(approx, "alice", query) == ids(exact, "alice", query)  # exact until the index is ready
    approx.ann.wait_idle()  # that first search queued the build in the background
    folder = approx.path.with_name("s.db.ann")
    assert (folder / file_name("alice")).is_file()
    assert not (folder / file_name("bob")).exists()  # built when bob first searches
    assert set(approx.ann._loaded) == {"alice"}
    ids(approx, "bob", query)
    ids(approx, "carol", query)
    approx.ann.wait_idle()
    assert (folder / file_name("bob")).is_file()
    assert not (folder / file_name("carol")).exists()  # 30 rows: under the threshold, never indexed
    assert all("alice" not in p.name and "bob" not in p.name for p in folder.iterdir())
    agree = []
    for text in sentences(20, 9):
        q = np.asarray(embedder.embed_query(text), dtype=np.float32)
        got, want = ids(approx, "alice", q), ids(exact, "alice", q)
        agree.append(len(set(got) & set(want)) / 10)
        assert got[0] == want[0]
    assert np.mean(agree) >= 0.98
    # The scores are the exact cosine (candidates are re-scored from memory_vec), not the int8 graph's.
    got = approx.search_vector("alice", query, ALL, 5)
    want = exact.search_vector("alice", query, ALL, 5)
    assert [round(h.score, 5) for h in got] == [round(h.score, 5) for h in want]


def test_rows_written_after_the_build_are_found(stores, corpus):
    approx, exact, _ = stores
    assert approx.ann.refresh("alice") is not None
    texts, vectors = corpus["later"]
    new = _rows("alice", texts, semantic_every=100)
    approx.insert("alice", new, vectors)
    for row, vector in zip(new, vectors, strict=True):
        found = ids(approx, "alice", vector)
        assert found[0] == row.id
        assert found == ids(exact, "alice", vector)


def test_a_graph_with_few_forgotten_rows_is_extended_not_rebuilt(stores, corpus):
    approx, exact, written = stores
    first = approx.ann.refresh("alice")
    assert first is not None
    gone = written["alice"][:5]  # under 5% of the graph
    for row in gone:
        approx.forget("alice", row.id, NOW)
    texts = corpus["later"][0] + corpus["carol"][0][:12]
    vectors = np.concatenate([corpus["later"][1], corpus["carol"][1][:12]])
    approx.insert("alice", _rows("alice", texts, semantic_every=100), vectors)  # 24 rows: past 5%
    extended = approx.ann.refresh("alice")
    assert extended is not None and extended is not first
    assert extended.size == 320 + 24  # the forgotten rows are still in it: an extension, not a rebuild
    assert extended.hwm > first.hwm
    assert approx.ann.refresh("alice") is extended  # fresh now: nothing to do
    for vector in (*vectors, *corpus["alice"][1][:5]):
        found = ids(approx, "alice", vector)
        assert not {r.id for r in gone} & set(found)
        assert found[0] == ids(exact, "alice", vector)[0]


def test_superseded_and_forgotten_rows_never_come_back(stores, corpus):
    approx, exact, written = stores
    assert approx.ann.refresh("alice") is not None
    vectors = corpus["alice"][1]
    old = written["alice"][9]  # a fact, in the graph
    replacement = SemanticMemory(id=new_id("semantic"), text="replaced", user_id="alice", created_at=NOW)
    approx.insert(
        "alice", [replacement], vectors[9:10], supersede={replacement.id: Supersession(old.id, False, NOW)}
    )
    assert old.id not in ids(approx, "alice", vectors[9], 80)
    assert old.id in ids(approx, "alice", vectors[9], 80, WITH_HISTORY)  # history still sees it
    # Forget the 100 rows nearest to a query: the graph's first candidates are then all gone, and
    # the search must widen to find 80 rows that still exist.
    nearest = ids(exact, "alice", vectors[0], 100, WITH_HISTORY)
    for memory_id in nearest:
        approx.forget("alice", memory_id, NOW)
    for vector in (vectors[0], *vectors[::8]):
        found = ids(approx, "alice", vector, 80, WITH_HISTORY)
        assert not set(nearest) & set(found)
        assert len(found) == 80
        assert found[:10] == ids(exact, "alice", vector, 10, WITH_HISTORY)
    # The widened search queued a rebuild: the new graph holds the rows that are left.
    approx.ann.wait_idle()
    assert approx.ann._loaded["alice"].size == 320 + 1 - 100
    assert ids(approx, "alice", vectors[0]) == ids(exact, "alice", vectors[0])
    # Under min_rows again, the tenant goes back to the exact scan and its file is removed.
    for memory_id in ids(exact, "alice", vectors[1], 30, WITH_HISTORY):
        approx.forget("alice", memory_id, NOW)
    assert approx.ann.refresh("alice") is None
    assert "alice" not in approx.ann._loaded and not (approx.ann.folder / file_name("alice")).exists()
    assert ids(approx, "alice", vectors[1], 80) == ids(exact, "alice", vectors[1], 80)


def test_a_reused_rid_turns_the_index_off_until_it_is_rebuilt(stores, corpus):
    approx, exact, written = stores
    built = approx.ann.refresh("alice")
    assert built is not None
    alice_ids = {r.id for r in written["alice"]}
    old_vector = corpus["alice"][1][-1]
    # Forgetting the row with the largest rid (alice's high-water row) lets SQLite hand that rid to
    # the next row, where the graph still holds the forgotten row's vector and the delta does not look.
    approx.forget("alice", written["alice"][-1].id, NOW)
    texts, vectors = corpus["later"]
    new = _rows("alice", texts[:1], semantic_every=100)
    approx.insert("alice", new, vectors[:1])
    rid = approx._conn().execute("SELECT rid FROM memories WHERE id = ?", (new[0].id,)).fetchone()[0]
    assert rid == built.hwm  # the situation under test did arise
    assert approx.ann.get(approx._conn(), "alice") is None  # not trusted: exact scan
    assert ids(approx, "alice", vectors[0])[0] == new[0].id
    approx.ann.wait_idle()  # the rebuild it queued
    rebuilt = approx.ann.get(approx._conn(), "alice")
    assert rebuilt is not None and rebuilt.hwm_id == new[0].id
    assert ids(approx, "alice", vectors[0]) == ids(exact, "alice", vectors[0])
    # The same with another tenant's row at the reused rid: alice never sees bob's row.
    approx.forget("alice", new[0].id, NOW)
    bob_row = _rows("bob", texts[1:2], semantic_every=100)
    approx.insert("bob", bob_row, old_vector[None, :])
    assert (
        approx._conn().execute("SELECT rid FROM memories WHERE id = ?", (bob_row[0].id,)).fetchone()[0] == rid
    )
    for vector in (old_vector, vectors[0]):
        assert set(ids(approx, "alice", vector, 80)) <= alice_ids
        assert ids(approx, "alice", vector, 80) == ids(exact, "alice", vector, 80)


def test_another_tenants_rows_never_come_back(stores, corpus):
    approx, _, written = stores
    assert approx.ann.refresh("alice") is not None and approx.ann.refresh("bob") is not None
    alice_ids = {r.id for r in written["alice"]}
    for vector in corpus["bob"][1][:30]:  # bob's own vectors, asked as alice
        assert set(ids(approx, "alice", vector, 80)) <= alice_ids
    # bob's graph under alice's file name (a stale or misplaced file) is refused: the header names bob.
    folder = approx.path.with_name("s.db.ann")
    (folder / file_name("alice")).write_bytes((folder / file_name("bob")).read_bytes())
    assert read_index(folder / file_name("alice"), "alice") is None
    other = SQLiteStore(approx.path, ann_min_rows=MIN_ROWS)
    try:
        for vector in corpus["bob"][1][:10]:
            assert set(ids(other, "alice", vector, 80)) <= alice_ids
        other.ann.wait_idle()  # rebuilt alice's from her rows
        assert set(ids(other, "alice", corpus["bob"][1][0], 80)) <= alice_ids
        assert other.ann._loaded["alice"].size == 320
    finally:
        other.close()


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "flipped"])
def test_a_half_written_index_file_is_never_used(stores, corpus, damage):
    approx, exact, _ = stores
    assert approx.ann.refresh("alice") is not None
    path = approx.path.with_name("s.db.ann") / file_name("alice")
    whole = path.read_bytes()
    damaged = {
        "truncated": whole[: len(whole) // 2],
        "garbage": whole[:200] + bytes(len(whole) - 200),  # right header, zeroed graph
        "empty": b"",
        "flipped": whole[: len(whole) // 2]
        + bytes([whole[len(whole) // 2] ^ 0xFF])
        + whole[len(whole) // 2 + 1 :],
    }[damage]
    path.write_bytes(damaged)
    assert read_index(path, "alice") is None
    other = SQLiteStore(approx.path, ann_min_rows=MIN_ROWS)
    try:
        vector = corpus["alice"][1][3]
        assert ids(other, "alice", vector) == ids(exact, "alice", vector)
        other.ann.wait_idle()
        assert read_index(path, "alice") is not None  # rebuilt whole
        assert ids(other, "alice", vector)[0] == ids(exact, "alice", vector)[0]
    finally:
        other.close()
    # Damaged under a process that has the graph loaded: it keeps searching that one and writes a
    # whole file again.
    path.write_bytes(damaged)
    assert ids(approx, "alice", vector)[0] == ids(exact, "alice", vector)[0]
    approx.ann.wait_idle()
    assert read_index(path, "alice") is not None


def test_a_small_tenant_keeps_the_exact_scan(stores, corpus):
    approx, exact, _ = stores
    for vector in corpus["carol"][1]:
        assert approx.search_vector("carol", vector, ALL, 80) == exact.search_vector("carol", vector, ALL, 80)
    approx.ann.wait_idle()
    assert "carol" not in approx.ann._loaded
    assert not approx.path.with_name("s.db.ann").exists()  # nothing was built at all


def test_a_type_filter_on_a_heavy_tenant(stores, corpus, embedder):
    """Facts are 10% of alice's rows: the graph is over-fetched for them (or scanned exactly below
    MIN_WANTED_SHARE); either way the top hits are the exact scan's."""
    approx, exact, _ = stores
    assert approx.ann.refresh("alice") is not None
    facts = SearchFilter(frozenset({"semantic"}))
    for text in sentences(10, 11):
        q = np.asarray(embedder.embed_query(text), dtype=np.float32)
        got, want = ids(approx, "alice", q, 5, facts), ids(exact, "alice", q, 5, facts)
        assert len(got) == 5 and got[0] == want[0]


CHILD = textwrap.dedent(
    """
    import sys
    from datetime import UTC, datetime
    import numpy as np
    from engram.models import EpisodicMemory
    from engram.storage.sqlite import SQLiteStore

    path, new_id, forget_id = sys.argv[1:4]
    vector = np.frombuffer(bytes.fromhex(sys.argv[4]), dtype=np.float32)
    now = datetime(2026, 1, 2, tzinfo=UTC)
    rng = np.random.default_rng(5)
    fillers = rng.normal(size=(20, vector.size)).astype(np.float32)  # far from everything in 384-d
    vectors = np.concatenate([vector[None, :], fillers / np.linalg.norm(fillers, axis=1, keepdims=True)])
    store = SQLiteStore(path, ann_min_rows=200)
    rows = [EpisodicMemory(id=new_id if i == 0 else f"{new_id[:-4]}f{i:03d}", text=f"from the child {i}",
                           user_id="alice", created_at=now, timestamp=now) for i in range(21)]
    store.insert("alice", rows, vectors)  # 21 rows: past the rebuild fraction of the parent's graph
    store.forget("alice", forget_id, now)
    assert store.ann.refresh("alice") is not None  # this process has its own graph now
    store.close()
    """
)


def test_two_processes_on_one_file_stay_correct(stores, corpus):
    approx, exact, written = stores
    first = approx.ann.refresh("alice")
    assert first is not None
    vectors = corpus["alice"][1]
    forget = written["alice"][5]
    new = new_id("episodic")
    probe = vectors[5] * 0.5 + vectors[6] * 0.5
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            str(approx.path),
            new,
            forget.id,
            probe.astype(np.float32).tobytes().hex(),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0, child.stderr
    # This process still holds its older graph: the child's row comes from the delta, the forgotten
    # row is filtered on the rows.
    assert approx.ann._loaded["alice"] is first
    found = ids(approx, "alice", probe)
    assert found[0] == new and forget.id not in found
    assert found == ids(exact, "alice", probe)
    approx.ann.wait_idle()  # the new file was noticed and loaded in the background
    assert approx.ann._loaded["alice"] is not first
    assert approx.ann._loaded["alice"].hwm > first.hwm
    assert ids(approx, "alice", probe) == found


def test_graphs_in_memory_are_bounded(stores, corpus):
    """Past max_loaded_rows the least recently searched graph is dropped; its tenant scans exactly
    until the background thread loads it again from its file."""
    approx, exact, _ = stores
    approx.ann.max_loaded_rows = 400  # alice (320) or bob (260), not both
    assert approx.ann.refresh("alice") is not None and approx.ann.refresh("bob") is not None
    assert list(approx.ann._loaded) == ["bob"]
    written_at = (approx.ann.folder / file_name("alice")).stat().st_mtime_ns
    vector = corpus["alice"][1][7]
    assert ids(approx, "alice", vector) == ids(exact, "alice", vector)
    approx.ann.wait_idle()
    assert list(approx.ann._loaded) == ["alice"]
    assert (approx.ann.folder / file_name("alice")).stat().st_mtime_ns == written_at  # loaded, not rebuilt
    assert ids(approx, "alice", vector)[0] == ids(exact, "alice", vector)[0]


def test_searches_on_several_threads_while_the_graph_is_rebuilt(stores, corpus):
    """Request threads search while this one writes past the rebuild fraction (so graphs are rebuilt
    and swapped under them): no error, and only the tenant's rows, every time."""
    approx, _, written = stores
    assert approx.ann.refresh("alice") is not None
    first = approx.ann._loaded["alice"]
    vectors = corpus["alice"][1]
    alice_ids = {r.id for r in written["alice"]}
    stop = threading.Event()
    seen: list[set[str]] = []
    errors: list[BaseException] = []

    def search() -> None:
        i = 0
        while not stop.is_set():
            try:
                seen.append(set(ids(approx, "alice", vectors[i % len(vectors)], 20)))
            except BaseException as exc:  # reported below: a thread's exception would be lost
                errors.append(exc)
                return
            i += 1

    threads = [threading.Thread(target=search) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        texts, later = corpus["later"]
        for _ in range(3):  # 36 rows: past 5% of the graph, so a rebuild is queued by the searches
            rows = _rows("alice", texts, semantic_every=100)
            approx.insert("alice", rows, later)
            alice_ids |= {r.id for r in rows}
        approx.ann.wait_idle()
        time.sleep(0.2)  # a few more searches on the new graph
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors
    assert approx.ann._loaded["alice"].size > first.size  # rebuilt (once or twice) while searched
    assert len(seen) > 10 and all(s <= alice_ids for s in seen)


def test_the_threshold_is_a_setting(tmp_path, monkeypatch):
    from engram.memory import open_store
    from engram.settings import DEFAULT_ANN_MIN_ROWS, EngramSettings, load_settings

    assert EngramSettings.defaults().ann_min_rows == DEFAULT_ANN_MIN_ROWS == 5000
    monkeypatch.setenv("ENGRAM_ANN_MIN_ROWS", "1234")
    settings = load_settings()
    assert settings.ann_min_rows == 1234
    store = open_store(f"sqlite:///{tmp_path}/x.db", None, settings.ann_min_rows)
    try:
        assert isinstance(store, SQLiteStore) and store.ann.min_rows == 1234
    finally:
        store.close()
