"""One suite, three ways in: each test of the matrix runs on the embedded ``UserMemory`` handle and on
``engram.Client`` over a real HTTP server (uvicorn in a thread, the real app), each on SQLite,
PostgreSQL and OpenSearch, and on ``engram.AsyncClient`` over the same server on SQLite (it runs the
very plans ``Client`` runs, engram.client._core, so the backend adds nothing there but time). A behaviour
that differs between them fails here; the few differences there are, are stated in one test
(``test_what_only_the_embedded_handle_takes``).

The tests see only ``Side``: ``sarah`` and ``bob`` (each a handle, or a client with that user's key)
and ``engram``, the store behind them, for what no user can do (adding catalog rows). The tests are
synchronous: an ``AsyncClient`` is driven through ``Awaited``, which awaits each of its verbs on one
event loop."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import inspect
import math
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import httpx
import pytest

from engram import (
    AsyncClient,
    CatalogItem,
    Client,
    Conflict,
    Engram,
    EngramError,
    EpisodicMemory,
    Hit,
    ImportFileError,
    InvalidInput,
    NotFound,
    PermissionDenied,
    ProceduralMemory,
    RetrievalConfig,
    SemanticMemory,
    ServiceUnavailable,
    Step,
    StorageError,
    Tombstone,
    Unauthorized,
    UserMemory,
)
from engram.auth import ApiKeys
from engram.client import ClientClosed
from engram.interfaces.rest import create_app
from engram.interfaces.rest.background import BackgroundServer, free_port
from engram.providers.onnx import OnnxEmbedder, OnnxTokenEncoder
from engram.providers.onnx_rerank import OnnxCrossEncoder
from engram.settings import EngramSettings
from tests.conftest import STORE_KINDS, make_store

# (how the tests reach the memory, the store behind it)
SIDES = [(mode, kind) for mode in ("embedded", "client") for kind in STORE_KINDS] + [("async", "sqlite")]
CLIENTS = ["client", "async"]
PUBLIC_API = [
    "remember_turn",
    "write",
    "recall",
    "record_outcome",
    "get",
    "forget",
    "history",
    "list",
    "import_json",
]
TYPES = ("episodic", "semantic", "procedural")


class Awaited:
    """An ``AsyncClient`` for the synchronous tests: each verb (and ``user_id``) awaited on one event
    loop, which the client's connection pool stays on; a context manager that closes both."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self._loop = asyncio.Runner()

    @property
    def user_id(self) -> str:
        return self._loop.run(self.client.user_id())

    def __getattr__(self, name: str) -> Any:
        verb = getattr(self.client, name)
        return lambda *args, **kwargs: self._loop.run(verb(*args, **kwargs))

    def __enter__(self) -> Awaited:
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.run(self.client.aclose())
        self._loop.close()


def open_client(mode: str, url: str, key: str) -> Client | Awaited:
    return Client(url, key) if mode == "client" else Awaited(AsyncClient(url, key))


Mem = UserMemory | Client | Awaited


@dataclass
class Side:
    mode: str
    engram: Engram
    sarah: Mem
    bob: Mem


@contextlib.contextmanager
def served(eng: Engram) -> Iterator[tuple[str, ApiKeys]]:
    """The real service over ``eng`` on a free port: (its URL, its keys)."""
    keys = ApiKeys(eng.store)
    with BackgroundServer(create_app(eng, keys)) as url:
        yield url, keys


@pytest.fixture(params=SIDES, ids=["-".join(side) for side in SIDES])
def side(
    request: pytest.FixtureRequest,
    tmp_path: Any,
    embedder: OnnxEmbedder,
    reranker: OnnxCrossEncoder,
    token_encoder: OnnxTokenEncoder,
) -> Iterator[Side]:
    mode, kind = request.param
    backend = Engram(make_store(kind, tmp_path, request), embedder, reranker, token_encoder=token_encoder)
    try:
        if mode == "embedded":
            yield Side("embedded", backend, backend.for_user("sarah"), backend.for_user("bob"))
            return
        with (
            served(backend) as (url, keys),
            open_client(mode, url, keys.create("sarah")[0]) as sarah,
            open_client(mode, url, keys.create("bob")[0]) as bob,
        ):
            yield Side(mode, backend, sarah, bob)
    finally:
        backend.close()


def ids(rows: list[Hit] | list[Any]) -> list[str]:
    return [(r.memory if isinstance(r, Hit) else r).id for r in rows]


# -- the matrix: embedded and client, SQLite and PostgreSQL -----------------------------------------
def test_a_turn_is_stored_verbatim_and_read_back(side: Side) -> None:
    mem = side.sarah
    assert mem.user_id == "sarah" and side.bob.user_id == "bob"
    said = datetime(2024, 5, 1, 10, 30)  # naive: UTC on both sides
    first = mem.remember_turn(
        "  we moved to Edinburgh last week!  ", at=said, session_id="chat-7", metadata={"channel": "web"}
    )
    assert isinstance(first, EpisodicMemory)
    assert (first.text, first.user_id, first.session_id) == (
        "  we moved to Edinburgh last week!  ",
        "sarah",
        "chat-7",
    )
    assert first.timestamp == said.replace(tzinfo=UTC) and first.metadata == {"channel": "web"}
    reply = mem.remember_turn("yes, twice", session_id="chat-7")
    assert (reply.context, reply.context_id) == (first.text, first.id)
    answered = mem.remember_turn(
        "the blue one", metadata={"assistant_context": "Which sensor, the blue or the red one?"}
    )
    assert (answered.context, answered.context_id) == ("Which sensor, the blue or the red one?", None)
    for row in (first, reply, answered):
        assert mem.get(row.id) == row
    assert mem.list("episodic") == [answered, reply, first]


def test_facts_and_playbooks_are_stored_as_given(side: Side) -> None:
    mem = side.sarah
    episode = mem.remember_turn("I'm allergic to peanuts, badly")
    then = datetime(2023, 1, 2, 3, 4, 5, 678901, tzinfo=timezone(timedelta(hours=2)))
    fact = mem.write(
        "Sarah is allergic to peanuts",
        fact_type="constraint",
        confidence=0.9,
        supporting_episode_ids=[episode.id, episode.id],
        valid_from=then,
        valid_to=then + timedelta(days=400),
        metadata={"source": "chat", "n": [1, 2.5, None]},
        created_at=then,
    )
    assert isinstance(fact, SemanticMemory)
    assert (fact.fact_type, fact.confidence, fact.supporting_episode_ids) == ("constraint", 0.9, [episode.id])
    assert fact.created_at == then and fact.created_at.utcoffset() == timedelta(0)
    assert fact.valid_to == then + timedelta(days=400) and fact.metadata == {
        "source": "chat",
        "n": [1, 2.5, None],
    }
    playbook = mem.write(
        "",
        memory_type="procedural",
        name="Re-pair a Zigbee sensor",
        trigger_text="a sensor is offline",
        description="when the hub has lost it",
        steps=[
            Step(order=1, instruction="hold reset 10 s"),
            {"order": 2, "instruction": "pair", "tool": "app"},
        ],
    )
    assert isinstance(playbook, ProceduralMemory)
    assert playbook.steps == [
        Step(order=1, instruction="hold reset 10 s"),
        Step(order=2, instruction="pair", tool="app"),
    ]
    assert (playbook.name, playbook.trigger_text, playbook.text) == (
        "Re-pair a Zigbee sensor",
        "a sensor is offline",
        "",
    )
    for row in (fact, playbook):
        assert mem.get(row.id) == row
    assert mem.list("semantic") == [fact] and mem.list("procedural") == [playbook]


def test_a_supersession_replaces_the_fact_and_history_shows_the_chain(side: Side) -> None:
    mem = side.sarah
    bristol = mem.write("Sarah lives in Bristol")
    edinburgh = mem.write("Sarah lives in Edinburgh", supersedes_id=bristol.id)
    assert (edinburgh.supersedes, edinburgh.contradiction) == (bristol.id, "natural")
    old = mem.get(bristol.id)
    assert isinstance(old, SemanticMemory) and old.superseded_by == edinburgh.id and not old.retracted
    assert mem.history(bristol.id) == mem.history(edinburgh.id) == [old, edinburgh]
    leith = mem.write(
        "Sarah never lived in Edinburgh: she lives in Leith",
        confidence=0.9,
        supersedes_id=edinburgh.id,
        contradiction="harsh",
    )
    assert isinstance(leith, SemanticMemory)
    assert leith.confidence == pytest.approx(0.9 - EngramSettings.defaults().supersede_penalty)
    assert mem.get(edinburgh.id).retracted  # type: ignore[union-attr]
    assert ids(mem.history(bristol.id)) == [bristol.id, edinburgh.id, leith.id]
    # a model reading the compact view tells "changed" from "never true" (an outside review)
    history = mem.recall("where does Sarah live?", include_superseded=True, view="compact", record_use=False)
    flags = {c.id: (c.superseded_by, c.retracted) for c in history}
    assert flags[edinburgh.id] == (leith.id, True) and flags[bristol.id] == (edinburgh.id, None)
    assert flags[leith.id] == (None, None)
    with pytest.raises(Conflict):
        mem.write("Sarah lives in Glasgow", supersedes_id=bristol.id)  # superseded already
    playbook = mem.write("", memory_type="procedural", name="Move house")
    with pytest.raises(InvalidInput):
        mem.write("Sarah lives in Perth", supersedes_id=playbook.id)  # a fact cannot replace a playbook
    with pytest.raises(InvalidInput):
        mem.write("Sarah lives in Perth", contradiction="harsh")  # nothing to contradict
    assert ids(mem.list("semantic")) == [leith.id]
    assert ids(mem.list("semantic", include_superseded=True)) == [leith.id, edinburgh.id, bristol.id]
    mem.forget(edinburgh.id)  # forgetting a link mends the chain
    assert ids(mem.history(leith.id)) == [bristol.id, leith.id]
    with pytest.raises(InvalidInput, match="revised, not retracted"):  # a playbook is never "never true"
        mem.write(
            "", memory_type="procedural", name="Move house", supersedes_id=playbook.id, contradiction="harsh"
        )
    better = mem.write("", memory_type="procedural", name="Move house, v2", supersedes_id=playbook.id)
    assert mem.history(playbook.id) == [mem.get(playbook.id), better]
    assert (mem.get(playbook.id).version, better.version) == (1, 2)  # type: ignore[union-attr]


def test_recall_ranks_explains_and_filters(side: Side) -> None:
    mem = side.sarah
    radios = side.engram.catalog.add("The Lumio Hub v2 supports Zigbee 3.0 and Thread", title="Hub v2 radios")
    bristol = mem.write("Sarah lives in Bristol")
    edinburgh = mem.write("Sarah lives in Edinburgh", supersedes_id=bristol.id)
    turn = mem.remember_turn("my hub shows error E-4021 since the update")
    playbook = mem.write(
        "",
        memory_type="procedural",
        name="Re-pair a Zigbee sensor",
        trigger_text="a Zigbee sensor is offline",
        steps=[{"order": 1, "instruction": "hold reset 10 s"}],
    )
    hits = mem.recall("where does Sarah live?", k=3)
    assert all(isinstance(h, Hit) for h in hits) and [h.rank for h in hits] == [1, 2, 3]
    assert hits[0].memory.id == edinburgh.id and bristol.id not in ids(hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    explain = hits[0].explain
    assert {
        "bm25_rank",
        "dense_rank",
        "rrf",
        "late_interaction",
        "rerank",
        "relevance",
        "decay",
        "final",
    } <= set(explain)
    assert hits[0].score == pytest.approx(explain["final"]) and explain["relevance"] == "rerank"
    assert bristol.id in ids(mem.recall("where did Sarah live before?", include_superseded=True))
    assert ids(mem.recall("error E-4021", memory_types=["episodic"])) == [turn.id]
    assert ids(mem.recall("error E-4021", memory_types="episodic")) == [turn.id]  # one type, as a string
    assert ids(mem.recall("a Zigbee sensor went offline", memory_types=["procedural"])) == [playbook.id]
    assert radios.id in ids(mem.recall("which radios does the hub support?"))
    assert radios.id not in ids(mem.recall("which radios does the hub support?", include_catalog=False))
    assert ids(mem.recall("which radios does the hub support?", memory_types=["catalog"])) == [radios.id]
    assert side.bob.recall("which radios does the hub support?", memory_types=["catalog"])[0].memory == radios


def test_recall_gives_confidence_and_event_time_and_a_compact_view(side: Side) -> None:
    mem = side.sarah
    said = datetime(2025, 3, 1, 9, 30, tzinfo=UTC)
    turn = mem.remember_turn("my hub shows error E-4021 since the update", at=said)
    mem.remember_turn("we had pancakes for breakfast")
    playbook = mem.write(
        "",
        memory_type="procedural",
        name="Re-pair a Zigbee sensor",
        trigger_text="a Zigbee sensor is offline",
        description="Only for Aqara sensors; never factory-reset the hub itself",
        steps=[{"order": 1, "instruction": "hold reset 10 s"}],
    )
    hits = mem.recall("error E-4021 on the hub", record_use=False)
    assert hits[0].memory.id == turn.id and hits[0].event_time == said
    assert all(0.0 <= h.confidence <= 1.0 for h in hits)
    # min_confidence keeps the hits that reach it, ranked 1..n again; above every hit, none is left.
    floor = sorted(h.confidence for h in hits)[len(hits) // 2]
    kept = mem.recall("error E-4021 on the hub", record_use=False, min_confidence=floor)
    assert ids(kept) == [h.memory.id for h in hits if h.confidence >= floor]
    assert [h.rank for h in kept] == list(range(1, len(kept) + 1))
    assert mem.recall("error E-4021 on the hub", record_use=False, min_confidence=1.0) == []
    compact = mem.recall("error E-4021 on the hub", record_use=False, view="compact")
    assert [c.id for c in compact] == ids(hits)
    first = compact[0].as_json()
    assert first == {
        "id": turn.id,
        "type": "episodic",
        "text": turn.text,
        "event_time": "2025-03-01T09:30:00Z",
        "confidence": round(hits[0].confidence, 3),
    }
    (pb,) = mem.recall("a Zigbee sensor is offline", memory_types=["procedural"], view="compact")
    assert pb.id == playbook.id and pb.name == "Re-pair a Zigbee sensor" and pb.steps == playbook.steps
    assert pb.description == "Only for Aqara sensors; never factory-reset the hub itself"
    assert isinstance(playbook, ProceduralMemory)  # after a failure, the refined steps are the ones to follow
    refined = [Step(order=1, instruction="remove the battery"), Step(order=2, instruction="hold reset 10 s")]
    better = playbook.model_copy(update={"refined_steps": refined, "version": 2})
    hit = Hit(memory=better, score=1.0, rank=1, confidence=0.9, event_time=better.created_at, explain={})
    assert hit.compact().steps == refined
    # a fact that ended says until when (an outside review: an expired fact read as current)
    ended_at = datetime(2025, 9, 1, tzinfo=UTC)
    leave = mem.write("Sarah is on parental leave", valid_from=said, valid_to=ended_at)
    (ended,) = mem.recall("am I on parental leave?", memory_types=["semantic"], k=1, view="compact")
    assert ended.id == leave.id and ended.as_json()["valid_to"] == "2025-09-01T00:00:00Z"
    for bad in (-0.1, 1.5, "high", True):
        with pytest.raises(InvalidInput, match="min_confidence"):
            mem.recall("error E-4021", min_confidence=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="view"):
        mem.recall("error E-4021", view="tiny")  # type: ignore[call-overload]


def test_recall_counts_uses_unless_told_not_to(side: Side) -> None:
    mem = side.sarah
    fact = mem.write("Sarah's router is a Fritzbox 7590")
    query = "which router does Sarah have?"
    first = mem.recall(query, memory_types=["semantic"])
    assert ids(first) == [fact.id] and first[0].memory.use_count == 1  # type: ignore[union-attr]
    assert first[0].memory.last_used_at is not None  # type: ignore[union-attr]
    assert mem.recall(query, memory_types=["semantic"], record_use=False)[0].memory.use_count == 1  # type: ignore[union-attr]
    later = datetime.now(UTC) + timedelta(days=30)
    assert mem.recall(query, memory_types=["semantic"], as_of=later)[0].memory.use_count == 1  # type: ignore[union-attr]
    replayed = mem.recall(query, memory_types=["semantic"], as_of=later, record_use=True)
    assert replayed[0].memory.use_count == 2  # type: ignore[union-attr]
    assert mem.get(fact.id).use_count == 2  # type: ignore[union-attr]


def test_recall_filters_by_session_event_time_and_metadata(side: Side) -> None:
    mem = side.sarah
    t0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
    web = [
        mem.remember_turn(f"the hub dropped off wifi, day {d}", at=t0 + timedelta(days=d), session_id="a")
        for d in range(3)
    ]
    app = mem.remember_turn(
        "the hub dropped off wifi again",
        at=t0 + timedelta(days=3),
        session_id="b",
        metadata={"ch": "app", "n": 2},
    )
    fact = mem.write("Sarah's hub drops off wifi", valid_from=t0 + timedelta(days=1))
    side.bob.remember_turn("the hub dropped off wifi", at=t0, session_id="a", metadata={"ch": "app", "n": 2})
    query = "the hub dropped off wifi"
    assert set(ids(mem.recall(query, session_id="a"))) == {t.id for t in web}
    assert ids(mem.recall(query, metadata={"ch": "app", "n": 2.0})) == [app.id]
    span = mem.recall(query, time_from=t0 + timedelta(days=1), time_to=t0 + timedelta(days=3))
    assert set(ids(span)) == {web[1].id, web[2].id, fact.id}  # the fact by its valid_from
    compact = mem.recall(query, session_id="b", view="compact", record_use=False)
    assert [c.id for c in compact] == [app.id]
    assert mem.recall(query, session_id="a", time_from=t0 + timedelta(days=5)) == []
    assert mem.recall(query, time_from=t0, time_to=t0) == []  # an empty range matches nothing
    for bad in (
        {"session_id": ""},
        {"metadata": {"ch": ["app"]}},
        {"metadata": {"ch": None}},
        {"metadata": {f"k{i}": 1 for i in range(17)}},
        {"metadata": {"n": 2**63}},  # past 2**53: REST read it as the float nearest it, which matched others
        {"time_from": "2025-03-01"},
        {"time_from": t0 + timedelta(days=2), "time_to": t0},  # inverted: a mistake, not an empty range
        {"memory_types": []},  # finds nothing by construction
        {"include_superseded": "no"},  # truthy: refused, not read as True
    ):
        with pytest.raises(InvalidInput):
            mem.recall(query, **bad)  # type: ignore[arg-type]


def test_a_playbooks_outcome_moves_its_prior_and_only_its_owner_records_one(side: Side) -> None:
    mem = side.sarah
    playbook = mem.write(
        "",
        memory_type="procedural",
        name="Re-pair a Zigbee sensor",
        trigger_text="a Zigbee sensor is offline",
        steps=[{"order": 1, "instruction": "hold reset 10 s"}],
    )
    fact = mem.write("Sarah's sensors are Zigbee")
    radios = side.engram.catalog.add("The Lumio Hub v2 supports Zigbee 3.0 and Thread")
    mem.record_outcome(playbook.id, True)
    after = mem.record_outcome(playbook.id, True)
    assert isinstance(after, ProceduralMemory) and (after.success_count, after.failure_count) == (2, 0)
    (hit,) = mem.recall("a Zigbee sensor is offline", memory_types=["procedural"])
    assert hit.memory.success_count == 2  # type: ignore[union-attr]
    assert mem.record_outcome(playbook.id, False).failure_count == 1
    refused: list[tuple[Any, Any, type[EngramError]]] = [
        (side.bob.record_outcome, playbook.id, NotFound),  # another user's playbook
        (mem.record_outcome, fact.id, InvalidInput),  # not a playbook
        (mem.record_outcome, radios.id, InvalidInput),
        (mem.record_outcome, "pro_" + "A" * 22, NotFound),
    ]
    for record, memory_id, error in refused:
        with pytest.raises(error):
            record(memory_id, True)
    with pytest.raises(InvalidInput):
        mem.record_outcome(playbook.id, "yes")  # type: ignore[arg-type]
    stored = mem.get(playbook.id)
    assert (stored.success_count, stored.failure_count) == (2, 1)  # type: ignore[union-attr]
    # an outcome for a version recall no longer shows would count where nobody reads it (an outside review)
    newer = mem.write(
        "", memory_type="procedural", name="Re-pair a Zigbee sensor, v2", supersedes_id=playbook.id
    )
    with pytest.raises(Conflict, match=f"superseded by {newer.id}"):
        mem.record_outcome(playbook.id, True)
    assert mem.get(playbook.id).success_count == 2  # type: ignore[union-attr]
    assert mem.record_outcome(newer.id, True).success_count == 1


def test_invalid_input_is_refused_and_changes_nothing(side: Side) -> None:
    mem = side.sarah
    year_one = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1)))  # no UTC equivalent
    calls: list[Callable[[], object]] = [
        lambda: mem.remember_turn(""),
        lambda: mem.remember_turn("\u200b\u200b"),
        lambda: mem.remember_turn("x" * 16_001),
        lambda: mem.remember_turn("a\ud800b"),
        lambda: mem.remember_turn("hi", at="2024-05-01T10:00:00Z"),  # type: ignore[arg-type]
        lambda: mem.remember_turn("hi", at=year_one),
        lambda: mem.write("f", memory_type="episodic"),
        lambda: mem.write("f", memory_type="dreams"),  # type: ignore[arg-type]
        lambda: mem.write("f", confidence=2),
        lambda: mem.write("f", confidence=float("nan")),
        lambda: mem.write("f", fact_type="rumour"),  # type: ignore[arg-type]
        lambda: mem.write(
            "f", valid_from=datetime(2024, 2, 1, tzinfo=UTC), valid_to=datetime(2024, 1, 1, tzinfo=UTC)
        ),
        lambda: mem.write("f", created_at="yesterday"),  # type: ignore[arg-type]
        lambda: mem.write("", memory_type="procedural"),  # a playbook needs a name
        lambda: mem.write("f", name="n", steps=[{"order": 1, "instruction": "x"}]),  # a fact has no steps
        lambda: mem.write("", memory_type="procedural", name="p", fact_type="preference"),
        lambda: mem.write("", memory_type="procedural", name="p", valid_to=datetime(2030, 1, 1, tzinfo=UTC)),
        lambda: mem.write(
            "", memory_type="procedural", name="p", steps=[{"order": 1, "instruction": "x" * 2_001}]
        ),
        # an outside review: a bare ValueError / TypeError from the handle and the Client, a tuple stored
        lambda: mem.write("", memory_type="procedural", name="p", steps=["hold reset"]),  # type: ignore[list-item]
        lambda: mem.write("", memory_type="procedural", name="p", steps=[1]),  # type: ignore[list-item]
        lambda: mem.write("f", metadata={"a": (1, 2)}),
        lambda: mem.write("f", supporting_episode_ids={"epi_x": 1}),  # type: ignore[arg-type]  # the Client sent it
        lambda: mem.remember_turn("hi", metadata={"a": (1, 2)}),
        lambda: mem.write("f", created_at=datetime(2999, 1, 1, tzinfo=UTC)),
        lambda: mem.recall(""),
        lambda: mem.recall("q", k=0),
        lambda: mem.recall("q", k=5.0),  # type: ignore[arg-type]  # the Client sent it, and it was taken
        lambda: mem.recall("q", k=True),
        lambda: mem.recall("q", memory_types=["nope"]),  # type: ignore[list-item]
        lambda: mem.recall("q", as_of=year_one),
        lambda: mem.list("nope"),  # type: ignore[arg-type]
        lambda: mem.list("catalog"),
        lambda: mem.list("semantic", limit=0),
        lambda: mem.list("semantic", offset=-1),
        lambda: mem.list("semantic", limit=True),  # a page of one, read as 1
        lambda: mem.recall("q", config={"rerank": False}),  # type: ignore[arg-type]  # AttributeError
    ]
    for i, call in enumerate(calls):
        with pytest.raises(InvalidInput):
            call()
            pytest.fail(f"call {i} was accepted")
    for memory_type in TYPES:
        assert mem.list(memory_type, include_superseded=True) == []


HOSTILE_IDS = [
    "sem_" + "A" * 22,
    "",
    " ",
    "%",
    "%2F",
    "sem_%",
    "*",
    ".",
    "..",
    "a/b",
    "sem_x/history",
    "?type=semantic",
    "#top",
    "' OR '1'='1",
    "sem_x'; DELETE FROM memories; --",
    'say "hi"',
    "é\n€",
    "\x00",
]


def test_missing_ids_are_not_found_in_the_same_words(side: Side) -> None:
    mem = side.sarah
    mem.write("Sarah lives in Edinburgh")
    for bad in HOSTILE_IDS:
        for op in (mem.get, mem.history, mem.forget):
            with pytest.raises(NotFound) as exc:
                op(bad)
            assert str(exc.value) == f"memory {bad!r} not found" and exc.value.memory_id == bad
    with pytest.raises(NotFound) as exc:
        mem.write("Sarah moved", supersedes_id="sem_" + "B" * 22)
    assert exc.value.memory_id == "sem_" + "B" * 22
    with pytest.raises(NotFound) as exc:
        mem.write("Sarah moved", supporting_episode_ids=["epi_" + "C" * 22])
    assert str(exc.value) == f"memory {'epi_' + 'C' * 22!r} not found"
    assert len(mem.list("semantic")) == 1


def test_another_users_rows_are_not_found_and_never_recalled(side: Side) -> None:
    sarah, bob = side.sarah, side.bob
    episode = sarah.remember_turn("my garage code is 9931, the door sticks")
    fact = sarah.write("Sarah's garage code is 9931", supporting_episode_ids=[episode.id])
    playbook = sarah.write(
        "",
        memory_type="procedural",
        name="Open Sarah's garage",
        steps=[{"order": 1, "instruction": "kick it"}],
    )
    bob.remember_turn("my garage is the red one")
    for row in (episode, fact, playbook):
        for op in (bob.get, bob.history, bob.forget):
            with pytest.raises(NotFound) as exc:
                op(row.id)
            assert str(exc.value) == f"memory {row.id!r} not found"  # the words of a missing row
    with pytest.raises(NotFound):
        bob.write("the garage code changed", supersedes_id=fact.id)
    with pytest.raises(NotFound):
        bob.write("the garage code is 9931", supporting_episode_ids=[episode.id])
    for memory_type in TYPES:
        assert {r.user_id for r in bob.list(memory_type, include_superseded=True)} <= {"bob"}
    seen = bob.recall("garage code 9931 door", k=50, include_superseded=True)
    assert seen and {h.memory.user_id for h in seen} == {"bob"}
    assert sarah.get(fact.id) == fact and sarah.history(fact.id) == [fact]
    assert ids(sarah.list("episodic")) == [episode.id]


def test_catalog_rows_are_read_by_every_user_and_changed_by_none(side: Side) -> None:
    item = side.engram.catalog.add("The Lumio Hub v2 supports Zigbee 3.0 and Thread", title="Hub v2 radios")
    for mem in (side.sarah, side.bob):
        got = mem.get(item.id)
        assert isinstance(got, CatalogItem) and got == item
        assert mem.history(item.id) == [item]
        with pytest.raises(PermissionDenied):
            mem.forget(item.id)
    assert side.engram.catalog.get(item.id) == item


def test_forget_leaves_a_tombstone_without_text(side: Side) -> None:
    mem = side.sarah
    turn = mem.remember_turn("my card number is 4111 1111 1111 1111")
    stone = mem.forget(turn.id)
    assert isinstance(stone, Tombstone)
    assert (stone.id, stone.user_id, stone.memory_type, stone.created_at) == (
        turn.id,
        "sarah",
        "episodic",
        turn.created_at,
    )
    assert "text" not in stone.model_dump()
    with pytest.raises(NotFound):
        mem.get(turn.id)
    with pytest.raises(NotFound):
        mem.forget(turn.id)
    assert mem.list("episodic") == [] and mem.recall("card number 4111", memory_types=["episodic"]) == []


def test_forgetting_a_harsh_correction_keeps_the_fact_retracted_unless_asked(side: Side) -> None:
    """Issue 26, item 19: a harsh correction says the old fact was never true; forgetting the
    correction leaves it retracted, unless the caller says otherwise (``revive_retracted``)."""
    mem = side.sarah
    for revive in (False, True):
        old = mem.write(f"Sarah is allergic to penicillin ({revive})", fact_type="constraint")
        fix = mem.write(
            f"Sarah was never allergic to anything ({revive})", supersedes_id=old.id, contradiction="harsh"
        )
        mem.forget(fix.id, revive_retracted=revive)
        now = mem.get(old.id)
        assert isinstance(now, SemanticMemory)
        assert (now.retracted, now.superseded_by is None) == (not revive, revive)
        live = {m.id for m in mem.list("semantic")}
        assert (old.id in live) == revive


def test_list_pages_newest_first(side: Side) -> None:
    mem = side.sarah
    newest_first = ids([mem.write(f"Sarah's fact number {i}") for i in range(7)])[::-1]
    pages = [ids(mem.list("semantic", limit=3, offset=offset)) for offset in (0, 3, 6, 9)]
    assert pages == [newest_first[:3], newest_first[3:6], newest_first[6:], []]
    assert ids(mem.list("semantic", limit=1_000)) == newest_first  # over the service's page (500)
    with pytest.raises(InvalidInput):
        mem.list("semantic", limit=10**10)


def test_a_list_longer_than_the_services_page(side: Side) -> None:
    mem = side.sarah
    mem.import_json({"episodic": [{"text": f"turn {i}", "days_ago": 1} for i in range(520)]})
    everything = mem.list("episodic", limit=1_000)
    assert len(everything) == len({r.id for r in everything}) == 520
    assert everything == mem.list("episodic", limit=500) + mem.list("episodic", limit=500, offset=500)
    assert mem.list("episodic", limit=510, offset=5) == everything[5:515]


def test_import_writes_a_valid_document_and_nothing_of_an_invalid_one(side: Side) -> None:
    mem = side.sarah
    document = {
        "user_id": "sarah",
        "episodic": [
            {"text": "we moved to Edinburgh", "days_ago": 3, "key": "move", "session_id": "s1"},
            {"text": "yes, last week", "days_ago": 2, "session_id": "s1"},
        ],
        "semantic": [
            {"text": "Sarah lives in Bristol", "days_ago": 400, "key": "bristol"},
            {
                "text": "Sarah lives in Edinburgh",
                "supersedes": "bristol",
                "supporting_episodes": ["move"],
                "key": "now",
            },
        ],
        "procedural": [{"name": "Re-pair a sensor", "steps": [{"order": 1, "instruction": "hold reset"}]}],
    }
    report = mem.import_json(document)
    assert {t: report[t] for t in (*TYPES, "catalog")} == {
        "episodic": 2,
        "semantic": 2,
        "procedural": 1,
        "catalog": 0,
    }
    assert report["user_id"] == "sarah" and set(report["ids"]) == {"move", "bristol", "now"}
    keys = report["ids"]
    assert ids(mem.history(keys["bristol"])) == [keys["bristol"], keys["now"]]
    assert mem.get(keys["now"]).supporting_episode_ids == [keys["move"]]  # type: ignore[union-attr]
    assert mem.list("episodic")[0].context == "we moved to Edinburgh"  # type: ignore[union-attr]
    invalid: list[Any] = [
        {"episodic": [{"text": "ok"}, {"text": ""}]},
        {"semantic": [{"text": "x", "confidence": "0.9"}]},
        {"semantic": [{"text": "x", "supersedes": "nowhere"}]},
        {"user_id": "bob", "episodic": [{"text": "not mine"}]},
        {"episodic": [{"text": "x", "days_ago": 800_000}]},
        [{"title": "a user's list", "text": "is not the catalog"}],
    ]
    for bad in invalid:
        with pytest.raises(ImportFileError) as exc:
            mem.import_json(bad)
    with pytest.raises(ImportFileError) as exc:
        mem.import_json(invalid[0])
    assert "episodic[1].text" in str(exc.value)  # names the record
    assert [len(mem.list(t)) for t in TYPES] == [2, 1, 1] and side.bob.list("episodic") == []


def test_what_only_the_embedded_handle_takes(side: Side) -> None:
    """The differences, stated: the service recalls with its own RetrievalConfig (a caller's candidate
    counts and rerank windows would cost other tenants), and returns at most 100 hits."""
    mem = side.sarah
    mem.write("Sarah lives in Edinburgh")
    no_rerank = RetrievalConfig(rerank=False)
    if side.mode == "embedded":
        assert mem.recall("where does Sarah live?", config=no_rerank)[0].explain["relevance"] != "rerank"
        assert len(mem.recall("where does Sarah live?", k=500)) == 1
    else:
        with pytest.raises(InvalidInput, match="config"):
            mem.recall("where does Sarah live?", config=no_rerank)
        with pytest.raises(InvalidInput):
            mem.recall("where does Sarah live?", k=500)


# -- parity by construction: the same methods, and the same calls giving the same results ----------
def test_the_client_has_exactly_the_public_methods_of_the_handle() -> None:
    """A method added to UserMemory fails this until the client (and this suite) has it too."""
    assert sorted(n for n in dir(UserMemory) if not n.startswith("_")) == sorted(PUBLIC_API)
    for name in PUBLIC_API:
        for client in (Client, AsyncClient):
            handle = inspect.signature(getattr(UserMemory, name))
            assert inspect.signature(getattr(client, name)) == handle, (client, name)
            assert getattr(client, name).__doc__, name
        assert inspect.iscoroutinefunction(getattr(AsyncClient, name)), name
    assert inspect.iscoroutinefunction(AsyncClient.user_id)


_ID = re.compile(r"\b(?:epi|sem|pro|cat)_[A-Za-z0-9_-]{22}")
_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?$")


def transcript(mem: Mem, catalog_id: str) -> list[Any]:
    """A fixed sequence of calls and what each returned or raised, with ids numbered in order of first
    appearance and the times of this run (created_at, last use...) blanked: the rest must match."""
    out: list[Any] = []

    def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            result = fn(*args, **kwargs)
        except EngramError as exc:
            # Request validation words its messages its own way; what is found or refused, the engine's.
            out.append([type(exc).__name__, "" if isinstance(exc, InvalidInput) else str(exc)])
            return None
        dumped = [r.model_dump(mode="json") for r in result] if isinstance(result, list) else result
        out.append(dumped.model_dump(mode="json") if hasattr(dumped, "model_dump") else dumped)
        return result

    said = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
    turn = call(
        mem.remember_turn, "we moved to Edinburgh last week!", at=said, session_id="s", metadata={"ch": "web"}
    )
    call(mem.remember_turn, "yes, twice", at=said + timedelta(minutes=1), session_id="s")
    old = call(
        mem.write, "Sarah lives in Bristol", fact_type="identity", created_at=said - timedelta(days=900)
    )
    new = call(mem.write, "Sarah lives in Edinburgh", supersedes_id=old.id, supporting_episode_ids=[turn.id])
    call(mem.write, "Sarah lives in Glasgow", supersedes_id=old.id)
    steps = [{"order": 1, "instruction": "hold reset 10 s"}, {"order": 2, "instruction": "pair from the app"}]
    playbook = call(mem.write, "", memory_type="procedural", name="Re-pair a sensor", steps=steps)
    call(mem.recall, "where does Sarah live?")
    call(mem.recall, "where did Sarah live before?", k=3, include_superseded=True)
    call(mem.recall, "which radios does the hub have?", memory_types=["catalog", "procedural"])
    call(mem.recall, "when did we move?", as_of=said + timedelta(days=7))
    call(mem.recall, "when did we move?", include_catalog=False, record_use=False)
    call(mem.recall, "q", k=0)
    call(mem.recall, "when did we move?", session_id="s", metadata={"ch": "web"}, time_from=said)
    call(mem.record_outcome, playbook.id, True)
    call(mem.record_outcome, old.id, False)
    call(mem.history, old.id)
    call(mem.list, "semantic", include_superseded=True)
    call(mem.list, "episodic", limit=1, offset=1)
    call(mem.get, playbook.id)
    call(mem.get, catalog_id)
    call(mem.get, "sem_" + "A" * 22)
    call(mem.forget, catalog_id)
    call(mem.forget, turn.id)
    call(mem.get, new.id)
    call(mem.import_json, {"semantic": [{"text": "Sarah has a cat called Miso", "key": "cat"}]})
    call(mem.import_json, {"semantic": [{"text": "", "key": "cat"}]})
    call(mem.list, "semantic")
    return normalised(out)


def normalised(value: Any, names: dict[str, str] | None = None) -> Any:
    names = {} if names is None else names
    if isinstance(value, dict):
        return {k: normalised(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [normalised(v, names) for v in value]
    if isinstance(value, str):
        if _TIME.match(value) and abs(datetime.fromisoformat(value) - datetime.now(UTC)) < timedelta(hours=1):
            return "<now>"
        return _ID.sub(lambda m: names.setdefault(m[0], f"<id{len(names)}>"), value)
    return value


@pytest.mark.parametrize("mode", CLIENTS)
def test_the_same_calls_give_the_same_results(mode: str, make_engram: Callable[..., Engram]) -> None:
    """The embedded handle and a client, each on its own fresh store, go through the same calls:
    every row, hit, score, explain, history, page, tombstone, report and error must be the same."""
    embedded, remote = make_engram("embedded.db"), make_engram("served.db")
    item = {"text": "The Lumio Hub v2 supports Zigbee 3.0 and Thread", "title": "Hub v2 radios"}
    local_item, remote_item = embedded.catalog.add(**item), remote.catalog.add(**item)
    with served(remote) as (url, keys), open_client(mode, url, keys.create("sarah")[0]) as client:
        by_client = transcript(client, remote_item.id)
    by_handle = transcript(embedded.for_user("sarah"), local_item.id)
    assert len(by_handle) == 27
    for step, (mine, theirs) in enumerate(zip(by_handle, by_client, strict=True)):
        assert same(mine, theirs), (step, mine, theirs)


def same(mine: Any, theirs: Any) -> bool:
    """Equal, floats within a relative 1e-6: the two stores run a few seconds apart, and time decay
    moves the scores of rows older than its offset with the clock (the 2021 fact's, and ratios built
    on them); a fixed rounding flipped at a digit boundary now and then."""
    if isinstance(mine, float) and isinstance(theirs, float):
        return math.isclose(mine, theirs, rel_tol=1e-6, abs_tol=1e-9)
    if isinstance(mine, dict) and isinstance(theirs, dict):
        return mine.keys() == theirs.keys() and all(same(mine[k], theirs[k]) for k in mine)
    if isinstance(mine, list) and isinstance(theirs, list):
        return len(mine) == len(theirs) and all(same(a, b) for a, b in zip(mine, theirs, strict=True))
    return type(mine) is type(theirs) and mine == theirs


def test_an_outcome_moves_the_playbooks_prior_when_feedback_ranks(
    make_engram: Callable[..., Engram],
) -> None:
    """With ENGRAM_PROCEDURAL_FEEDBACK on (off by default: it cost MRR on the eval corpus), recall
    multiplies a playbook's score by its success prior; an outcome recorded over REST moves it at once."""
    eng = make_engram(procedural_feedback=True)
    with served(eng) as (url, keys), Client(url, keys.create("sarah")[0]) as mem:
        steps = [{"order": 1, "instruction": "hold reset 10 s"}]
        playbook = mem.write("", memory_type="procedural", name="Re-pair a Zigbee sensor", steps=steps)
        query = "a Zigbee sensor is offline"
        (before,) = mem.recall(query, memory_types=["procedural"])
        assert before.explain["success_prior"] == 1.0
        mem.record_outcome(playbook.id, True)
        mem.record_outcome(playbook.id, True)
        (up,) = mem.recall(query, memory_types=["procedural"])
        assert up.explain["success_prior"] == pytest.approx(0.5 + 3 / 4) and up.score > before.score
        for _ in range(4):
            mem.record_outcome(playbook.id, False)
        (down,) = mem.recall(query, memory_types=["procedural"])
        assert down.explain["success_prior"] == pytest.approx(0.5 + 3 / 8) and down.score < before.score


# -- what only a client meets: keys, the network, and its own lifecycle ----------------------------
@pytest.mark.parametrize("mode", CLIENTS)
def test_a_refused_key_an_admin_key_and_no_service_are_errors_of_ours(
    mode: str,
    make_engram: Callable[..., Engram],
) -> None:
    eng = make_engram()
    with served(eng) as (url, keys):
        sarah_key, _ = keys.create("sarah")
        admin_key, _ = keys.create(None)
        for key in ("", "egk_not-a-key", sarah_key + "x"):
            with open_client(mode, url, key) as stranger, pytest.raises(Unauthorized) as exc:
                stranger.remember_turn("hello")
            assert isinstance(exc.value, PermissionDenied) and exc.value.code == "unauthorized"
        with open_client(mode, url, admin_key) as admin, pytest.raises(PermissionDenied) as denied:
            admin.recall("anything")
        assert not isinstance(denied.value, Unauthorized)
        keys.revoke(keys.list()[0].id)  # sarah's key
        with open_client(mode, url, sarah_key) as revoked, pytest.raises(Unauthorized):
            _ = revoked.user_id
        with (
            open_client(mode, url + "/not-here", admin_key) as astray,
            pytest.raises(ServiceUnavailable, match="base_url"),
        ):
            astray.list("semantic")
    assert eng.for_user("sarah").list("episodic") == []
    with (
        open_client(mode, f"http://127.0.0.1:{free_port()}", sarah_key) as nobody,
        pytest.raises(ServiceUnavailable) as gone,
    ):
        nobody.recall("anything")
    assert isinstance(gone.value, StorageError) and "ConnectError" in str(gone.value)


@pytest.mark.parametrize("mode", CLIENTS)
def test_a_server_that_is_not_engram_is_service_unavailable(mode: str) -> None:
    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            proxy_error = self.path == "/v1/me"
            body = b"<html>Bad gateway</html>" if proxy_error else b'{"data": "nope"}'
            self.send_response(502 if proxy_error else 200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with open_client(mode, f"http://127.0.0.1:{server.server_address[1]}", "egk_x") as client:
            with pytest.raises(ServiceUnavailable, match="HTTP 502"):
                _ = client.user_id
            with pytest.raises(ServiceUnavailable, match="HTTP 200"):  # answered, but not with rows
                client.list("semantic")
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("mode", CLIENTS)
def test_an_answer_the_client_cannot_read_is_service_unavailable(mode: str) -> None:
    class Garbled(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/v1/me":  # says gzip, is not: httpx.DecodingError
                status, body, extra = 200, b"not gzip at all", {"Content-Encoding": "gzip"}
            else:  # an error body nested deeper than the JSON parser's recursion limit
                status, body, extra = 400, b"[" * 100_000, {}
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in extra.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Garbled)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with open_client(mode, f"http://127.0.0.1:{server.server_address[1]}", "egk_x") as client:
            with pytest.raises(ServiceUnavailable, match="DecodingError"):
                _ = client.user_id
            with pytest.raises(ServiceUnavailable, match="HTTP 400"):
                client.list("semantic")
    finally:
        server.shutdown()
        server.server_close()


def test_a_closed_client_sends_nothing(make_engram: Callable[..., Engram]) -> None:
    eng = make_engram()
    with served(eng) as (url, keys):
        with Client(url, keys.create("sarah")[0]) as client:
            assert client.remember_turn("one").text == "one"
        with pytest.raises(ClientClosed, match="is closed") as closed:
            client.remember_turn("two")
        assert isinstance(closed.value, EngramError) and closed.value.code == "client_closed"
    assert (
        ids(eng.for_user("sarah").list("episodic")) != [] and len(eng.for_user("sarah").list("episodic")) == 1
    )


def test_an_async_client_runs_verbs_concurrently_and_sends_nothing_once_closed(
    make_engram: Callable[..., Engram],
) -> None:
    eng = make_engram()

    async def use_after_close(url: str, key: str) -> ClientClosed:
        async with AsyncClient(url, key) as client:
            turns = await asyncio.gather(*(client.remember_turn(f"turn {i}") for i in range(4)))
            assert sorted(t.text for t in turns) == [f"turn {i}" for i in range(4)]
            assert {m.id for m in await client.list("episodic")} == {t.id for t in turns}
            assert (await client.remember_turn("one")).text == "one"
            assert await client.user_id() == "sarah"
        with pytest.raises(ClientClosed, match=r"is closed: make a new AsyncClient") as closed:
            await client.remember_turn("two")
        return closed.value

    with served(eng) as (url, keys):
        error = asyncio.run(use_after_close(url, keys.create("sarah")[0]))
    assert isinstance(error, EngramError) and error.code == "client_closed"
    texts = [m.text for m in eng.for_user("sarah").list("episodic")]  # newest first
    assert texts[0] == "one" and len(texts) == 5  # "two" was not sent


def test_the_openapi_document_states_what_the_client_uses(make_engram: Callable[..., Engram]) -> None:
    """The fields and route the parity work added are documented (the schemathesis test fuzzes them)."""
    with served(make_engram()) as (url, keys):
        spec = httpx.get(f"{url}/openapi.json").json()
        me = httpx.get(f"{url}/v1/me", headers={"Authorization": f"Bearer {keys.create('sarah')[0]}"})
    schemas = spec["components"]["schemas"]
    assert "record_use" in schemas["RecallRequest"]["properties"]
    assert "created_at" in schemas["MemoryCreate"]["properties"]
    assert spec["paths"]["/v1/me"]["get"]["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Me"
    }
    assert me.status_code == 200 and me.json() == {"user_id": "sarah", "scope": "write"}
