"""The agent's memory tools: their OpenAI function schemas, the parsing of whatever tool calls a model
sends back, and their execution against a ``MemoryHandle``.

A model's tool calls are untrusted input: arguments that are not JSON, an unknown tool, a missing or
unknown field, an id that does not exist. Each such call is answered with a tool result carrying an
error the model can act on; nothing here raises out of a turn.
"""

from __future__ import annotations

import json
import logging
import secrets
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engram.agent.handle import MemoryHandle
from engram.errors import EngramError, public_message
from engram.limits import MAX_SERVICE_RECALL_K, MAX_STEPS
from engram.models import (
    Contradiction,
    FactType,
    Hit,
    Memory,
    MemoryType,
    StrictStep,
    Tombstone,
    no_confident_match,
    search_text_of,
)
from engram.visibility import for_a_model

log = logging.getLogger(__name__)

RECALL = "recall_memory"
WRITE = "write_memory"
FORGET = "forget_memory"
INVALID = "invalid_tool_call"  # the name given to a call that named no function, so it can be answered
# On every row the agent writes: what the model stored can be told apart from what the user wrote
# through the API or consolidation extracted from their turns.
AGENT_WRITE_METADATA = {"source": "agent"}


class _Args(BaseModel):
    # An unknown field is refused, not ignored: "supersede_id" silently dropped would store a second,
    # contradicting fact instead of superseding the old one.
    model_config = ConfigDict(extra="forbid")


class RecallArgs(_Args):
    """Search the user's long-term memory (their past messages, stable facts, playbooks) and the shared
    product catalog. Pass the user's own words, keeping exact tokens (error codes, versions, model
    numbers) as written. Hits come best first with their ids. Superseded facts are hidden unless
    include_superseded is true (for "what did I have before?")."""

    query: str = Field(min_length=1, description="what to look for, in the user's own words")
    k: int = Field(default=8, ge=1, le=50, description="how many hits")
    memory_types: list[MemoryType] | None = Field(
        default=None, description="restrict to these types: episodic, semantic, procedural, catalog"
    )
    include_superseded: bool = False


class WriteArgs(_Args):
    """Store a durable memory about the user: a fact (semantic) or a playbook (procedural: name,
    trigger_text, steps). Only what the user said or confirmed, never your own advice or answers.
    If it contradicts a stored fact, pass that fact's id as supersedes_id (never store a second,
    conflicting fact); contradiction "natural" when the world changed (a move, a new device), "harsh"
    when the old fact was never true."""

    text: str = Field(min_length=1, description="the fact as a short third-person sentence")
    memory_type: Literal["semantic", "procedural"] = "semantic"
    fact_type: FactType = Field(default="identity", description="facts only")
    confidence: float = Field(default=1.0, ge=0, le=1, description="facts only")
    supersedes_id: str | None = Field(default=None, description="id of the stored fact this one replaces")
    contradiction: Contradiction | None = Field(default=None, description="with supersedes_id only")
    name: str | None = Field(default=None, description="a playbook's name (procedural only)")
    trigger_text: str = Field(default="", description="when the playbook applies (procedural only)")
    description: str = Field(default="", description="what the playbook does (procedural only)")
    steps: list[StrictStep] = Field(default_factory=list, max_length=MAX_STEPS)


class ForgetArgs(_Args):
    """Permanently delete one of the user's memories by id. Only when the user explicitly asks to forget
    something; to record a change, use write_memory with supersedes_id instead."""

    memory_id: str = Field(min_length=1)


ARGS: dict[str, type[_Args]] = {RECALL: RecallArgs, WRITE: WriteArgs, FORGET: ForgetArgs}


def tool_schemas() -> list[dict[str, Any]]:
    """The ``tools`` of a chat-completions request, generated from the argument models."""
    tools = []
    for name, model in ARGS.items():
        schema = for_a_model(model.model_json_schema())
        description = " ".join((schema.pop("description", "") or "").split())
        schema.pop("title", None)
        for definition in schema.get("$defs", {}).values():
            definition.pop("description", None)  # written for developers (StrictStep), not the model
        tools.append(
            {"type": "function", "function": {"name": name, "description": description, "parameters": schema}}
        )
    return tools


@dataclass
class ToolCall:
    """One call as the model sent it, made answerable: a call without an id gets one (the tool result
    must name it), a call without a function name is named ``invalid_tool_call``. ``problem`` says
    why the call cannot run before any argument is looked at."""

    id: str
    name: str
    arguments: Any  # the parsed JSON object, else the raw text
    problem: str | None = None

    def as_message_part(self) -> dict[str, Any]:
        raw = self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": raw}}


def _call_id() -> str:
    return f"call_{secrets.token_hex(8)}"


def parse_tool_calls(message: dict[str, Any]) -> list[ToolCall]:
    """The tool calls of an assistant message, each either runnable or carrying its ``problem``."""
    raw_calls = message.get("tool_calls")
    if raw_calls is None or raw_calls == []:
        return []
    if not isinstance(raw_calls, list):
        return [ToolCall(_call_id(), INVALID, str(raw_calls)[:200], "tool_calls must be a list of calls")]
    calls = []
    for raw in raw_calls:
        if not isinstance(raw, dict):
            calls.append(ToolCall(_call_id(), INVALID, str(raw)[:200], "a tool call must be an object"))
            continue
        given_id = raw.get("id")
        call_id = given_id if isinstance(given_id, str) and given_id else _call_id()
        function = raw.get("function")
        if (
            not isinstance(function, dict)
            or not isinstance(function.get("name"), str)
            or not function["name"]
        ):
            calls.append(ToolCall(call_id, INVALID, {}, "the call names no function"))
            continue
        name, arguments = function["name"], function.get("arguments")
        if name not in ARGS:
            calls.append(
                ToolCall(call_id, name, arguments or {}, f"unknown tool {name!r}; use one of {list(ARGS)}")
            )
            continue
        if arguments is None or arguments == "":
            arguments = {}  # some servers send nothing for "no arguments"
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError as exc:
                calls.append(ToolCall(call_id, name, arguments, f"arguments are not valid JSON: {exc}"))
                continue
            except RecursionError:  # nested deeper than the parser's recursion limit ("[[[[...")
                calls.append(
                    ToolCall(call_id, name, arguments, "arguments are not valid JSON: nested too deeply")
                )
                continue
        if not isinstance(arguments, dict):
            calls.append(ToolCall(call_id, name, arguments, "arguments must be a JSON object"))
            continue
        calls.append(ToolCall(call_id, name, arguments))
    return calls


@dataclass
class Outcome:
    """What running one call did: the tool result for the model, and what changed for the turn."""

    content: str
    error: str | None = None
    hits: list[Hit] | None = None
    query: str | None = None
    written: Memory | None = None
    superseded: str | None = None
    forgotten: Tombstone | None = None
    old_text: str | None = None  # the text of the fact superseded or forgotten, read before the change


def error_outcome(code: str, message: str) -> Outcome:
    return Outcome(json.dumps({"error": code, "message": message}), error=f"{code}: {message}")


def run_tool(
    call: ToolCall,
    memory: MemoryHandle,
    *,
    episode_id: str,
    shown_ids: set[str],
    hidden_ids: set[str] | None = None,
    min_confidence: float | None = None,
) -> Outcome:
    """Run one call; every failure is an error result, never an exception. ``episode_id`` (this
    turn's user message) is the provenance of any fact written; ``shown_ids`` are the ids the model
    was shown this turn, the only ones forget_memory takes; ``hidden_ids`` are left out of hits (the
    turn's own message: the model already has it); hits below ``min_confidence`` are not shown. Rows
    written carry ``AGENT_WRITE_METADATA``."""
    if call.problem:
        return error_outcome("invalid_tool_call", call.problem)
    try:
        args = ARGS[call.name].model_validate(call.arguments)
    except ValidationError as exc:
        return error_outcome("invalid_arguments", _describe(exc))
    except RecursionError:  # arguments nested deeper than pydantic can walk
        return error_outcome("invalid_arguments", "arguments are nested too deeply")
    if isinstance(args, ForgetArgs) and args.memory_id not in shown_ids:
        # A deletion cannot be undone: the model may forget only what it has seen this turn, never
        # an id it guessed, remembered from an earlier turn or was handed by a poisoned memory.
        return error_outcome(
            "not_shown",
            f"forget_memory takes only an id shown this turn; {args.memory_id!r} was not. Recall the "
            "memory first, and forget it only if the user asked for exactly that one",
        )
    try:
        if isinstance(args, RecallArgs):
            hits = recall(
                memory,
                args.query,
                args.k,
                args.memory_types,
                args.include_superseded,
                hidden_ids,
                min_confidence,
            )
            return Outcome(hits_content(hits, min_confidence), hits=hits, query=args.query)
        if isinstance(args, WriteArgs):
            row = memory.write(
                args.text,
                args.memory_type,
                fact_type=args.fact_type,
                confidence=args.confidence,
                supporting_episode_ids=[episode_id] if args.memory_type == "semantic" else [],  # a fact's
                supersedes_id=args.supersedes_id,
                contradiction=args.contradiction,
                name=args.name,
                trigger_text=args.trigger_text,
                description=args.description,
                steps=args.steps,
                metadata=dict(AGENT_WRITE_METADATA),
            )
            replaced = getattr(row, "supersedes", None)
            stored = {"id": row.id, "text": row.text, "supersedes": replaced}
            return Outcome(
                json.dumps({"stored": stored}),
                written=row,
                superseded=replaced,
                old_text=_text_of(memory, replaced) if replaced else None,
            )
        assert isinstance(args, ForgetArgs)
        old_text = search_text_of(memory.get(args.memory_id))  # a forgotten row keeps no text
        stone = memory.forget(args.memory_id)
        return Outcome(json.dumps({"forgotten": stone.id}), forgotten=stone, old_text=old_text)
    except EngramError as exc:  # NotFound, InvalidInput, Conflict...: the model can correct these
        return error_outcome(exc.code, public_message(exc))
    except Exception:  # a failure of ours must not end the user's turn; the log has the traceback
        log.exception("agent tool %s failed", call.name)
        return error_outcome("internal_error", "the memory tool failed; try again or answer without it")


def _text_of(memory: MemoryHandle, memory_id: str) -> str | None:
    """A row's text to show a person, or None if it cannot be read (the change itself is done)."""
    try:
        return search_text_of(memory.get(memory_id))
    except EngramError as exc:
        log.warning("the text of %s could not be read: %s", memory_id, exc)
        return None


def recall(
    memory: MemoryHandle,
    query: str,
    k: int,
    memory_types: list[MemoryType] | None = None,
    include_superseded: bool = False,
    hidden_ids: set[str] | None = None,
    min_confidence: float | None = None,
) -> list[Hit]:
    """The top ``k`` hits but the hidden ones. A few more are asked for, so hiding some still leaves
    ``k``, but never more than every handle accepts: the service's bound (the embedded handle takes
    more, but the agent must work on either)."""
    hidden = hidden_ids or set()
    hits = memory.recall(
        query,
        k=min(k + len(hidden), MAX_SERVICE_RECALL_K),
        memory_types=memory_types,
        include_superseded=include_superseded,
        min_confidence=min_confidence,
    )
    return [h for h in hits if h.memory.id not in hidden][:k]


def hits_content(hits: list[Hit], min_confidence: float | None = None) -> str:
    """A recall result as the model reads it: the compact view of each hit (id, type, text, event time,
    confidence; no score breakdown: it costs tokens and tells the model nothing it can use), and a note
    when no hit reached ``min_confidence``."""
    content: dict[str, Any] = {"hits": [h.compact().as_json() for h in hits]}
    if not hits and min_confidence is not None:
        content["note"] = no_confident_match(min_confidence)
    return as_data(content)


def as_data(value: object) -> str:
    """``value`` as one line of JSON that no text inside it can break out of: a newline or a quote is
    escaped by JSON already; ``<`` (a closing tag) and U+2028/U+2029 (line breaks to many readers) are
    escaped here, as JSON allows."""
    text = json.dumps(value, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _describe(exc: ValidationError) -> str:
    """pydantic's errors as one line naming each field ("text: Field required")."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in exc.errors())
