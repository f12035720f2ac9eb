"""Embeddings from any OpenAI-compatible ``/embeddings`` endpoint (OpenAI, vLLM, Ollama, ...).

An option, never the default: Engram works offline with its packaged models.
"""

from __future__ import annotations

from collections.abc import Sequence

import httpx
import numpy as np

from engram.errors import ModelError
from engram.providers._http import why
from engram.providers.base import Vectors


class OpenAIEmbedder:
    def __init__(
        self,
        base_url: str,
        *,
        model: str | None,
        api_key: str | None = None,
        timeout: float = 30.0,
        batch_size: int = 64,
    ) -> None:
        if not model:
            raise ModelError("embedder_url needs embedder_model (the model name to request)")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout)
        self._model = model
        self._batch_size = batch_size
        try:
            self._dim = len(self._request(["dimension probe"])[0])
        except BaseException:
            self._client.close()
            raise

    @property
    def name(self) -> str:
        return f"openai:{self._model}"

    @property
    def dim(self) -> int:
        return self._dim

    def _request(self, texts: Sequence[str]) -> list[list[float]]:
        try:
            response = self._client.post("/embeddings", json={"model": self._model, "input": list(texts)})
            response.raise_for_status()
            data = sorted(response.json()["data"], key=lambda d: d["index"])
            return [d["embedding"] for d in data]
        except (httpx.HTTPError, KeyError, TypeError, ValueError) as exc:
            where = self._client.base_url.copy_with(userinfo=b"")  # never a password in a log
            raise ModelError(f"embedding request to {where} failed: {why(exc)}") from exc

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        rows: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            rows.extend(self._request(texts[start : start + self._batch_size]))
        vectors = np.asarray(rows, dtype=np.float32).reshape(len(texts), self._dim)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        normalised: Vectors = vectors / np.maximum(norms, 1e-12)
        return normalised

    def embed_query(self, text: str) -> Vectors:
        vector: Vectors = self.embed_documents([text])[0]
        return vector

    def close(self) -> None:
        self._client.close()
