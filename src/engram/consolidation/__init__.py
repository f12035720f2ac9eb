"""Consolidation: an LLM turns episodes into facts and playbooks, with dedup guards and feedback."""

from engram.consolidation.consolidator import Consolidator
from engram.consolidation.llm import LLMClient, LLMError, LLMOutputError
from engram.consolidation.policy import ConsolidationPolicy, ConsolidationReport

__all__ = [
    "ConsolidationPolicy",
    "ConsolidationReport",
    "Consolidator",
    "LLMClient",
    "LLMError",
    "LLMOutputError",
]
