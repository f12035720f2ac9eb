"""What each user's key did lately, for the inspector's "this turn" view.

A turn is everything one user's key did through the REST API from one ``POST /v1/turns`` to the next:
the turn itself, the recalls (with their hits), the writes, the supersessions and the forgets. The log
is in memory, per user and bounded (the last few turns of the most recently active users, a capped
number of events and hits each), so it costs little and holds nothing past a restart. Each user's
entries come from that user's own handle (``RecordingMemory``), so they hold that user's rows and
catalog rows only. Forgetting a row also removes its text from the log, and what is shown is checked
against the store first (``without``), so a row forgotten through another process, the CLI or the
Python API is never shown either.

Rows are kept slim (``slim``: text cut, metadata dropped), so the log's memory has a bound whatever the
rows hold: at most USERS_KEPT x TURNS_KEPT x EVENTS_PER_TURN events of HITS_PER_RECALL slim rows
(a few hundred bytes each), about 100 MB if every kept user hammers recall, far less in practice.

With ``engram serve --workers N`` each process keeps its own log, and the view shows what the process
that answers it saw; with one worker (the default) it shows everything.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel

from engram.memory import Engram, UserMemory
from engram.models import (
    EpisodicMemory,
    Hit,
    Memory,
    ProceduralMemory,
    SemanticMemory,
    Tombstone,
    utcnow,
)

MemoryT = TypeVar("MemoryT", bound=BaseModel)  # a row (or a union of rows) keeps its type through slim()

TURNS_KEPT = 5  # the current turn and a few before it
EVENTS_PER_TURN = 50  # an agent turn makes a handful; a runaway loop is cut here (and counted)
HITS_PER_RECALL = 10  # what an agent reads of a recall
USERS_KEPT = 200  # least recently active users are dropped first: the inspector looks at recent ones
TEXT_KEPT = 300  # characters of a row's text (and of a query) the log keeps


def slim(memory: MemoryT) -> MemoryT:
    """What the log keeps of a row: its text and a few long fields cut to TEXT_KEPT, no metadata, at most
    ten steps (a row can carry a megabyte of metadata; the view shows none of it)."""
    update: dict[str, Any] = {"metadata": {}}
    for name in ("text", "context", "description", "trigger_text"):
        value = getattr(memory, name, None)
        if isinstance(value, str) and len(value) > TEXT_KEPT:
            update[name] = value[:TEXT_KEPT] + "…"
    if isinstance(memory, ProceduralMemory) and len(memory.steps) > 10:
        update["steps"] = memory.steps[:10]
    return memory.model_copy(update=update)


def _slim_hit(hit: Hit) -> Hit:
    return hit.model_copy(update={"memory": slim(hit.memory)})


def ids_in(turns: Iterable[Turn]) -> set[str]:
    """Every row id the turns show."""
    ids: set[str] = set()
    for turn in turns:
        if turn.episode is not None:
            ids.add(turn.episode.id)
        for event in turn.events:
            if isinstance(event, RecallEvent):
                ids.update(h.memory.id for h in event.hits)
            elif isinstance(event, WriteEvent):
                ids.update(m.id for m in (event.memory, event.superseded) if m is not None)
    return ids


def without(turns: list[Turn], gone: set[str]) -> list[Turn]:
    """Copies of ``turns`` with the rows in ``gone`` left out (the log itself is not changed)."""
    if not gone:
        return turns
    kept: list[Turn] = []
    for turn in turns:
        events: list[Event] = []
        for event in turn.events:
            if isinstance(event, RecallEvent):
                hits = [h for h in event.hits if h.memory.id not in gone]
                events.append(
                    replace(event, hits=hits, dropped_hits=event.dropped_hits + len(event.hits) - len(hits))
                )
            elif isinstance(event, WriteEvent):
                events.append(
                    replace(
                        event,
                        memory=None if event.memory is not None and event.memory.id in gone else event.memory,
                        superseded=None
                        if event.superseded is not None and event.superseded.id in gone
                        else event.superseded,
                    )
                )
            else:
                events.append(event)
        episode = None if turn.episode is not None and turn.episode.id in gone else turn.episode
        kept.append(Turn(turn.number, turn.started_at, episode, events, turn.dropped_events))
    return kept


@dataclass
class RecallEvent:
    at: datetime
    query: str
    hits: list[Hit]
    dropped_hits: int = 0  # hits past HITS_PER_RECALL, or forgotten since
    kind: str = "recall"


@dataclass
class WriteEvent:
    at: datetime
    memory: SemanticMemory | ProceduralMemory | None  # None once the row has been forgotten
    superseded: Memory | None = None  # the row it replaced, as it was after the write
    contradiction: str | None = None
    kind: str = "write"


@dataclass
class ForgetEvent:
    at: datetime
    tombstone: Tombstone
    kind: str = "forget"


Event = RecallEvent | WriteEvent | ForgetEvent


@dataclass
class Turn:
    number: int  # 1 for the first turn this process saw; 0 for activity before any turn
    started_at: datetime
    episode: EpisodicMemory | None  # the user's message; None before any turn or once forgotten
    events: list[Event] = field(default_factory=list)
    dropped_events: int = 0

    def touched(self) -> dict[str, str]:
        """Ids this turn recalled or wrote: ``{id: "recalled" | "written"}`` (writing wins)."""
        marks: dict[str, str] = {}
        for event in self.events:
            if isinstance(event, RecallEvent):
                for hit in event.hits:
                    marks.setdefault(hit.memory.id, "recalled")
            elif isinstance(event, WriteEvent) and event.memory is not None:
                marks[event.memory.id] = "written"
        if self.episode is not None:
            marks[self.episode.id] = "written"
        return marks


@dataclass
class _UserLog:
    turns: deque[Turn] = field(default_factory=lambda: deque(maxlen=TURNS_KEPT))
    version: int = 0  # bumped on every change: lets a poller skip an unchanged view
    next_number: int = 1


class ActivityLog:
    """Per-user, bounded, thread-safe (routes run on worker threads)."""

    def __init__(self) -> None:
        self._users: OrderedDict[str, _UserLog] = OrderedDict()
        self._lock = threading.Lock()

    def snapshot(self, user_id: str) -> tuple[int, list[Turn]]:
        """(version, turns newest first) of one user; copies, so a render never sees a change half made."""
        with self._lock:
            log = self._users.get(user_id)
            if log is None:
                return 0, []
            turns = [
                Turn(t.number, t.started_at, t.episode, list(t.events), t.dropped_events) for t in log.turns
            ]
            return log.version, turns[::-1]

    def version(self, user_id: str) -> int:
        with self._lock:
            log = self._users.get(user_id)
            return 0 if log is None else log.version

    def start_turn(self, user_id: str, episode: EpisodicMemory) -> None:
        with self._lock:
            log = self._log(user_id)
            log.turns.append(Turn(log.next_number, episode.created_at, episode))
            log.next_number += 1

    def add(self, user_id: str, event: Event) -> None:
        with self._lock:
            log = self._log(user_id)
            if not log.turns:  # activity before any turn (or before this process started)
                log.turns.append(Turn(0, event.at, None))
            turn = log.turns[-1]
            if len(turn.events) < EVENTS_PER_TURN:
                turn.events.append(event)
            else:
                turn.dropped_events += 1

    def scrub(self, user_id: str, memory_id: str) -> None:
        """Remove a forgotten row's text from the user's log: forgetting is for good."""
        with self._lock:
            log = self._users.get(user_id)
            if log is None:
                return
            for turn in log.turns:
                if turn.episode is not None and turn.episode.id == memory_id:
                    turn.episode = None
                for event in turn.events:
                    if isinstance(event, RecallEvent):
                        kept = [h for h in event.hits if h.memory.id != memory_id]
                        event.dropped_hits += len(event.hits) - len(kept)
                        event.hits = kept
                    elif isinstance(event, WriteEvent):
                        if event.memory is not None and event.memory.id == memory_id:
                            event.memory = None
                        if event.superseded is not None and event.superseded.id == memory_id:
                            event.superseded = None
            log.version += 1

    def _log(self, user_id: str) -> _UserLog:
        """The user's log, created if new, marked most recently active; the caller holds the lock."""
        log = self._users.pop(user_id, None) or _UserLog()
        self._users[user_id] = log
        while len(self._users) > USERS_KEPT:
            self._users.popitem(last=False)
        log.version += 1
        return log


class RecordingMemory(UserMemory):
    """A user's handle that also records what it does in the activity log (the REST routes use it).
    Only successful operations are recorded; each method returns what ``UserMemory`` returns."""

    def __init__(self, engram: Engram, user_id: str, log: ActivityLog) -> None:
        super().__init__(engram, user_id)
        self._activity = log

    def remember_turn(self, *args: Any, **kwargs: Any) -> EpisodicMemory:
        row = super().remember_turn(*args, **kwargs)
        self._activity.start_turn(self.user_id, slim(row))
        return row

    def write(self, *args: Any, **kwargs: Any) -> SemanticMemory | ProceduralMemory:
        row = super().write(*args, **kwargs)
        superseded = None
        if row.supersedes is not None:  # show what it replaced, now marked superseded
            found = self._engram.store.fetch(self.user_id, [row.supersedes], include_catalog=False)
            superseded = slim(found[0]) if found else None
        contradiction = getattr(row, "contradiction", None) if row.supersedes else None
        written = slim(row)
        assert isinstance(written, SemanticMemory | ProceduralMemory)
        self._activity.add(self.user_id, WriteEvent(utcnow(), written, superseded, contradiction))
        return row

    def recall(self, *args: Any, **kwargs: Any) -> Any:  # Any: the handle's overloads, by ``view``
        compact = kwargs.pop("view", "full") == "compact"
        hits = super().recall(*args, **kwargs)  # full hits: the log shows how each was scored
        query = args[0] if args else kwargs.get("query", "")
        kept = [_slim_hit(h) for h in hits[:HITS_PER_RECALL]]
        event = RecallEvent(utcnow(), str(query)[:TEXT_KEPT], kept, max(0, len(hits) - HITS_PER_RECALL))
        self._activity.add(self.user_id, event)
        return [h.compact() for h in hits] if compact else hits

    def forget(self, memory_id: str) -> Tombstone:
        stone = super().forget(memory_id)
        self._activity.scrub(self.user_id, stone.id)
        self._activity.add(self.user_id, ForgetEvent(utcnow(), stone))
        return stone
