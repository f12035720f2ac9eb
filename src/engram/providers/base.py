"""Provider protocols: what the engine needs from an embedding model and a reranker."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from engram.models import Vectors

__all__ = ["Embedder", "Reranker", "TokenEncoder", "Vectors"]


@runtime_checkable
class Embedder(Protocol):
    """Turns text into L2-normalised float32 vectors of a fixed dimension."""

    @property
    def name(self) -> str:
        """A stable identifier of the model; stores record it and refuse a different one."""
        ...

    @property
    def dim(self) -> int: ...

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        """Embed passages to be stored; shape (len(texts), dim)."""
        ...

    def embed_query(self, text: str) -> Vectors:
        """Embed a search query; shape (dim,)."""
        ...


@runtime_checkable
class Reranker(Protocol):
    """Scores (query, passage) pairs jointly; higher is more relevant."""

    @property
    def name(self) -> str: ...

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        """Return one relevance probability in [0, 1] per passage, in input order."""
        ...


@runtime_checkable
class TokenEncoder(Protocol):
    """A late-interaction (ColBERT-style) encoder: one L2-normalised vector per token.

    Documents are encoded once, at write time, and stored; a query is encoded at recall time and
    scored against a candidate's token vectors by MaxSim (``engram.retrieval.late_interaction``).
    """

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def encode_documents(self, texts: Sequence[str]) -> list[Vectors]:
        """One (tokens, dim) float32 matrix per text."""
        ...

    def encode_query(self, text: str) -> Vectors:
        """A (tokens, dim) float32 matrix."""
        ...

    def content_positions(self, text: str, ignore: frozenset[str] = frozenset()) -> list[int]:
        """The rows of ``encode_query(text)`` that belong to the query's content words
        (``engram.text.is_content_word``; ``ignore``: casefolded words to leave out). Optional at run
        time: recall scores an encoder without it, and its hits' confidence takes the mean coverage."""
        ...


def query_content_positions(encoder: TokenEncoder, text: str, ignore: frozenset[str]) -> list[int]:
    """``encoder.content_positions``, or none for an encoder written before it existed (then confidence
    takes the calibration's mean coverage): a missing method must not cost late interaction."""
    find = getattr(encoder, "content_positions", None)
    return list(find(text, ignore)) if find is not None else []
