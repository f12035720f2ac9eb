"""The engine under the facade: one store, its models and recall settings, and the few operations the
tenant handles share (checking text, encoding and storing rows, importing).

``Engram`` (engram.memory.facade) is an Engine that also opens stores and hands out the handles; the
handles (engram.memory.handles) are given the Engine, so they never import the facade that makes them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from engram.errors import InvalidInput
from engram.import_records import UserDocument
from engram.importer import import_document
from engram.memory.reindex import reindex_tokens
from engram.models import Memory, Vectors, check_text, search_text_of
from engram.providers.base import Embedder, Reranker, TokenEncoder
from engram.retrieval.admission import Admission, RecallGate
from engram.retrieval.config import RetrievalConfig
from engram.retrieval.late_interaction import pack_all
from engram.settings import EngramSettings
from engram.storage.base import Store, Supersession, Tenant, TenantIndexing
from engram.use_counts import UseRecorder
from engram.validation import check_metadata_size

_ENCODE_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="engram-encode")


def close_all(resources: Sequence[object]) -> None:
    """Close what has a close() (HTTP clients, thread pools); local ONNX sessions need none."""
    for resource in resources:
        close = getattr(resource, "close", None)
        if callable(close):
            close()


class Engine:
    """One store, one embedder, one reranker, and what every tenant handle uses of them."""

    def __init__(
        self,
        store: Store,
        embedder: Embedder,
        reranker: Reranker | None,
        *,
        token_encoder: TokenEncoder | None = None,
        config: RetrievalConfig | None = None,
        settings: EngramSettings | None = None,
    ) -> None:
        self.settings = settings or EngramSettings.defaults()  # no environment: only Engram.open reads it
        self.store = store
        self.embedder = embedder
        self.reranker = reranker
        self.token_encoder = token_encoder  # late interaction; None: recall skips that stage
        self.config = config or RetrievalConfig.from_settings(self.settings)
        self.use_counts = UseRecorder(store, self.settings.use_wait_ms / 1000)
        # Under load (a server: settings.recall_gate): a few recalls computed at once, fair per tenant;
        # past a short queue they skip the cross-encoder, so writes keep the other cores. Embedded in
        # someone else's program, Engram neither queues nor sheds unless told to.
        gated = self.settings.recall_gate
        self.recall_gate = RecallGate(
            self.settings.recall_concurrency if gated else 0,
            self.settings.rerank_queue,
            max_queued=self.settings.request_threads // 2,  # a waiting recall holds a request thread
        )
        # The bound when the gate has no slots (recall_concurrency 0): recalls in the cross-encoder at once.
        self.rerank_admission = Admission(self.settings.rerank_queue if gated else 0)
        self._made: list[object] = []  # providers Engram.from_settings made: close() closes them too
        store.ensure_model(embedder.name, embedder.dim)
        if token_encoder is not None:
            store.ensure_model(token_encoder.name, token_encoder.dim, kind="token")

    def import_json(
        self,
        document: Mapping[str, Any] | Sequence[Any] | UserDocument,
        *,
        user_id: str | None = None,
        progress: bool = False,
    ) -> dict[str, Any]:
        """Import a user document or a catalog list (see ``engram.importer``); an invalid one writes
        nothing."""
        return import_document(self, document, user_id=user_id, progress=progress)

    def encode_rows(self, rows: Sequence[Memory]) -> tuple[Vectors, list[bytes] | None]:
        """Rows' embeddings and packed late-interaction token vectors (None without a token encoder)."""
        texts = [search_text_of(r) for r in rows]
        if self.token_encoder is None:
            return self.embedder.embed_documents(texts), None
        # Both models release the GIL: the token vectors are computed while the embedding is.
        tokens = _ENCODE_POOL.submit(self.token_encoder.encode_documents, texts)
        vectors = self.embedder.embed_documents(texts)
        return vectors, pack_all(tokens.result(), self.token_encoder.name)

    def reindex(self, batch: int = 256, progress: bool = False) -> int:
        """Give every row, of every user and the catalog, token vectors in the format new writes use:
        rows written before late interaction (or with it off) and rows in an older format; returns how
        many rows got new ones. Safe to run while serving, and to stop and run again
        (engram.memory.reindex)."""
        if self.token_encoder is None:
            raise InvalidInput("late interaction is off (ENGRAM_LATE_INTERACTION=false): nothing to index")
        return reindex_tokens(self.store, self.token_encoder, batch, progress)

    def index_heavy_tenants(self) -> list[str] | None:
        """Give users past ``ann_min_rows`` rows their own vector index where the store builds one only
        on request (PostgreSQL, with its admin URL); the users indexed now. None: this store needs no
        request (SQLite builds its own in the background)."""
        if not isinstance(self.store, TenantIndexing):
            return None
        return self.store.index_heavy_tenants(self.settings.ann_min_rows)

    def close(self) -> None:
        self.use_counts.close()
        close_all(self._made)
        self.store.close()

    # -- shared by the handles ------------------------------------------------------------------
    def _check_text(self, text: object, what: str = "text") -> str:
        return check_text(text, what, self.settings.max_text_chars)

    def _store_row(self, tenant: Tenant, row: Memory, supersede: Supersession | None = None) -> None:
        check_metadata_size(row.metadata, self.settings.max_metadata_chars)
        vectors, tokens = self.encode_rows([row])
        self.store.insert(tenant, [row], vectors, {row.id: supersede} if supersede else None, tokens)
