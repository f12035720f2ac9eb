"""Embedding and reranking providers. Defaults are the packaged local ONNX models."""

from __future__ import annotations

from engram.errors import ConfigError
from engram.providers.base import Embedder, Reranker, TokenEncoder
from engram.settings import EngramSettings

__all__ = [
    "Embedder",
    "Reranker",
    "TokenEncoder",
    "default_embedder",
    "default_reranker",
    "default_token_encoder",
]


def default_embedder(settings: EngramSettings) -> Embedder:
    from engram.providers.onnx import OnnxEmbedder

    if settings.embedder_url:
        from engram.providers.openai_compat import OpenAIEmbedder

        return OpenAIEmbedder(
            settings.embedder_url, model=settings.embedder_model, api_key=settings.embedder_api_key
        )
    if settings.embedder_onnx_dir:
        directory = settings.embedder_onnx_dir
        return OnnxEmbedder(
            directory,
            name=f"onnx:{directory.name}",
            threads=settings.model_threads,
            batch_size=settings.embed_batch,
        )
    return OnnxEmbedder.packaged(threads=settings.model_threads, batch_size=settings.embed_batch)


def default_reranker(settings: EngramSettings) -> Reranker:
    from engram.providers.onnx_rerank import OnnxCrossEncoder

    if settings.reranker_url:
        from engram.providers.http_rerank import HttpReranker

        if settings.reranker_onnx_dir:  # which one would be a guess
            raise ConfigError("set ENGRAM_RERANKER_URL or ENGRAM_RERANKER_ONNX_DIR, not both")

        return HttpReranker(
            settings.reranker_url, model=settings.reranker_model, api_key=settings.reranker_api_key
        )
    if settings.reranker_onnx_dir:
        directory = settings.reranker_onnx_dir
        return OnnxCrossEncoder(
            directory,
            name=f"onnx:{directory.name}",
            workers=settings.model_threads,
            nice=settings.recall_nice,
        )
    return OnnxCrossEncoder.packaged(workers=settings.model_threads, nice=settings.recall_nice)


def default_token_encoder(settings: EngramSettings) -> TokenEncoder:
    from engram.providers.onnx import OnnxTokenEncoder

    return OnnxTokenEncoder.packaged(threads=settings.model_threads, batch_size=settings.token_batch)
