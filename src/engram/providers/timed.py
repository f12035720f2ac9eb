"""The engine's models, each call timed into ``engram_model_inference_seconds`` (model role, call):
thin wrappers that change nothing of what the model returns."""

from __future__ import annotations

from collections.abc import Sequence

from engram.models import Vectors
from engram.observability import Telemetry
from engram.providers.base import Embedder, Reranker, TokenEncoder, query_content_positions


class TimedEmbedder:
    def __init__(self, inner: Embedder, telemetry: Telemetry) -> None:
        self.inner, self._telemetry = inner, telemetry

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        with self._telemetry.model("embedder", "documents"):
            return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> Vectors:
        with self._telemetry.model("embedder", "query"):
            return self.inner.embed_query(text)


class TimedReranker:
    def __init__(self, inner: Reranker, telemetry: Telemetry) -> None:
        self.inner, self._telemetry = inner, telemetry

    @property
    def name(self) -> str:
        return self.inner.name

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        with self._telemetry.model("reranker", "score"):
            return self.inner.score(query, passages)


class TimedTokenEncoder:
    def __init__(self, inner: TokenEncoder, telemetry: Telemetry) -> None:
        self.inner, self._telemetry = inner, telemetry

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dim(self) -> int:
        return self.inner.dim

    def encode_documents(self, texts: Sequence[str]) -> list[Vectors]:
        with self._telemetry.model("token_encoder", "documents"):
            return self.inner.encode_documents(texts)

    def encode_query(self, text: str) -> Vectors:
        with self._telemetry.model("token_encoder", "query"):
            return self.inner.encode_query(text)

    def content_positions(self, text: str, ignore: frozenset[str] = frozenset()) -> list[int]:
        """The inner encoder's; none where it has no such method (one written before it existed)."""
        return query_content_positions(self.inner, text, ignore)

    def prepare_batches(self) -> None:
        """The inner encoder's, where it has one (OnnxTokenEncoder.prepare_batches)."""
        prepare = getattr(self.inner, "prepare_batches", None)
        if prepare is not None:
            prepare()


def timed_embedder(model: Embedder, telemetry: Telemetry) -> TimedEmbedder:
    """``model`` timed into ``telemetry`` (unwrapped first: another engine's timed model is timed once)."""
    return TimedEmbedder(model.inner if isinstance(model, TimedEmbedder) else model, telemetry)


def timed_reranker(model: Reranker | None, telemetry: Telemetry) -> TimedReranker | None:
    if model is None:
        return None
    return TimedReranker(model.inner if isinstance(model, TimedReranker) else model, telemetry)


def timed_token_encoder(model: TokenEncoder | None, telemetry: Telemetry) -> TimedTokenEncoder | None:
    if model is None:
        return None
    return TimedTokenEncoder(model.inner if isinstance(model, TimedTokenEncoder) else model, telemetry)
