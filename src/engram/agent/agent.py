"""A support agent with long-term memory, over any OpenAI-compatible chat endpoint with tool calling.

One turn (``Agent.respond``):

1. the user's message is stored verbatim as an episode BEFORE the model is called. Replies are never
   stored as memories: the previous reply is kept only as this turn's ``metadata["assistant_context"]``
   (so consolidation can tell who said what), cut to ``ASSISTANT_CONTEXT_CHARS``;
2. memory is recalled on the raw message and handed to the model as if it had called recall_memory
   itself: exact tokens (error codes, versions) reach it before it can paraphrase them away;
3. the system prompt carries the rules and a bounded profile of the user's core facts;
4. the model may call recall_memory / write_memory / forget_memory for at most ``max_tool_rounds``
   rounds of at most ``max_tool_calls`` calls each; then it must answer. Malformed calls get tool
   errors, never an exception; forget_memory takes only ids the model was shown this turn, and what
   it writes carries ``metadata={"source": "agent"}``;
5. consolidation follows the existing policy: embedded, ``EmbeddedConsolidation`` applies the serve
   worker's every-N-turns rule after the turn; through an ``engram.Client``, the server's worker does.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from engram.agent.handle import MemoryHandle
from engram.agent.prompt import profile_facts, system_prompt
from engram.agent.tools import (
    RECALL,
    error_outcome,
    hits_content,
    parse_tool_calls,
    recall,
    run_tool,
    tool_schemas,
)
from engram.consolidation.llm import LLMClient, LLMError
from engram.consolidation.policy import ConsolidationReport
from engram.consolidation.prompts import ASSISTANT_CONTEXT_CHARS, ASSISTANT_CONTEXT_KEY
from engram.errors import ConfigError, EngramError, public_failure, public_message
from engram.models import EpisodicMemory, Hit, Memory, Tombstone, utcnow
from engram.settings import DEFAULT_AGENT_TURN_TIMEOUT_S, DEFAULT_MIN_CONFIDENCE, EngramSettings

if TYPE_CHECKING:
    from engram.memory import Engram

log = logging.getLogger(__name__)

HISTORY_TURNS = 10  # earlier exchanges of this chat the model sees verbatim; older ones live in memory
# ...and at most this many characters of them (about 4k tokens), oldest exchanges dropped first: a few
# long messages must not push the request past a small model's context window on every later turn.
HISTORY_CHARS = 16_000
# An LLM refusing the request with these statuses may be refusing its size: the next turn starts
# without the chat's history rather than failing the same way for good.
REFUSED_STATUSES = frozenset({400, 413, 422})
# After a failed run the episodes are still waiting, so every turn would be due again: with a broken
# consolidation LLM that is a failing call per turn. Wait this long instead.
RETRY_AFTER_FAILURE_S = 600.0
NO_ANSWER = "Sorry, I could not finish looking this up. Could you say it again?"


class Recall(BaseModel):
    """One recall of the turn: the pre-recall on the raw message, or one the model asked for."""

    source: Literal["pre-recall", "tool"]
    query: str
    hits: list[Hit] = Field(default_factory=list)
    error: str | None = None


class ToolCallRecord(BaseModel):
    name: str
    arguments: Any
    error: str | None = None


class TurnResult(BaseModel):
    """What a turn did: the reply, what was recalled, what was written, superseded or forgotten."""

    message: str
    episode: EpisodicMemory = Field(description="the user's message, as stored before the model was called")
    reply: str
    recalled: list[Recall] = Field(default_factory=list)
    written: list[Memory] = Field(default_factory=list)
    superseded: list[str] = Field(default_factory=list, description="ids of facts replaced this turn")
    forgotten: list[Tombstone] = Field(default_factory=list)
    texts: dict[str, str] = Field(
        default_factory=dict, description="the text of each fact superseded or forgotten, by id"
    )
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    tool_rounds: int = 0
    round_limit_hit: bool = False
    consolidating: bool = Field(default=False, description="a consolidation run started after this turn")
    error: str | None = Field(default=None, description="the model round failed: the reply is a fallback")


class EmbeddedConsolidation:
    """The consolidation worker's rule (``engram serve``: a run once a user has ``every_episodes``
    waiting turns) for one user of an embedded store. Checked after each turn; a due run goes to a
    background thread, one at a time, so the chat never waits for it. The hours rule belongs to a
    long-running worker and is left to it."""

    def __init__(self, engram: Engram, user_id: str, every_episodes: int) -> None:
        self.engram = engram
        self.user_id = user_id
        self.every_episodes = every_episodes
        self.reports: list[ConsolidationReport] = []
        self._thread: threading.Thread | None = None
        self._failed_at: float | None = None  # monotonic time of the last failed run

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def after_turn(self) -> bool:
        """Start a run if one is due and none is going; True if it started."""
        if self.running:
            return False  # the next turn checks again
        if self._failed_at is not None and time.monotonic() - self._failed_at < RETRY_AFTER_FAILURE_S:
            return False
        store: Any = self.engram.store
        try:
            waiting = len(store.waiting_episodes(self.user_id, self.every_episodes))
        except EngramError as exc:  # the turn is done; the next one checks again
            log.warning("consolidation check failed: %s", exc)
            return False
        if waiting < self.every_episodes:
            return False
        self._thread = threading.Thread(target=self._run, name="engram-agent-consolidation", daemon=True)
        self._thread.start()
        return True

    def _run(self) -> None:
        failed = True
        try:
            report = self.engram.consolidate(self.user_id)
            self.reports.append(report)
            failed = report.status.startswith("error")
        except Exception as exc:  # a failed run leaves its episodes waiting for the next one
            failure = public_failure(exc, f"consolidation of {self.user_id}")  # logs the traceback
            self.reports.append(ConsolidationReport(user_id=self.user_id, status=f"error: {failure}"))
        self._failed_at = time.monotonic() if failed else None

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()


class Agent:
    """A support agent over one user's memory (an embedded ``UserMemory`` or an ``engram.Client``).

    ``Agent.for_engram(eng, "sarah")`` embedded, or ``Agent.from_settings(client, settings)``;
    ``agent.respond("my hub shows E-4012 again")`` returns a ``TurnResult``. Close it when done.
    """

    def __init__(
        self,
        memory: MemoryHandle,
        llm: LLMClient,
        *,
        max_tool_rounds: int = 4,
        max_tool_calls: int = 8,
        max_tokens: int | None = 1024,
        profile_facts: int = 24,
        recall_k: int = 8,
        turn_timeout_s: float = DEFAULT_AGENT_TURN_TIMEOUT_S,
        min_confidence: float | None = DEFAULT_MIN_CONFIDENCE,
        consolidation: EmbeddedConsolidation | None = None,
        session_id: str | None = None,
        owns_llm: bool = False,
    ) -> None:
        self.memory = memory
        self.llm = llm
        self.max_tool_rounds = max_tool_rounds
        self.max_tool_calls = max_tool_calls
        self.max_tokens = max_tokens
        self.profile_facts = profile_facts
        self.recall_k = recall_k
        self.turn_timeout_s = turn_timeout_s  # the model calls of a turn end by then, retries included
        self.min_confidence = min_confidence  # hits below it are not shown to the model
        self.consolidation = consolidation
        self.session_id = session_id or f"chat-{secrets.token_hex(6)}"
        self._owns_llm = owns_llm
        self._history: list[dict[str, Any]] = []  # earlier user messages and replies of this chat
        self._last_reply: str | None = None
        self._tools = tool_schemas()

    @classmethod
    def from_settings(
        cls,
        memory: MemoryHandle,
        settings: EngramSettings,
        *,
        consolidation: EmbeddedConsolidation | None = None,
    ) -> Agent:
        """An agent on the configured LLM (ENGRAM_LLM_*); ConfigError when none is configured."""
        llm = LLMClient.from_settings(settings)
        if llm is None:
            raise ConfigError(
                "the agent needs an LLM: set ENGRAM_LLM_BASE_URL (an OpenAI-compatible endpoint with tool "
                "calling, e.g. http://localhost:11434/v1) and ENGRAM_LLM_MODEL"
            )
        return cls(
            memory,
            llm,
            max_tool_rounds=settings.agent_max_tool_rounds,
            max_tool_calls=settings.agent_max_tool_calls,
            max_tokens=settings.agent_max_tokens,
            profile_facts=settings.agent_profile_facts,
            recall_k=settings.agent_recall_k,
            turn_timeout_s=settings.agent_turn_timeout_s,
            min_confidence=settings.min_confidence,
            consolidation=consolidation,
            owns_llm=True,
        )

    @classmethod
    def for_engram(cls, engram: Engram, user_id: str) -> Agent:
        """An agent on an embedded store, with ``engram.settings``; consolidation runs by the worker's
        rule unless ``consolidation_worker`` is off."""
        settings = engram.settings
        memory = engram.for_user(user_id)
        consolidation = (
            EmbeddedConsolidation(engram, memory.user_id, settings.consolidate_every_episodes)
            if settings.consolidation_worker and settings.llm_base_url and settings.llm_model
            else None
        )
        return cls.from_settings(memory, settings, consolidation=consolidation)

    def new_session(self) -> str:
        """Start a new conversation: a new session id, none of this chat's history (memory stays)."""
        self.session_id = f"chat-{secrets.token_hex(6)}"
        self._history = []
        self._last_reply = None
        return self.session_id

    def respond(self, message: str) -> TurnResult:
        """One user turn. Raises only if the message cannot be stored (InvalidInput: nothing changed;
        StorageError); any failure of the model round (the LLM down or answering garbage, a bug of
        ours) gives a fallback reply and ``error``."""
        context = _clip(self._last_reply, ASSISTANT_CONTEXT_CHARS) if self._last_reply else None
        metadata = {ASSISTANT_CONTEXT_KEY: context} if context else None
        try:
            episode = self.memory.remember_turn(message, session_id=self.session_id, metadata=metadata)
        except Exception:
            # The reply may be what the store refused (a lone surrogate): the next try goes without it.
            self._last_reply = None
            raise
        result = TurnResult(message=message, episode=episode, reply="")
        text = ""
        try:
            text = self._model_round(message, episode.id, result)
        except LLMError as exc:
            log.warning("agent turn failed: %s", exc)
            result.error = str(exc)
            if exc.status in REFUSED_STATUSES:
                self._history = []
        except Exception as exc:  # never a traceback nor exception text for the user; the log has it
            result.error = public_failure(exc, "the turn")
        result.reply = text or NO_ANSWER
        # Only what the model said is context for the next turn; our fallback is not.
        self._last_reply = text or None
        if text:
            self._remember_exchange(message, text)
        if self.consolidation is not None:
            result.consolidating = self.consolidation.after_turn()
        return result

    def _model_round(self, message: str, episode_id: str, result: TurnResult) -> str:
        """The profile, the pre-recall and the model's calls; returns the model's text ("" if none).
        The model's calls end by ``turn_timeout_s`` from now (LLMError: the fallback reply)."""
        deadline = time.monotonic() + self.turn_timeout_s
        hidden = {episode_id}  # the model has the message itself: a hit on it would waste a slot
        try:
            facts = profile_facts(self.memory, self.profile_facts)
        except EngramError as exc:  # without a profile the model still has the recall and the tools
            log.warning("agent profile failed: %s", exc)
            facts = []
        shown = {f.id for f in facts}  # the ids the model was shown this turn: forget_memory's only
        messages = [
            {"role": "system", "content": system_prompt(facts, utcnow(), self.profile_facts)},
            *self._history,
            {"role": "user", "content": message},
            *self._pre_recall(message, hidden, shown, result),
        ]
        return self._run_model(messages, episode_id, hidden, shown, result, deadline)

    def _remember_exchange(self, message: str, reply: str) -> None:
        """Add an exchange to the history the model sees, then drop the oldest exchanges beyond
        ``HISTORY_TURNS`` or ``HISTORY_CHARS`` (an exchange too long on its own is not kept)."""
        history = [
            *self._history,
            {"role": "user", "content": message},
            {"role": "assistant", "content": reply},
        ]
        history = history[-2 * HISTORY_TURNS :]
        while history and sum(len(m["content"]) for m in history) > HISTORY_CHARS:
            history = history[2:]
        self._history = history

    def _pre_recall(
        self, message: str, hidden: set[str], shown: set[str], result: TurnResult
    ) -> list[dict[str, Any]]:
        """The recall on the raw message, as an assistant tool call and its result."""
        record = Recall(source="pre-recall", query=message)
        try:
            record.hits = recall(
                self.memory, message, self.recall_k, hidden_ids=hidden, min_confidence=self.min_confidence
            )
            shown.update(h.memory.id for h in record.hits)
            content = hits_content(record.hits, self.min_confidence)
        except EngramError as exc:  # recall failing must not cost the user their answer
            record.error = f"{exc.code}: {public_message(exc)}"
            content = json.dumps({"error": exc.code, "message": "memory could not be searched"})
        result.recalled.append(record)
        call_id = f"call_pre_{secrets.token_hex(6)}"
        arguments = json.dumps({"query": message, "k": self.recall_k}, ensure_ascii=False)
        call = {"id": call_id, "type": "function", "function": {"name": RECALL, "arguments": arguments}}
        return [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call_id, "content": content},
        ]

    def _run_model(
        self,
        messages: list[dict[str, Any]],
        episode_id: str,
        hidden: set[str],
        shown: set[str],
        result: TurnResult,
        deadline: float,
    ) -> str:
        """Call the model until it answers, each call ending by ``deadline`` (``LLMClient.chat``);
        returns its text ("" if none). After ``max_tool_rounds``
        rounds of tool calls the last call forbids tools (tool_choice "none"), and tool calls it makes
        anyway are not run. Of one round's calls the first ``max_tool_calls`` run; each other one is
        answered with a tool error (every call of the assistant message must have its result)."""
        for round_ in range(self.max_tool_rounds + 1):
            last = round_ == self.max_tool_rounds
            answer = self.llm.chat(
                messages,
                self._tools,
                tool_choice="none" if last else "auto",
                max_tokens=self.max_tokens,
                deadline=deadline,
            )
            calls = parse_tool_calls(answer)
            text = _text(answer.get("content"))
            if not calls:
                return text
            if last:
                result.round_limit_hit = True
                return text
            result.tool_rounds += 1
            messages.append(
                {
                    "role": "assistant",
                    "content": text or None,
                    "tool_calls": [c.as_message_part() for c in calls],
                }
            )
            for i, call in enumerate(calls):
                if i < self.max_tool_calls:
                    outcome = run_tool(
                        call,
                        self.memory,
                        episode_id=episode_id,
                        shown_ids=shown,
                        hidden_ids=hidden,
                        min_confidence=self.min_confidence,
                    )
                else:
                    outcome = error_outcome(
                        "too_many_calls",
                        f"too many tool calls in one round: only the first {self.max_tool_calls} were run",
                    )
                messages.append({"role": "tool", "tool_call_id": call.id, "content": outcome.content})
                result.tool_calls.append(
                    ToolCallRecord(name=call.name, arguments=call.arguments, error=outcome.error)
                )
                if outcome.hits is not None:
                    shown.update(h.memory.id for h in outcome.hits)
                    result.recalled.append(
                        Recall(source="tool", query=outcome.query or "", hits=outcome.hits)
                    )
                if outcome.written is not None:
                    shown.add(outcome.written.id)
                    result.written.append(outcome.written)
                replaced = outcome.superseded or (outcome.forgotten.id if outcome.forgotten else None)
                if replaced and outcome.old_text is not None:
                    result.texts[replaced] = outcome.old_text
                if outcome.superseded:
                    result.superseded.append(outcome.superseded)
                if outcome.forgotten is not None:
                    result.forgotten.append(outcome.forgotten)
        raise AssertionError("unreachable: the last round always returns")

    def close(self) -> None:
        """Wait for a running consolidation and close the LLM client this agent made."""
        if self.consolidation is not None:
            self.consolidation.wait()
        if self._owns_llm:
            self.llm.close()

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _text(content: Any) -> str:
    """An assistant message's text: a string, or the text parts of a content list."""
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        return "".join(p for p in parts if isinstance(p, str)).strip()
    return ""


def _clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, an ellipsis marking the cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
