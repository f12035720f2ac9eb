"""The text leg's BM25 constants, shared by the backends that rank with BM25 (SQLite, OpenSearch).

Each owner's rows are their own corpus (issue 26, item 17): a row's score depends on its own text and
its owner's rows only, never on another tenant's, since a score is shown (``explain.bm25_score``) and
its statistics would tell whether other tenants use a word. The document frequency and the row count
are the owner's; the average length, which would need a running total per owner, is a fixed typical
length instead. PostgreSQL's ``ts_rank_cd`` uses no corpus statistics at all.
"""

from __future__ import annotations

import math

K1 = 1.2  # term-frequency saturation: FTS5's and Lucene's BM25 default
B = 0.75  # strength of the length normalisation: FTS5's and Lucene's BM25 default
# Tokens of a typical row's keyword text (a turn with the turn before it, or a fact); it stands for the
# corpus's average length, which would count other tenants' rows (the eval corpus: 9-11 a turn alone).
TYPICAL_LENGTH = 16.0


def saturated_tf(freq: float, length: float) -> float:
    """BM25's term-frequency part of one phrase in one row of ``length`` tokens."""
    return freq * (K1 + 1.0) / (freq + K1 * (1.0 - B + B * length / TYPICAL_LENGTH))


def fts5_idf(rows: float, hits: float) -> float:
    """FTS5's BM25 inverse document frequency (kept on SQLite), over the owner's rows; at least 1e-6."""
    return max(1e-6, math.log((rows - hits + 0.5) / (hits + 0.5)))


def lucene_idf(rows: float, hits: float) -> float:
    """Lucene's BM25 inverse document frequency (kept on OpenSearch), over the owner's rows: always > 0."""
    return math.log(1.0 + (rows - hits + 0.5) / (hits + 0.5))
