"""A support agent with long-term memory: ``Agent`` (see engram.agent.agent) and the tools it gives
the model (engram.agent.tools)."""

from engram.agent.agent import Agent, EmbeddedConsolidation, Recall, ToolCallRecord, TurnResult
from engram.agent.handle import MemoryHandle
from engram.agent.prompt import PROFILE_RULE, RULES

__all__ = [
    "PROFILE_RULE",
    "RULES",
    "Agent",
    "EmbeddedConsolidation",
    "MemoryHandle",
    "Recall",
    "ToolCallRecord",
    "TurnResult",
]
