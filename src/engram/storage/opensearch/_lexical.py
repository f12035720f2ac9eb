"""The OpenSearch text leg: BM25 over each owner's own rows (issue 26, item 17).

Lucene's BM25 takes its document frequencies, document count and average length from the whole
shard: every tenant's rows, deleted ones included until a merge. A hit's score (shown as
``explain.bm25_score``) then moved with other tenants' writes and told whether they use a word. So
Engram takes the statistics itself, per owner, in the request before the search (``stats_searches``:
the owner's row count and each word's document frequency, live rows only), turns them into each
word's inverse document frequency, and sends that as the boost of the word's clause, limited to that
owner's rows (``weighted_words``). The field's similarity (``similarity``) uses nothing but the boost,
the phrase's frequency in the row and the row's length, against a typical length for the average
(``engram.storage._lexical``). Cost: one ``_msearch`` more per recall (the dense leg rides in it), and
a similarity script run per matching row; per-tenant indices would have cost a shard per tenant.

A word of several tokens (``E-214``) is one ``match_phrase``; the script runs once per token of it, as
Lucene sums a phrase's terms' weights.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engram.storage._lexical import K1, TYPICAL_LENGTH, B, lucene_idf

SIMILARITY = "engram_bm25"  # the search_text field's similarity, defined in the memories index settings


def similarity() -> dict[str, Any]:
    """The scripted similarity: BM25's term-frequency part times the clause's boost (the word's inverse
    document frequency over its owner's rows); no statistic of the shard."""
    length_norm = f"{K1} * ({1.0 - B} + {B} * doc.length / {TYPICAL_LENGTH})"
    source = f"double tf = doc.freq; return query.boost * tf * {K1 + 1.0} / (tf + {length_norm});"
    return {"type": "scripted", "script": {"source": source}}


def stats_searches(owners: Sequence[str], words: Sequence[str]) -> list[dict[str, Any]]:
    """One search per owner: its rows (every type, superseded too, as SQLite's index holds them) and
    how many contain each word, as ``match_phrase`` finds it."""
    filters = {str(i): {"match_phrase": {"search_text": word}} for i, word in enumerate(words)}
    return [
        {
            "size": 0,
            "track_total_hits": True,
            "query": {"term": {"owner": owner}},
            "aggs": {"words": {"filters": {"filters": filters}}},
        }
        for owner in owners
    ]


def weighted_words(
    owners: Sequence[str], words: Sequence[str], answers: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The text query's clauses: each word an owner has, boosted by its inverse document frequency
    over that owner's rows and limited to them (``answers``: the stats searches' responses)."""
    clauses: list[dict[str, Any]] = []
    for owner, answer in zip(owners, answers, strict=True):
        rows = int(answer["hits"]["total"]["value"])
        buckets = answer["aggregations"]["words"]["buckets"]
        for i, word in enumerate(words):
            hits = int(buckets[str(i)]["doc_count"])
            if hits:
                phrase = {"query": word, "boost": lucene_idf(rows, hits)}
                clauses.append(
                    {
                        "bool": {
                            "filter": [{"term": {"owner": owner}}],
                            "must": [{"match_phrase": {"search_text": phrase}}],
                        }
                    }
                )
    return clauses


# The security plugin adds a tenant's DLS query to its searches as a must clause scored ConstantScore 1.0
# (explain: "sum of: 1.0 ConstantScore(owner:(sarah)), 0.85 within top k"): taken off both legs' scores.
# The conformance suite's exact-cosine assertion would catch a plugin that stopped adding it.
_DLS_SCORE = 1.0


def bm25_score(score: Any) -> float:
    return float(score) - _DLS_SCORE


def cosine_score(score: Any) -> float:
    """Lucene's cosinesimil score is (1 + cos) / 2; the other backends report the cosine."""
    return 2.0 * (float(score) - _DLS_SCORE) - 1.0
