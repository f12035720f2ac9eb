"""The cross-encoder stage: the window's contested candidates (``contenders``) scored jointly with the
query, each read in the user's own voice (``own_voice``)."""

from __future__ import annotations

from engram.errors import public_failure
from engram.models import CatalogItem, EpisodicMemory, Memory, search_text_of
from engram.providers.base import Reranker
from engram.retrieval.candidate import Candidate
from engram.retrieval.own_voice import names_user_uncapitalised, own_voice
from engram.retrieval.scoring import speaker_of


def apply_rerank(
    reranker: Reranker, query: str, window: list[Candidate], weight: float = 1.0, user_id: str = ""
) -> str | None:
    """Set each window candidate's rerank probability; return an error text instead of raising. The
    query and the user's facts are read in the user's own voice (``rerank_text``), unless the query
    writes the user's name in lower case or another speaker's turn is in the window."""
    if names_user_uncapitalised(query, user_id) or any(
        isinstance(c.memory, EpisodicMemory) and speaker_of(c.memory) for c in window
    ):
        user_id = ""  # read as written: own_voice would rewrite the facts, not "sarah", nor a group chat
    try:
        passages = [rerank_text(c.memory, user_id) for c in window]
        scores = reranker.score(own_voice(query, user_id), passages)
        if len(scores) != len(window):
            raise ValueError(f"reranker returned {len(scores)} scores for {len(window)} passages")
    except Exception as exc:  # recall must never fail because of the reranker
        return public_failure(exc, "the reranker")  # logged there; no driver text in explain
    for candidate, score in zip(window, scores, strict=True):
        candidate.rerank, candidate.rerank_weight = float(score), weight
    return None


def rerank_text(memory: Memory, user_id: str) -> str:
    """What the cross-encoder reads for a row: ``search_text_of``, a fact or playbook in the user's own
    voice (``own_voice``: "Aisha's niece Zara is 8" -> "my niece Zara is 8"), as their turns are; a turn
    another speaker said and a catalog item as they are."""
    text = search_text_of(memory)
    if isinstance(memory, EpisodicMemory | CatalogItem):
        return text
    return own_voice(text, user_id, fact=True)
