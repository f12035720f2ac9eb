"""The public facade: ``Engram`` opens a store; ``for_user`` and ``catalog`` give tenant-scoped handles.

Every operation goes through a handle bound to one tenant, and the handle passes that tenant to every
Store call: there is no code path that reads or writes without a tenant.
"""

from __future__ import annotations

import os
from typing import Any

from engram.consolidation import ConsolidationPolicy, ConsolidationReport, Consolidator, LLMClient
from engram.memory.engine import Engine, close_all
from engram.memory.handles import CatalogAdmin
from engram.memory.reader import MemoryReader
from engram.memory.stores import open_store
from engram.memory.user import UserMemory
from engram.providers import default_embedder, default_reranker, default_token_encoder
from engram.settings import EngramSettings, load_settings
from engram.validation import validate_user_id


class Engram(Engine):
    """One store, one embedder, one reranker; hands out tenant-scoped handles."""

    @classmethod
    def open(cls, url: str | os.PathLike[str] | None = None, **settings: Any) -> Engram:
        """Open the embedded store (default ``$ENGRAM_HOME/engram.db``) or the store at ``url`` (a
        store URL, or a SQLite file's path as a string or ``Path``), with the packaged local models.
        Keyword arguments override settings (e.g. ``rerank_window=40``)."""
        resolved = load_settings(**settings)
        return cls.from_settings(resolved, url=url)

    @classmethod
    def from_settings(cls, settings: EngramSettings, url: str | os.PathLike[str] | None = None) -> Engram:
        store = open_store(
            os.fspath(url) if url is not None else settings.store_url(),
            settings.pg_admin_url,
            settings.ann_min_rows,
            settings,
        )
        made: list[object] = []
        try:
            embedder = default_embedder(settings)
            made.append(embedder)
            reranker = default_reranker(settings) if settings.rerank else None
            made.append(reranker)
            token_encoder = default_token_encoder(settings) if settings.late_interaction else None
            made.append(token_encoder)
            engram = cls(store, embedder, reranker, token_encoder=token_encoder, settings=settings)
        except BaseException:
            close_all(made)
            store.close()
            raise
        engram._made = made
        return engram

    def for_user(self, user_id: str) -> UserMemory:
        return UserMemory(self, validate_user_id(user_id))

    def reader(self, user_id: str) -> MemoryReader:
        """A read-only view of one user's memory, for inspection (the inspector's admin path)."""
        return MemoryReader(self, validate_user_id(user_id))

    @property
    def catalog(self) -> CatalogAdmin:
        """The admin handle for the shared catalog (readable by all, writable only here)."""
        return CatalogAdmin(self)

    def consolidate(self, user_id: str, llm: LLMClient | None = None) -> ConsolidationReport:
        """Turn the user's episodes since the last run into facts and playbooks; returns a
        ConsolidationReport (status "disabled: no LLM configured" when there is no LLM)."""
        user = validate_user_id(user_id)
        s = self.settings
        made_here = llm is None
        if llm is None:
            llm = LLMClient.from_settings(s)
            if llm is None:
                self.telemetry.metrics.consolidated("disabled")
                return ConsolidationReport(user_id=user, status="disabled: no LLM configured")
        policy = ConsolidationPolicy(
            batch_size=s.consolidation_batch,
            duplicate_similarity=s.dedup_similarity,
            judge_similarity=s.dedup_judge_similarity,
            confidence_floor=s.confidence_floor,
            supersede_penalty=s.supersede_penalty,
            max_text_chars=s.max_text_chars,
        )
        consolidator = Consolidator(
            self.store,
            self.embedder,
            llm,
            policy,
            token_encoder=self.token_encoder,
            encode_rows=self.encode_rows,
        )
        metrics = self.telemetry.metrics
        try:
            report = consolidator.run(user)
        except BaseException:
            metrics.consolidated("error")
            raise
        finally:
            if made_here:
                llm.close()
        metrics.consolidated(report.status)
        return report

    def __enter__(self) -> Engram:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
