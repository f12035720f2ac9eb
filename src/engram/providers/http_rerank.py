"""A cross-encoder behind a ``/rerank`` endpoint: the request and response that Cohere, Jina, vLLM
(``vllm serve BAAI/bge-reranker-v2-m3``), Infinity and most hosted rerankers share.

An option, never the default: Engram works offline with its packaged cross-encoder. A larger reranker
served on a GPU reads paraphrases the packaged one misses ("I got it, senior accountant from monday"
for "what's my title at work?"); what it costs is one HTTP round trip per recall that reranks.

Request: ``POST {base_url}/rerank`` with ``{"model", "query", "documents", "top_n"}``; response:
``{"results": [{"index": i, "relevance_score": s}, ...]}`` in any order (Cohere sorts by score).
Scores are read as probabilities: recall multiplies them by its other factors and calibrates them
into a confidence (``bench/calibrate.py`` refits that calibration for another model: its coefficients
go in ``ENGRAM_CONFIDENCE_RERANK``). A response with a score outside [0, 1] is read as logits (TEI's
and Jina's raw scores), all of it through the sigmoid: clipping would tie every negative logit at 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import httpx

from engram.errors import ModelError
from engram.providers._http import why


class HttpReranker:
    """Scores (query, passage) pairs with a remote reranker (module docstring); one request a call."""

    def __init__(
        self, base_url: str, *, model: str | None, api_key: str | None = None, timeout: float = 10.0
    ) -> None:
        if not model:
            raise ModelError("reranker_url needs reranker_model (the model name to request)")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # a recall waits on this: past the timeout it answers without the reranker (retrieval.rerank)
        self._client = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout)
        self._where = str(self._client.base_url.copy_with(userinfo=b""))  # never a password in a log
        self._model = model

    @property
    def name(self) -> str:
        return f"http:{self._model}"

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        if not passages:
            return []
        body = {"model": self._model, "query": query, "documents": list(passages), "top_n": len(passages)}
        try:
            response = self._client.post("/rerank", json=body)
            response.raise_for_status()
            results = response.json()["results"]
            by_index = {int(r["index"]): float(r["relevance_score"]) for r in results}
        except (httpx.HTTPError, KeyError, TypeError, ValueError) as exc:
            raise ModelError(f"rerank request to {self._where} failed: {why(exc)}") from exc
        if len(results) != len(passages) or sorted(by_index) != list(range(len(passages))):
            raise ModelError(
                f"rerank response from {self._where} scored passages {sorted(by_index)[:20]}, "
                f"not each of the {len(passages)} sent once"
            )
        if not all(math.isfinite(s) for s in by_index.values()):
            raise ModelError(f"rerank response from {self._where} holds a score that is not a number")
        scores = [by_index[i] for i in range(len(passages))]
        if all(0.0 <= s <= 1.0 for s in scores):
            return scores
        return [1.0 / (1.0 + math.exp(-max(-500.0, min(500.0, s)))) for s in scores]

    def close(self) -> None:
        self._client.close()
