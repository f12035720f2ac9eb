"""What each user's key did lately, for the inspector's "this turn" view.

A turn is everything one user's key did through the REST API from one ``POST /v1/turns`` to the next:
the turn itself, the recalls (with their hits), the writes, the supersessions and the forgets. The log
is in memory, per user and bounded (the last few turns of the most recently active users, a capped
number of events and hits each), so it costs little and holds nothing past a restart. Each user's
entries come from that user's own handle (``RecordingMemory``), so they hold that user's rows and
catalog rows only. Forgetting a row also removes its text from the log, and what is shown is checked
against the store first (``without``), so a row forgotten through another process, the CLI or the
Python API is never shown either.

Rows are kept slim (``slim``: every text cut to TEXT_KEPT, metadata and provenance lists dropped, at most
STEPS_KEPT steps, an explain of numbers and short notes), and each entry's memory is estimated as it is
added (``size_of``, from its rows' JSON): a user's log holds at most USER_BYTES,
its oldest turns going first, so the whole log stays under USERS_KEPT x USER_BYTES (100 MB) whatever
the rows hold and however hard the kept users recall.

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
TEXT_KEPT = 300  # characters of a row's text (and of a query, a step, a note) the log keeps
STEPS_KEPT = 10  # of a playbook's steps
EXPLAIN_KEPT = 40  # entries of a hit's explain (a dozen stages and multipliers in practice)
# What a user's log may hold in memory, estimated by size_of: about 30 recalls of 10 hits at the longest
# texts, hundreds of short ones. 200 users: 100 MB at most.
USER_BYTES = 512 * 1024
# size_of's estimate: a slim row holds 2.2x (short fact) to 2.6x (playbook with steps) its JSON length
# as Python objects (measured with tracemalloc), plus up to 2 KB for the objects around it.
BYTES_PER_JSON_CHAR = 3
ENTRY_OVERHEAD = 2048


def slim(memory: MemoryT) -> MemoryT:
    """What the log keeps of a row: every text field cut to TEXT_KEPT, no metadata, no provenance list
    (a fact can cite thousands of turns), at most STEPS_KEPT steps, each cut, no refined steps. A row
    can carry a megabyte of metadata; the view shows none of it."""
    update: dict[str, Any] = {"metadata": {}}
    for name in ("text", "context", "description", "trigger_text", "name", "title", "session_id"):
        value = getattr(memory, name, None)
        if isinstance(value, str) and len(value) > TEXT_KEPT:
            update[name] = _cut(value)
    if isinstance(memory, SemanticMemory):
        update["supporting_episode_ids"] = []
    if isinstance(memory, ProceduralMemory):
        update["refined_steps"] = None
        update["steps"] = [
            step.model_copy(
                update={"instruction": _cut(step.instruction), "tool": step.tool and _cut(step.tool)}
            )
            for step in memory.steps[:STEPS_KEPT]
        ]
    return memory.model_copy(update=update)


def _slim_hit(hit: Hit) -> Hit:
    """The hit with its row slim and its explain cut to numbers and short notes."""
    explain: dict[str, Any] = {}
    for key, value in list(hit.explain.items())[:EXPLAIN_KEPT]:
        if isinstance(value, str):
            explain[_cut(key)] = _cut(value)
        elif value is None or isinstance(value, int | float):
            explain[_cut(key)] = value
    return hit.model_copy(update={"memory": slim(hit.memory), "explain": explain})


def _cut(text: str) -> str:
    return text if len(text) <= TEXT_KEPT else text[:TEXT_KEPT] + "…"


def size_of(*rows: BaseModel | None) -> int:
    """The memory an entry holding these (slim) rows takes, estimated from their JSON (an over-estimate:
    see BYTES_PER_JSON_CHAR)."""
    kept = [row for row in rows if row is not None]
    json_chars = sum(len(row.model_dump_json()) for row in kept)
    return ENTRY_OVERHEAD * (1 + len(kept)) + BYTES_PER_JSON_CHAR * json_chars


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


def _unless(forgotten: bool, event: RecallEvent) -> str:
    """A recall's query, or "" once the turn it was made in is forgotten (the view says so)."""
    return "" if forgotten else event.query


def without(turns: list[Turn], gone: set[str]) -> list[Turn]:
    """Copies of ``turns`` with the rows in ``gone`` left out (the log itself is not changed)."""
    if not gone:
        return turns
    kept: list[Turn] = []
    for turn in turns:
        events: list[Event] = []
        said_gone = turn.episode is not None and turn.episode.id in gone
        for event in turn.events:
            if isinstance(event, RecallEvent):
                hits = [h for h in event.hits if h.memory.id not in gone]
                dropped = event.dropped_hits + len(event.hits) - len(hits)
                # an agent recalls the message itself: a forgotten turn's queries go with its words
                query = _unless(said_gone, event)
                events.append(replace(event, hits=hits, dropped_hits=dropped, query=query))
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
        episode = None if said_gone else turn.episode
        kept.append(Turn(turn.number, turn.started_at, episode, events, turn.dropped_events, turn.size))
    return kept


@dataclass
class RecallEvent:
    at: datetime
    query: str
    hits: list[Hit]
    dropped_hits: int = 0  # hits past HITS_PER_RECALL, or forgotten since
    kind: str = "recall"

    def size(self) -> int:
        return size_of(*self.hits) + len(self.query)


@dataclass
class WriteEvent:
    at: datetime
    memory: SemanticMemory | ProceduralMemory | None  # None once the row has been forgotten
    superseded: Memory | None = None  # the row it replaced, as it was after the write
    contradiction: str | None = None
    kind: str = "write"

    def size(self) -> int:
        return size_of(self.memory, self.superseded)


@dataclass
class ForgetEvent:
    at: datetime
    tombstone: Tombstone
    kind: str = "forget"

    def size(self) -> int:
        return size_of(self.tombstone)


Event = RecallEvent | WriteEvent | ForgetEvent


@dataclass
class Turn:
    number: int  # 1 for the first turn this process saw; 0 for activity before any turn
    started_at: datetime
    episode: EpisodicMemory | None  # the user's message; None before any turn or once forgotten
    events: list[Event] = field(default_factory=list)
    dropped_events: int = 0
    size: int = 0  # what its episode and events count (size_of), as they were added

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
                Turn(t.number, t.started_at, t.episode, list(t.events), t.dropped_events, t.size)
                for t in log.turns
            ]
            return log.version, turns[::-1]

    def version(self, user_id: str) -> int:
        with self._lock:
            log = self._users.get(user_id)
            return 0 if log is None else log.version

    def start_turn(self, user_id: str, episode: EpisodicMemory) -> None:
        size = size_of(episode)
        with self._lock:
            log = self._log(user_id)
            log.turns.append(Turn(log.next_number, episode.created_at, episode, size=size))
            log.next_number += 1
            _within_budget(log)

    def add(self, user_id: str, event: Event) -> None:
        size = event.size()  # measured outside the lock: it serialises the rows
        with self._lock:
            log = self._log(user_id)
            if not log.turns:  # activity before any turn (or before this process started)
                log.turns.append(Turn(0, event.at, None))
            turn = log.turns[-1]
            if len(turn.events) < EVENTS_PER_TURN and turn.size + size <= USER_BYTES:
                turn.events.append(event)
                turn.size += size
                _within_budget(log)
            else:  # a runaway turn: counted, not kept
                turn.dropped_events += 1

    def scrub(self, user_id: str, memory_id: str) -> None:
        """Remove a forgotten row's text from the user's log: forgetting is for good."""
        with self._lock:
            log = self._users.get(user_id)
            if log is None:
                return
            for turn in log.turns:
                said = turn.episode is not None and turn.episode.id == memory_id
                if said:
                    turn.episode = None
                for event in turn.events:
                    if isinstance(event, RecallEvent):
                        event.query = _unless(said, event)
                        kept = [h for h in event.hits if h.memory.id != memory_id]
                        event.dropped_hits += len(event.hits) - len(kept)
                        event.hits = kept
                    elif isinstance(event, WriteEvent):
                        if event.memory is not None and event.memory.id == memory_id:
                            event.memory = None
                        if event.superseded is not None and event.superseded.id == memory_id:
                            event.superseded = None
            log.version += 1

    def drop_user(self, user_id: str) -> bool:
        """Forget everything logged of a deleted user; whether anything was logged."""
        with self._lock:
            return self._users.pop(user_id, None) is not None

    def _log(self, user_id: str) -> _UserLog:
        """The user's log, created if new, marked most recently active; the caller holds the lock."""
        log = self._users.pop(user_id, None) or _UserLog()
        self._users[user_id] = log
        while len(self._users) > USERS_KEPT:
            self._users.popitem(last=False)
        log.version += 1
        return log


def _within_budget(log: _UserLog) -> None:
    """Drop the user's oldest turns until the log holds at most USER_BYTES (the current turn stays:
    ``add`` keeps it under the budget on its own)."""
    while len(log.turns) > 1 and sum(t.size for t in log.turns) > USER_BYTES:
        log.turns.popleft()


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

    def forget(self, memory_id: str, *, revive_retracted: bool = False) -> Tombstone:
        stone = super().forget(memory_id, revive_retracted=revive_retracted)
        self._activity.scrub(self.user_id, stone.id)
        self._activity.add(self.user_id, ForgetEvent(utcnow(), stone))
        return stone
