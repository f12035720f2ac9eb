"""``EngramStore``: a LangGraph ``BaseStore`` whose items are Engram memories, so a LangGraph agent, and
LangMem's memory tools, keep their long-term memory in Engram (``pip install -e '.[langgraph]'``).

::

    from engram import Engram
    from engram.adapters.langgraph_store import EngramStore

    store = EngramStore(Engram.open())                   # or EngramStore(Client(url, key))
    store.put(("users", "sarah", "facts"), "home", {"text": "Sarah lives in Edinburgh"})
    store.search(("users", "sarah"), query="where does she live?")

The mapping (docs/integrations/langgraph.md):

- A namespace is ``("users", <user id>, <kind>)``; the kinds are ``"facts"`` (semantic memories),
  ``"episodes"`` (user turns) and ``"playbooks"`` (procedural memories). A search's prefix is
  ``("users", <user id>)`` (every kind) or a whole namespace: Engram recalls within one user.
- An item's key and value are kept in its memory's metadata (``metadata["langgraph"]``); the memory's text
  is the value's ``"text"``, ``"content"`` or ``"memory"`` field, else the fields a put's ``index`` names,
  else the value as JSON. Memories written outside the store (consolidated facts, ``remember_turn``) are
  items too: their key is their Engram id and their value ``{"text": ...}``; a version written outside
  the store over an item's memory (consolidation's supersession) keeps the item's key.
- ``put`` with a key that holds a fact or playbook supersedes it (Engram keeps the old row in the
  chain, ``history``); a turn is never edited, so a new value of an episode forgets the old turn and
  stores the new one. A value equal to the current one writes nothing. ``delete`` forgets the key's
  whole chain (audit tombstones remain).
- ``search`` with a query is Engram's recall (hybrid legs, reranking, time decay), restricted to the
  namespace's kinds, without the catalog; the item's ``score`` is the hit's score. Without a query it
  lists the live items, newest first. ``filter`` is LangGraph's: equality or ``$eq``, ``$ne``, ``$gt``,
  ``$gte``, ``$lt``, ``$lte`` on the value's fields, nested objects matched field by field.

Not supported: TTLs (``supports_ttl`` is False, as LangGraph's own stores without TTL); ``index=False``
(every Engram memory is searchable).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    validate_op_namespace,
)
from langgraph.store.base.embed import get_text_at_path, tokenize_path

from engram.adapters._handles import UserHandle, all_rows, known_users, user_handle
from engram.adapters._langgraph_filter import check_filter, matches
from engram.client import Client
from engram.errors import InvalidInput
from engram.limits import MAX_RECALL_K, MAX_SERVICE_RECALL_K
from engram.memory import Engram
from engram.models import EpisodicMemory, Memory, MemoryType, ProceduralMemory, utcnow

__all__ = ["KINDS", "ROOT", "STORE_KEY", "EngramStore"]

ROOT = "users"
KINDS: dict[str, MemoryType] = {"facts": "semantic", "episodes": "episodic", "playbooks": "procedural"}
KIND_OF: dict[str, str] = {memory_type: kind for kind, memory_type in KINDS.items()}
STORE_KEY = "langgraph"  # the metadata entry holding an item's key, value and first creation
TEXT_FIELDS = ("text", "content", "memory")  # what LangGraph's and LangMem's values call their text
# A filtered search recalls this many hits and keeps those the filter matches: the most the service gives.
FILTERED_POOL = MAX_SERVICE_RECALL_K
_LAYOUT = f"a namespace is ({ROOT!r}, <user id>, <kind>) with kind one of {sorted(KINDS)}"


class EngramStore(BaseStore):
    """LangGraph's long-term memory store over Engram: ``memory`` is an embedded ``Engram`` (every user's
    memory) or a ``Client``/user handle (its user's memory only; another user is PermissionDenied).
    ``index_fields`` are the value fields whose text a memory holds when a put names none (LangGraph's
    ``IndexConfig["fields"]``); ``min_confidence`` keeps only search hits that reach it."""

    supports_ttl = False

    def __init__(
        self,
        memory: Engram | UserHandle,
        *,
        index_fields: Sequence[str] | None = None,
        min_confidence: float | None = None,
    ) -> None:
        self.memory = memory
        self.index_fields = list(index_fields) if index_fields is not None else None
        self.min_confidence = min_confidence
        self._max_k = MAX_SERVICE_RECALL_K if isinstance(memory, Client) else MAX_RECALL_K
        # a put reads the key's current version, then writes the next: two at once (LangGraph's
        # parallel tool calls) both found none and left two live versions of one key
        self._writing: dict[str, threading.Lock] = {}  # per user: puts of different users run at once
        self._locks = threading.Lock()

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations in order: a get after a put in the same batch sees the put. Batches that
        put run one at a time in this store object (another process's puts are not seen: one writer
        per user, or per key, is the caller's to keep)."""
        ops = list(ops)
        users = sorted({_namespace(op.namespace)[0] for op in ops if isinstance(op, PutOp)})
        with contextlib.ExitStack() as held:
            for user_id in users:  # in one order, so two batches never wait for each other
                with self._locks:
                    lock = self._writing.setdefault(user_id, threading.Lock())
                held.enter_context(lock)
            return self._run(ops)

    def _run(self, ops: list[Op]) -> list[Result]:
        live = _LiveItems(self.memory)
        results: list[Result] = []
        for op in ops:
            validate_op_namespace(op)
            if isinstance(op, GetOp):
                results.append(self._get(op, live))
            elif isinstance(op, PutOp):
                self._put(op, live)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(self._search(op, live))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            else:
                raise InvalidInput(f"unknown store operation: {type(op).__name__}")
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """``batch`` in a worker thread: Engram's calls block (the models, the store, HTTP)."""
        return await asyncio.to_thread(self.batch, list(ops))

    # -- operations ------------------------------------------------------------------------------
    def _get(self, op: GetOp, live: _LiveItems) -> Item | None:
        user_id, kind = _namespace(op.namespace)
        row = live.lookup(user_id, kind, op.key)
        if row is None:
            return None
        found = _item(row, user_id)  # a get answers a plain Item, as LangGraph's own stores do
        return Item(
            value=found.value,
            key=found.key,
            namespace=found.namespace,
            created_at=found.created_at,
            updated_at=found.updated_at,
        )

    def _put(self, op: PutOp, live: _LiveItems) -> None:
        user_id, kind = _namespace(op.namespace)
        if op.ttl is not None:
            raise NotImplementedError("EngramStore keeps no TTL: forget items with delete")
        handle = live.handle(user_id)
        current = live.lookup(user_id, kind, op.key)
        rows = live.rows(user_id, kind)
        if op.value is None:
            if current is not None:
                _forget_chain(handle, current)
                del rows[op.key]
            return
        value = dict(op.value)
        if current is not None and _value(current) == value:
            return  # nothing changed: no new version
        first_created = _created_at(current) if current is not None else utcnow()
        entry = {"key": op.key, "value": value, "created_at": first_created.isoformat()}
        text = _text(value, op.index if isinstance(op.index, list) else self.index_fields)
        metadata = {STORE_KEY: entry}
        memory_type = KINDS[kind]
        written: Memory
        if memory_type == "episodic":
            written = handle.remember_turn(text, metadata=metadata)  # first: a refused one loses nothing
            if current is not None:
                handle.forget(current.id)
        elif memory_type == "procedural":
            written = handle.write(
                text,
                "procedural",
                name=_name(value, op.key),
                steps=_steps(value.get("steps")),
                supersedes_id=current.id if current is not None else None,
                metadata=metadata,
            )
        else:
            written = handle.write(
                text, "semantic", supersedes_id=current.id if current is not None else None, metadata=metadata
            )
        rows[op.key] = written

    def _search(self, op: SearchOp, live: _LiveItems) -> list[SearchItem]:
        user_id, kinds = _search_scope(op.namespace_prefix)
        if op.limit < 0 or op.offset < 0:
            raise InvalidInput("a search's limit and offset must be >= 0")
        check_filter(op.filter)
        wanted = op.offset + op.limit
        if wanted == 0:
            return []
        found: list[SearchItem] = []
        if op.query:
            k = min(max(wanted, FILTERED_POOL) if op.filter else wanted, self._max_k)
            hits = live.handle(user_id).recall(
                op.query,
                k=k,
                memory_types=[KINDS[kind] for kind in kinds],
                include_catalog=False,
                min_confidence=self.min_confidence,
            )
            for hit in hits:
                item = _item(live.keyed(user_id, hit.memory), user_id, score=hit.score)
                if matches(item.value, op.filter):
                    found.append(item)
        else:
            rows = [row for kind in kinds for row in live.every(user_id, kind).values()]
            rows.sort(key=lambda row: row.created_at, reverse=True)
            items = (_item(row, user_id) for row in rows)
            found = [item for item in items if matches(item.value, op.filter)]
        return found[op.offset : wanted]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = op.match_conditions or ()
        candidates = [
            (ROOT, user_id, kind)
            for user_id in known_users(self.memory)
            for kind in sorted(KINDS)
            if all(_namespace_matches(c, (ROOT, user_id, kind)) for c in conditions)
        ]
        held = [ns for ns in candidates if user_handle(self.memory, ns[1]).list(KINDS[ns[2]], limit=1)]
        depth = op.max_depth
        names = sorted({ns[:depth] if depth is not None else ns for ns in held})
        return names[op.offset : op.offset + op.limit]


class _LiveItems:
    """The live rows of the (user, kind)s a batch touches, by item key, read once per batch."""

    def __init__(self, memory: Engram | UserHandle) -> None:
        self._memory = memory
        self._handles: dict[str, UserHandle] = {}
        self._rows: dict[tuple[str, str], dict[str, Memory]] = {}
        self._unkeyed: dict[tuple[str, str], list[Memory]] = {}

    def handle(self, user_id: str) -> UserHandle:
        if user_id not in self._handles:
            self._handles[user_id] = user_handle(self._memory, user_id)
        return self._handles[user_id]

    def rows(self, user_id: str, kind: str) -> dict[str, Memory]:
        """The rows by key, but those written outside the store over an item (``keyed``), which take
        a read of their chain each: ``lookup`` and ``every`` add them when they are needed."""
        if (user_id, kind) not in self._rows:
            by_key: dict[str, Memory] = {}
            unkeyed: list[Memory] = []
            for row in all_rows(self.handle(user_id), KINDS[kind]):
                if _entry(row) is None and getattr(row, "supersedes", None) is not None:
                    unkeyed.append(row)
                else:
                    by_key.setdefault(_key(row), row)  # newest first: a key written twice reads the newer
            self._rows[(user_id, kind)] = by_key
            self._unkeyed[(user_id, kind)] = unkeyed
        return self._rows[(user_id, kind)]

    def lookup(self, user_id: str, kind: str, key: str) -> Memory | None:
        rows = self.rows(user_id, kind)
        return rows.get(key) or self.every(user_id, kind).get(key)

    def every(self, user_id: str, kind: str) -> dict[str, Memory]:
        rows = self.rows(user_id, kind)
        for row in self._unkeyed.pop((user_id, kind), []):
            row = self.keyed(user_id, row)
            rows.setdefault(_key(row), row)
        return rows

    def keyed(self, user_id: str, row: Memory) -> Memory:
        """The row, with the item entry of the newest version before it that has one when it has none
        itself: a version written outside the store (consolidation's, an agent's supersession) keeps
        its key, its value's other fields and its first creation, its text being the new one's."""
        if _entry(row) is not None or getattr(row, "supersedes", None) is None:
            return row
        chain = self.handle(user_id).history(row.id)  # oldest first
        ids = [v.id for v in chain]
        before = [v for v in chain[: ids.index(row.id)] if _entry(v)] if row.id in ids else []
        if not before:
            return row
        entry = _entry(before[-1])
        assert entry is not None
        value = dict(entry["value"])
        value[next((f for f in TEXT_FIELDS if f in value), "text")] = row.text
        metadata = {**row.metadata, STORE_KEY: {**entry, "value": value}}
        return row.model_copy(update={"metadata": metadata})


# -- namespaces ------------------------------------------------------------------------------------
def _namespace(namespace: tuple[str, ...]) -> tuple[str, str]:
    """(user id, kind) of an item's namespace; InvalidNamespaceError for any other layout."""
    if len(namespace) != 3 or namespace[0] != ROOT or namespace[2] not in KINDS:
        raise InvalidNamespaceError(f"{_LAYOUT}; got {namespace!r}")
    return namespace[1], namespace[2]


def _search_scope(prefix: tuple[str, ...]) -> tuple[str, list[str]]:
    """(user id, kinds) a search prefix covers: one user, one kind or all of them."""
    if len(prefix) == 2 and prefix[0] == ROOT:
        return prefix[1], sorted(KINDS)
    if len(prefix) == 3:
        user_id, kind = _namespace(prefix)
        return user_id, [kind]
    raise InvalidNamespaceError(
        f"a search names one user, as Engram recalls within one user: ({ROOT!r}, <user id>) or "
        f"{_LAYOUT}; got {prefix!r}"
    )


def _namespace_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """LangGraph's prefix/suffix match, ``"*"`` matching any one label."""
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    prefix = condition.match_type == "prefix"
    labels = namespace[: len(path)] if prefix else namespace[len(namespace) - len(path) :]
    return all(p in ("*", label) for p, label in zip(path, labels, strict=True))


# -- rows and items --------------------------------------------------------------------------------
def _entry(row: Memory) -> dict[str, Any] | None:
    entry = row.metadata.get(STORE_KEY)
    if isinstance(entry, dict) and isinstance(entry.get("key"), str) and isinstance(entry.get("value"), dict):
        return entry
    return None


def _key(row: Memory) -> str:
    entry = _entry(row)
    return entry["key"] if entry is not None else row.id


def _value(row: Memory) -> dict[str, Any]:
    entry = _entry(row)
    if entry is not None:
        return dict(entry["value"])
    if isinstance(row, ProceduralMemory):
        return {"text": row.text, "name": row.name, "steps": [s.instruction for s in row.steps]}
    return {"text": row.text}


def _created_at(row: Memory) -> datetime:
    """When the item was first put: kept across its versions in the entry, else the row's creation."""
    entry = _entry(row)
    if entry is not None and isinstance(entry.get("created_at"), str):
        try:
            return datetime.fromisoformat(entry["created_at"])
        except ValueError:
            pass
    return row.created_at


def _item(row: Memory, user_id: str, *, score: float | None = None) -> SearchItem:
    updated = row.timestamp if isinstance(row, EpisodicMemory) and _entry(row) is None else row.created_at
    return SearchItem(
        namespace=(ROOT, user_id, KIND_OF[row.memory_type]),
        key=_key(row),
        value=_value(row),
        created_at=_created_at(row),
        updated_at=updated,
        score=score,
    )


def _forget_chain(handle: UserHandle, row: Memory) -> None:
    """Forget the row and every older version of it, newest first (forgetting only the newest would
    make the one before it live again)."""
    chain = handle.history(row.id) if not isinstance(row, EpisodicMemory) else [row]
    for version in reversed(chain):
        handle.forget(version.id)


# -- values ----------------------------------------------------------------------------------------
def _text(value: Mapping[str, Any], fields: Sequence[str] | None) -> str:
    """The text a memory holds for a value: the fields named, else its text field, else its JSON."""
    if fields:
        texts = [t for field in fields for t in get_text_at_path(value, tokenize_path(field))]
        if any(t.strip() for t in texts):
            return "\n".join(texts)
    for name in TEXT_FIELDS:
        if name in value and value[name] is not None:
            found = value[name]
            return found if isinstance(found, str) else json.dumps(found, ensure_ascii=False, sort_keys=True)
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _name(value: Mapping[str, Any], key: str) -> str:
    name = value.get("name")
    return name if isinstance(name, str) and name.strip() else key


def _steps(steps: object) -> list[dict[str, Any]]:
    """A playbook value's ``steps``: instructions (strings) or ``{"instruction", "tool"}`` objects."""
    if steps is None:
        return []
    if not isinstance(steps, list):
        raise InvalidInput("a playbook's steps must be a list of instructions")
    made: list[dict[str, Any]] = []
    for order, step in enumerate(steps, 1):
        if isinstance(step, str):
            made.append({"order": order, "instruction": step})
        elif isinstance(step, dict):
            made.append({"order": order, **step})
        else:
            raise InvalidInput(f"steps[{order - 1}] must be an instruction or an object with one")
    return made
