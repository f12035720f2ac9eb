"""The MCP server: remember_turn, recall_memory, write_memory, forget_memory, record_outcome and
consolidate_memory, with the official SDK.

The tenant of every tool call comes from a ``tenant_of(ctx)`` function chosen by the transport: over
HTTP the bearer key checked by the REST app's middleware; over stdio the user fixed at start.
"""

# No ``from __future__ import annotations``: the tools' parameter types are built from this server's
# settings inside build_mcp_server, and the SDK reads them from the evaluated signatures.
import json
import logging
from collections.abc import Callable
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import CallToolResult, InputRequiredResult, TextContent
from mcp.types import Tool as MCPTool
from pydantic import BeforeValidator, Field, StrictBool, StrictFloat, StrictStr, ValidationError

from engram.auth import READ_ONLY
from engram.errors import EngramError, PermissionDenied, public_failure, public_message
from engram.interfaces.consolidation_runs import ConsolidationRuns
from engram.limits import (
    MAX_LINE_CHARS,
    MAX_METADATA_FILTER_KEYS,
    MAX_NAME_CHARS,
    MAX_SERVICE_RECALL_K,
    MAX_SESSION_ID_CHARS,
    MAX_STEPS,
    MAX_SUPPORTING_IDS,
    SESSION_ID_PATTERN,
)
from engram.memory import Engram, UserMemory
from engram.models import (
    Contradiction,
    FactType,
    Hit,
    IsoDatetime,
    MemoryType,
    RecallView,
    StrictStep,
    json_number,
    no_confident_match,
    was_shed,
)
from engram.recall_filter import MetadataKey, MetadataScalar
from engram.visibility import for_a_model

log = logging.getLogger(__name__)

INSTRUCTIONS = """Engram is this user's long-term memory. Call recall_memory with the user's own words
before answering anything that may depend on what they told you before (their devices, preferences,
history, earlier problems). Store each user message verbatim with remember_turn, and stable facts and
working playbooks with write_memory."""

REMEMBER_DESCRIPTION = """Store one user message verbatim as a past turn (episodic memory), once per user
message, so that later recalls find it. Pass the user's exact words, never a summary or your own text.
session_id names the conversation: a short reply ("yes, twice") is searched together with the previous
turn of its session. metadata.assistant_context may carry the assistant message the user replied to: it
helps find the turn and is never turned into a fact. When you keep a conversation between several
people (a group chat, a meeting), store each person's messages the same way with metadata.speaker naming
who said it: the message is searched with the name, and a recall that names that person ranks their
messages up. Facts and playbooks go to write_memory. Returns the stored memory."""

RECALL_DESCRIPTION = """Search the user's long-term memory (past messages, stable facts, playbooks) and the
shared product catalog in one call. Pass the user's own words, keeping exact tokens (model numbers,
versions, error codes) as written. Returns the hits best first, each with its id, type, text,
event_time (when it was said or became true: when two hits disagree, the newer one is usually the
current truth; outdated_by names a newer hit that replaced it) and confidence (0-1). Hits below
min_confidence are left out; none left means nothing relevant is stored: say you don't know rather
than guess. Superseded facts are hidden unless include_superseded is true or the query asks about the
past ("where did I live before?" sees them, with superseded_by). view="full" adds each hit's whole row
and score breakdown."""

WRITE_DESCRIPTION = """Store a durable memory about the user: a fact (memory_type="semantic", e.g. "Sarah
owns a Lumio Hub v2") or a playbook (memory_type="procedural": name, trigger_text, description, ordered
steps; a fact's fields, fact_type, confidence, valid_from, valid_to and supporting_episode_ids, are
refused on a playbook, and a playbook's on a fact). Only store what the user said or confirmed, never
your own advice.
Contradictions: if the new fact contradicts a stored fact, recall it first and pass its id as
supersedes_id - never write a second conflicting fact. contradiction="natural" when the world changed
("we moved to Edinburgh"), "harsh" when the old fact was never true ("I never lived in Bristol, that was
my sister"). Supersede every contradicted fact (one call per id); leave facts that merely mention the old
value and stay true ("Bristol's thick walls weaken Zigbee") alone. supporting_episode_ids: the ids of the
user's turns the fact comes from (remember_turn and recall return them): recall then ranks a superseded
fact's turns ("we live in Bristol btw") below the fact that replaced it. Returns the stored memory."""

FORGET_DESCRIPTION = """Permanently delete one of the user's memories by id. Only when the user explicitly
asks to forget something; to record a change, use write_memory with supersedes_id instead."""


OUTCOME_DESCRIPTION = """Record whether one of the user's playbooks worked when followed: success=true
when the user confirms it solved the problem, false when it did not. Recall ranks playbooks that work
above those that fail. Pass the playbook's id from recall_memory. Returns the playbook with its counts."""

CONSOLIDATE_DESCRIPTION = """Turn the user's stored turns into facts and playbooks now (otherwise the
server does it on its own schedule). Without run_id: starts a run (or returns the one already going)
and answers at once with its run_id and status. With run_id: that run's status (queued, running,
succeeded with counts, or failed with the error)."""


def _call(fn: Callable[[], Any]) -> Any:
    """Run an engine call, turning every error into a ToolError the client can read and that carries
    no server path or driver text (those go to the log)."""
    try:
        return fn()
    except EngramError as exc:
        raise ToolError(f"{exc.code}: {public_message(exc)}") from exc
    except Exception as exc:
        raise ToolError(f"internal_error: {public_failure(exc, 'the tool call')}") from exc


def argument_problems(exc: ValidationError) -> str:
    """A tool's refused arguments in our words, as REST names them (``steps[0].instruction: ...``),
    without pydantic's heading ("1 validation error for recall_memoryArguments") or its links."""
    problems = []
    for err in exc.errors(include_url=False)[:5]:
        where = ""
        for part in err.get("loc", ()):
            where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
        # A validator's ValueError comes back as "Value error, <ours>": the prefix is pydantic's, not ours.
        problems.append(f"{where or 'arguments'}: {err['msg'].removeprefix('Value error, ')}")
    return "; ".join(problems)


class EngramMCPServer(MCPServer):
    """The SDK's server, answering refused arguments in our words (``invalid_input: k: Input should be
    less than or equal to 100``)."""

    async def list_tools(self) -> list[MCPTool]:
        """The tools, their schemas without the visible-text rule (``visibility.for_a_model``): a
        client hands them to its model on every call."""
        return [
            tool.model_copy(update={"input_schema": for_a_model(tool.input_schema)})
            for tool in await super().list_tools()
        ]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context | None = None
    ) -> CallToolResult | InputRequiredResult:
        # The SDK drops arguments a tool does not take, so a misspelt one ("user_query", "metadata" on
        # recall) would change nothing and say nothing; REST refuses unknown fields, so do we.
        schemas = {tool.name: tool.input_schema for tool in await self.list_tools()}
        if name not in schemas:
            raise ToolError(f"invalid_input: no tool named {name!r} (tools: {', '.join(sorted(schemas))})")
        known = set(schemas[name].get("properties", {}))
        unknown = sorted(set(arguments or {}) - known)
        if unknown:
            raise ToolError(
                f"invalid_input: {', '.join(unknown)}: not an argument of {name} "
                f"(it takes {', '.join(sorted(known))})"
            )
        try:
            return _compact_text(await super().call_tool(name, arguments, context))
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError) and not isinstance(exc, UnexpectedToolError):
                raise ToolError(f"invalid_input: {argument_problems(exc.__cause__)}") from exc.__cause__
            if isinstance(exc.__cause__, ToolError):  # ours (``_call``): "<code>: <message>", no SDK prefix
                raise ToolError(str(exc.__cause__)) from exc.__cause__
            raise


def _compact_text(result: CallToolResult | InputRequiredResult) -> CallToolResult | InputRequiredResult:
    """The SDK writes a tool's result as JSON indented by 2, which a model pays for in tokens (a recall
    of five one-line memories: 1,383 characters indented, 1,117 without): the same JSON on one line."""
    if isinstance(result, CallToolResult) and not result.is_error:
        result.content = [
            _one_line(block) if isinstance(block, TextContent) else block for block in result.content
        ]
    return result


def _one_line(block: TextContent) -> TextContent:
    try:
        value = json.loads(block.text)
    except ValueError:  # plain text: as it is
        return block
    return block.model_copy(update={"text": json.dumps(value, ensure_ascii=False)})


def build_mcp_server(
    engram: Engram,
    tenant_of: Callable[[Context], str],
    handle: Callable[[str], UserMemory] | None = None,
    runs: ConsolidationRuns | None = None,
    may_write: Callable[[Context], bool] | None = None,
) -> MCPServer:
    """The MCP tools on ``engram`` for the tenant ``tenant_of`` names; ``handle`` makes the user's
    handle (the service's records what it does for the inspector), else ``engram.for_user``; ``runs``
    the consolidation runs it shares with REST (the server's), else its own; ``may_write`` says
    whether the caller's key may write (a read-only key's write tools answer permission_denied), else
    every caller may."""
    server = EngramMCPServer(name="engram", instructions=INSTRUCTIONS, log_level="WARNING")
    # Each bound is the one the engine enforces (engram.limits, this store's settings): the tools'
    # input schemas show it, and a call past it is refused before any work.
    limits = engram.settings
    Text = Annotated[StrictStr, Field(min_length=1, max_length=limits.max_text_chars)]
    OptionalText = Annotated[StrictStr, Field(max_length=limits.max_text_chars)]
    SessionId = Annotated[
        StrictStr, Field(min_length=1, max_length=MAX_SESSION_ID_CHARS, pattern=SESSION_ID_PATTERN)
    ]
    Name = Annotated[StrictStr, Field(min_length=1, max_length=MAX_NAME_CHARS)]
    MetadataFilter = Annotated[dict[MetadataKey, MetadataScalar], Field(max_length=MAX_METADATA_FILTER_KEYS)]
    RunId = Annotated[StrictStr, Field(min_length=1, max_length=100)]
    # The bounds before the validator, or pydantic writes them as "ge"/"le", which no schema reader knows.
    RecallK = Annotated[int, Field(ge=1, le=MAX_SERVICE_RECALL_K, strict=False), BeforeValidator(json_number)]

    def memory(ctx: Context) -> UserMemory:
        return (handle or engram.for_user)(tenant_of(ctx))

    def writer(ctx: Context) -> UserMemory:
        if may_write is not None and not may_write(ctx):
            raise ToolError(f"{PermissionDenied.code}: {READ_ONLY}")
        return memory(ctx)

    @server.tool(name="remember_turn", description=REMEMBER_DESCRIPTION)
    def remember_turn(
        text: Text,
        ctx: Context,
        session_id: SessionId | None = None,
        at: IsoDatetime | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        # The fields and rules of POST /v1/turns; the engine checks the text (visible, not too long).
        mem = writer(ctx)
        row = _call(lambda: mem.remember_turn(text, at=at, session_id=session_id, metadata=metadata))
        return {"memory": row.model_dump(mode="json")}

    @server.tool(name="recall_memory", description=RECALL_DESCRIPTION)
    def recall_memory(
        query: Text,
        ctx: Context,
        memory_types: Annotated[list[MemoryType], Field(min_length=1)] | None = None,
        k: RecallK = 10,
        include_catalog: StrictBool = True,
        include_superseded: StrictBool = False,
        min_confidence: Annotated[StrictFloat, Field(ge=0, le=1, allow_inf_nan=False)] | None = None,
        view: RecallView = "compact",
        session_id: SessionId | None = None,
        time_from: IsoDatetime | None = None,
        time_to: IsoDatetime | None = None,
        metadata: MetadataFilter | None = None,
    ) -> dict[str, Any]:
        mem = memory(ctx)
        threshold = engram.settings.min_confidence if min_confidence is None else min_confidence
        counts_use = may_write is None or may_write(ctx)  # a read-only key's recall records no use
        hits: list[Hit] = _call(
            lambda: mem.recall(
                query,
                k=k,
                record_use=None if counts_use else False,
                memory_types=memory_types,
                include_catalog=include_catalog,
                include_superseded=include_superseded,
                min_confidence=threshold,
                session_id=session_id,
                time_from=time_from,
                time_to=time_to,
                metadata=metadata,
            )
        )
        result: dict[str, Any] = {
            "hits": [h.compact().as_json() if view == "compact" else h.model_dump(mode="json") for h in hits]
        }
        if was_shed(hits):  # at the top, as REST says it: the order is the previous stage's
            result["shed"] = "the server was loaded: this recall ran without the cross-encoder"
        if not hits:
            result["note"] = no_confident_match(threshold)
        return result

    @server.tool(name="write_memory", description=WRITE_DESCRIPTION)
    def write_memory(
        text: OptionalText,
        ctx: Context,
        memory_type: Literal["semantic", "procedural"] = "semantic",
        fact_type: FactType | None = None,
        confidence: Annotated[StrictFloat, Field(ge=0, le=1, allow_inf_nan=False)] | None = None,
        supersedes_id: StrictStr | None = None,
        contradiction: Contradiction | None = None,
        supporting_episode_ids: Annotated[list[StrictStr], Field(max_length=MAX_SUPPORTING_IDS)]
        | None = None,
        valid_from: IsoDatetime | None = None,
        valid_to: IsoDatetime | None = None,
        name: Name | None = None,
        trigger_text: Annotated[StrictStr, Field(max_length=MAX_LINE_CHARS)] | None = None,
        description: OptionalText | None = None,
        steps: Annotated[list[StrictStep], Field(max_length=MAX_STEPS)] | None = None,
    ) -> dict[str, Any]:
        mem = writer(ctx)
        row = _call(
            lambda: mem.write(
                text,
                memory_type=memory_type,
                fact_type=fact_type or "identity",
                confidence=1.0 if confidence is None else confidence,
                supersedes_id=supersedes_id,
                contradiction=contradiction,
                supporting_episode_ids=supporting_episode_ids or [],
                valid_from=valid_from,
                valid_to=valid_to,
                name=name,
                trigger_text=trigger_text or "",
                description=description or "",
                steps=steps or [],
            )
        )
        return {"memory": row.model_dump(mode="json")}

    @server.tool(name="forget_memory", description=FORGET_DESCRIPTION)
    def forget_memory(memory_id: StrictStr, ctx: Context) -> dict[str, Any]:
        mem = writer(ctx)
        stone = _call(lambda: mem.forget(memory_id))
        return {"forgotten": stone.model_dump(mode="json")}

    @server.tool(name="record_outcome", description=OUTCOME_DESCRIPTION)
    def record_outcome(playbook_id: StrictStr, success: StrictBool, ctx: Context) -> dict[str, Any]:
        mem = writer(ctx)
        row = _call(lambda: mem.record_outcome(playbook_id, success))
        return {"memory": row.model_dump(mode="json")}

    consolidation = runs or ConsolidationRuns(engram)

    @server.tool(name="consolidate_memory", description=CONSOLIDATE_DESCRIPTION)
    def consolidate_memory(ctx: Context, run_id: RunId | None = None) -> dict[str, Any]:
        if run_id is None:  # a run writes facts: a read-only key may only read a run's status
            writer(ctx)
        user = tenant_of(ctx)
        run = _call(lambda: consolidation.get(user, run_id) if run_id else consolidation.trigger(user))
        return dict(run.as_json())

    return server


def http_tenant(ctx: Context) -> str:
    """The tenant the REST app's auth middleware stored on the HTTP request."""
    request = ctx.request_context.request
    user_id = getattr(getattr(request, "state", None), "engram_user", None)
    if not user_id:  # unreachable behind the middleware; refuse rather than guess
        raise ToolError("unauthorized: no tenant on this request")
    return str(user_id)


def http_may_write(ctx: Context) -> bool:
    """Whether the key of the HTTP request may write, as the REST app's auth middleware stored it."""
    request = ctx.request_context.request
    return getattr(getattr(request, "state", None), "engram_may_write", False) is True


def run_stdio(engram: Engram, user_id: str, *, may_write: bool = True) -> None:
    """Serve MCP over stdin/stdout for one user (local clients such as Claude Desktop); with
    ``may_write`` false (a read-only key) the writing tools refuse."""
    server = build_mcp_server(engram, lambda ctx: user_id, may_write=lambda ctx: may_write)
    server.run("stdio")
