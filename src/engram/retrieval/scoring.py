"""Ranking multipliers: pure functions of a row's age, use count, source, feedback and what the query
names.

The final score of a hit is
``relevance × decay × use_count_boost × source_prior × success_prior × time_match × speaker_match``,
where relevance is the cross-encoder's probability ``sigmoid(logit)`` in (0, 1) when the hit was
reranked, else its RRF score. Multiplying a probability keeps the factors meaningful: a 0.5 decay
halves a hit's relevance, it cannot flip the sign of a raw logit. After these, ``stage_scale`` keeps
scores falling across stages (keep_scores_ordered), and ``update_lift`` / ``outdated`` put a
newer memory above the one it replaces (currency.put_current_first).
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING

from engram.models import EpisodicMemory, Memory, named_speaker
from engram.retrieval.config import RetrievalConfig
from engram.retrieval.temporal import TimeWindow, in_window
from engram.text import name_words, transcript_speaker

if TYPE_CHECKING:  # candidate.py imports this module
    from engram.retrieval.candidate import Candidate

SECONDS_PER_DAY = 86_400.0


def time_decay(age_days: float, offset: float = 180.0, scale: float = 1825.0, decay: float = 0.5) -> float:
    """Gaussian decay with a flat zone.

    ``m = 1`` for ``age <= offset``; else ``m = exp(-(age - offset)^2 / (2 σ^2))`` with
    ``σ^2 = -scale^2 / (2 ln decay)``, so ``m = decay`` exactly at ``age = offset + scale``
    (Elasticsearch's gauss decay function). Defaults: offset 180 d, scale 1825 d, decay 0.5.

    Examples: age 0 d -> 1.0; age 180 d -> 1.0; age 2005 d -> 0.5; age 1092.5 d -> 0.8409.
    Negative ages (timestamps in the future) count as 0.
    """
    if not 0 < decay < 1 or scale <= 0 or offset < 0:
        raise ValueError("need 0 < decay < 1, scale > 0, offset >= 0")
    excess = max(0.0, age_days - offset)
    sigma_sq = -(scale**2) / (2.0 * math.log(decay))
    return math.exp(-(excess**2) / (2.0 * sigma_sq))


def recency(age_days: float, half_life_days: float) -> float:
    """``0.5 ** (age / half_life)``: halves per half-life of age; 1.0 for no age, a future time or a
    half-life of 0 (off). Examples with 2000 d: age 0 -> 1.0; 365 d -> 0.881; 2000 d -> 0.5."""
    if half_life_days <= 0:
        return 1.0
    return float(0.5 ** (max(0.0, age_days) / half_life_days))


def use_count_boost(use_count: int, weight: float = 0.2) -> float:
    """``1 + weight × log10(1 + use_count)``: 0 uses -> 1.0, 9 uses -> 1.2, 99 uses -> 1.4 (weight 0.2)."""
    return 1.0 + weight * math.log10(1 + max(0, use_count))


def success_prior(successes: int, failures: int) -> float:
    """Playbook feedback: ``0.5 + (s + 1) / (s + f + 2)``, the Laplace-smoothed success rate shifted so
    that a playbook with no feedback is neutral (1.0). Range (0.5, 1.5): 1 success -> 1.167,
    1 failure -> 0.833, 9 successes -> 1.409, 9 failures -> 0.591. Bounded so feedback re-orders close
    calls but never buries a playbook that clearly matches the query.
    """
    s, f = max(0, successes), max(0, failures)
    return 0.5 + (s + 1) / (s + f + 2)


def ranking_time(memory: Memory) -> datetime | None:
    """The time a row's decay is measured from: event time for episodes, last use (else creation)
    for facts; None for procedural and catalog rows, which do not decay."""
    if memory.memory_type == "episodic":
        return memory.timestamp
    if memory.memory_type == "semantic":
        return memory.last_used_at or memory.created_at
    return None


def time_match(at: datetime | None, window: TimeWindow | None, boost: float = 1.5) -> float:
    """``boost`` when the query names a period and the event time falls in it, else 1.0.

    Examples: "what did I buy in May 2023?" and a turn said on 2023-05-14 -> 1.5; the same turn for a
    query without time words, or a fact (no event time) -> 1.0.
    """
    return boost if at is not None and window is not None and in_window(at, window) else 1.0


def speaker_of(turn: EpisodicMemory) -> str | None:
    """Who said a turn, casefolded so that "Sam" and "sam" are one person: the caller's
    ``metadata["speaker"]``, else the name its text opens with as a transcript line does
    (``"Caroline: I went ..."``), else None."""
    speaker = named_speaker(turn) or transcript_speaker(turn.text)
    return unicodedata.normalize("NFC", speaker).casefold() if speaker else None


def named_speakers(turns: Iterable[EpisodicMemory], words: frozenset[str]) -> frozenset[str]:
    """The speakers of ``turns`` that a query of ``words`` (``text.query_words``) names: any word of
    the name (``text.name_words``) among the query's words, case-insensitive. None unless the turns
    have at least two speakers: in a one-person store naming the user says nothing about who said
    what, and a lone ``"Label: "`` line is more likely a heading than a person.

    Example: turns by Caroline and Melanie, "What might Caroline's degree be?" -> {"caroline"}
    (speakers as ``speaker_of`` gives them).
    """
    speakers = {speaker for turn in turns if (speaker := speaker_of(turn))}
    if len(speakers) < 2:
        return frozenset()
    return frozenset(speaker for speaker in speakers if name_words(speaker) & words)


def speaker_match(speaker: str | None, named: frozenset[str], boost: float = 1.1) -> float:
    """``boost`` when the turn's speaker is one the query names (``named_speakers``), else 1.0.

    A question about a person is answered by what that person said far more often than by what others
    said to them (LoCoMo dev: 95% of gold turns are said by someone the question names), and the
    turns that name the person most are the other speaker's replies ("Wow, Caroline, ...").
    Examples: "caroline" with {"caroline"} named -> 1.1; "melanie" -> 1.0; no speaker -> 1.0.
    """
    return boost if speaker is not None and speaker in named else 1.0


def multipliers(
    memory: Memory,
    now: datetime,
    config: RetrievalConfig,
    window: TimeWindow | None = None,
    speakers: frozenset[str] = frozenset(),
) -> dict[str, float]:
    """The named multipliers for one row (all 1.0 when ``config.multipliers`` is off).

    ``window`` is the period the query names (``temporal.time_window``), if any; ``speakers`` the
    speakers it names (``named_speakers``).
    """
    result = {
        "decay": 1.0,
        "use_count_boost": 1.0,
        "source_prior": 1.0,
        "success_prior": 1.0,
        "time_match": 1.0,
        "speaker_match": 1.0,
    }
    if not config.multipliers:
        return result
    if isinstance(memory, EpisodicMemory):
        result["time_match"] = time_match(memory.timestamp, window, config.time_match_boost)
        if speakers:
            result["speaker_match"] = speaker_match(speaker_of(memory), speakers, config.speaker_match_boost)
    if memory.memory_type == "procedural" and config.procedural_feedback:
        result["success_prior"] = success_prior(memory.success_count, memory.failure_count)
    at = ranking_time(memory)
    if at is not None:
        age_days = (now - at).total_seconds() / SECONDS_PER_DAY
        result["decay"] = time_decay(
            age_days, config.decay_offset_days, config.decay_scale_days, config.decay_value
        )
    if memory.memory_type == "semantic":
        result["use_count_boost"] = use_count_boost(memory.use_count, config.use_count_weight)
    if memory.memory_type == "catalog":
        result["source_prior"] = config.catalog_prior
    return result


def product(factors: dict[str, float]) -> float:
    return math.prod(factors.values())


def keep_scores_ordered(tiers: list[list[Candidate]]) -> None:
    """Make scores fall with rank across stages: each tier (the reranked window, the rest of the
    late-interaction head, the RRF tail) is scaled so its best score is just below the worst of the tier
    above, ``stage_scale = min(above) / max(tier)`` less an ulp (only when needed; ratios within a tier
    stay), so a client sorting by score meets no tie across tiers.

    Each stage's relevance has its own scale (a cross-encoder probability can be 1e-5 where a
    min-max-scaled late score is 0.9), and rank follows the stages, so without this a client sorting
    or thresholding by score would disagree with the rank. Example: tiers with finals [0.6, 0.4] and
    [0.9, 0.3] -> the second tier gets stage_scale 0.4 / 0.9: [0.4, 0.133].
    """
    floor: float | None = None
    for tier in tiers:
        top = max(c.final for c in tier)
        if floor is not None and top >= floor and top > 0:
            scale = floor / top
            for c in tier:
                c.multipliers["stage_scale"] = scale
            while max(c.final for c in tier) >= floor and scale > 0:  # strictly below, past rounding
                scale = math.nextafter(scale, 0.0)
                for c in tier:
                    c.multipliers["stage_scale"] = scale
        floor = min(c.final for c in tier)
