"""Confidence: a hit's probability of being relevant, from the raw score of the strongest stage that
scored it, by logistic calibration fitted on development data (``bench/calibrate.py``).

The stages' own scores do not mean the same across queries: RRF and min-max-scaled late-interaction
scores are ranks in disguise (the best hit of a query about nothing stored still scores 1.0), and the
cross-encoder's probability is sharp but fitted to web search, not to memories. Each stage that has an
absolute score gets its own calibration into one scale, probabilities fitted on the same hits, so a
confidence keeps its meaning when the cross-encoder is skipped (under load), though each calibration
ranks hits only as well as its stage (docs/benchmarks.md):

* reranked: ``σ(a · logit(p) + b · coverage + c)`` with ``p`` the cross-encoder's probability;
* late interaction only: ``σ(a · late + b · coverage + c)`` with ``late`` the raw MaxSim (mean cosine,
  before min-max scaling); a leader that no other candidate came near (``contenders``), when the
  cross-encoder that should have judged it alone was shed or failed, has its own coefficients:
  standing alone is evidence, and the general ones put such leaders at 0.21 where half of them were
  relevant (development hits, docs/benchmarks.md), and so have the hits below what the cross-encoder
  judged (its contested places, or such a leader) that it left unscored: the general ones, fitted on
  every hit, put them at twice their share relevant;
* neither (late interaction off or failed): ``σ(a · dense + c)`` with the dense leg's cosine; a row
  that only BM25 found gets 0, as nothing absolute says it is relevant.

``coverage`` is the hit's match for the query's least-matched content word (``query_coverage``): a
hit can match most of "when is my sister's birthday?" and nothing of "birthday"; without it, a question
about something never said got about the confidence of an answerable one (docs/benchmarks.md).

A score that is not a finite number (a broken provider) counts as missing: the next stage answers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypeGuard

_EPS = 1e-6  # keeps logit(p) finite for a probability of exactly 0 or 1


@dataclass(frozen=True)
class Calibration:
    """Logistic coefficients per stage: ``σ(a · score + b · coverage + c)`` as (a, b, c) for the stages
    that see the query's coverage (``late_interaction.query_coverage``), ``σ(a · score + c)`` for dense."""

    rerank: tuple[float, float, float]
    late: tuple[float, float, float]
    dense: tuple[float, float]
    leader: tuple[float, float, float]  # late interaction's, for an uncontested leader
    coverage_mean: float  # stands in for a missing coverage (late interaction off or failed)
    below: tuple[float, float, float] | None = None  # ... for a hit below what was judged (None: late)


def sigmoid(z: float) -> float:
    """``1 / (1 + e^-z)``, safe for large ``|z|``. Example: 0 -> 0.5."""
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def logit(p: float) -> float:
    """``ln(p / (1 - p))`` with ``p`` clipped to [1e-6, 1 - 1e-6]. Example: 0.5 -> 0.0."""
    p = min(max(p, _EPS), 1.0 - _EPS)
    return math.log(p / (1.0 - p))


def confidence(
    calibration: Calibration,
    rerank: float | None,
    late: float | None,
    dense: float | None,
    uncontested: bool = False,
    coverage: float | None = None,
    below: bool = False,
) -> float:
    """The calibrated probability that a hit is relevant (module docstring), in [0, 1];
    ``uncontested``: the hit leads, nothing came near it, and the cross-encoder did not score it;
    ``below``: it ranks below what the cross-encoder judged (scored, or left alone as such a leader)
    and was not scored itself; ``coverage``: how well it covers the query's least-matched content word
    (the calibration's mean when missing).

    Example with rerank (1.0, 2.0, -1.0): p = 0.5, coverage 0.5 -> σ(0 + 1 - 1) = 0.5; with late
    (10.0, 0.0, -7.0) and no rerank: MaxSim 0.7 -> σ(0) = 0.5.
    """
    covered = coverage if _finite(coverage) else calibration.coverage_mean
    if _finite(rerank):
        a, b, c = calibration.rerank
        return sigmoid(a * logit(rerank) + b * covered + c)
    if _finite(late):
        a, b, c = (
            calibration.leader
            if uncontested
            else calibration.below
            if below and calibration.below is not None
            else calibration.late
        )
        return sigmoid(a * late + b * covered + c)
    if _finite(dense):
        a, c = calibration.dense
        return sigmoid(a * dense + c)
    return 0.0


def _finite(score: float | None) -> TypeGuard[float]:
    return score is not None and math.isfinite(score)
