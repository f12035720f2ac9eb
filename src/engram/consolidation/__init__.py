"""Consolidation: an LLM turns episodes into facts and playbooks, with dedup guards and feedback."""

from engram.consolidation.consolidator import ConsolidationPolicy, ConsolidationReport, Consolidator
from engram.consolidation.llm import LLMClient, LLMError, LLMOutputError

__all__ = [
    "ConsolidationPolicy",
    "ConsolidationReport",
    "Consolidator",
    "LLMClient",
    "LLMError",
    "LLMOutputError",
]
