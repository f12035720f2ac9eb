"""The engine under the facade: one store, its models and recall settings, and the few operations the
tenant handles share (checking text, encoding and storing rows, importing).

``Engram`` (engram.memory.facade) is an Engine that also opens stores and hands out the handles; the
handles (engram.memory.handles) are given the Engine, so they never import the facade that makes them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from engram.errors import InvalidInput
from engram.import_records import UserDocument
from engram.importer import import_document
from engram.memory.reindex import reindex_tokens
from engram.models import EpisodicMemory, Memory, ProceduralMemory, Vectors, check_text, search_text_of
from engram.observability import Telemetry, Tracing
from engram.providers.base import Embedder, Reranker, TokenEncoder
from engram.providers.timed import timed_embedder, timed_reranker, timed_token_encoder
from engram.retrieval.admission import Admission, RecallGate
from engram.retrieval.config import RetrievalConfig
from engram.retrieval.late_interaction import pack_all
from engram.settings import EngramSettings
from engram.storage.base import Store, Supersession, Tenant, TenantIndexing
from engram.use_counts import UseRecorder
from engram.validation import check_metadata_size

_ENCODE_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="engram-encode")
SESSION_TAILS = 10_000  # sessions whose latest turn this process remembers (~1 KB each), least recent out


class SessionTails:
    """The latest turn this process wrote to each recent session, so that appending a turn need not
    search for it (what a new turn is indexed with). Another process's turn to the same session is
    missed (the turn before it is used: a ranking detail, not a correctness one); a turn forgotten
    anywhere is never quoted, since every store checks the quoted turn in the write itself."""

    def __init__(self, size: int = SESSION_TAILS) -> None:
        self._size = size
        self._turns: OrderedDict[tuple[str, str], EpisodicMemory] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, user_id: str, session_id: str) -> EpisodicMemory | None:
        with self._lock:
            turn = self._turns.get((user_id, session_id))
            if turn is not None:
                self._turns.move_to_end((user_id, session_id))
            return turn

    def put(self, turn: EpisodicMemory) -> None:
        if turn.session_id is None or turn.user_id is None:
            return
        with self._lock:
            self._turns[(turn.user_id, turn.session_id)] = turn
            self._turns.move_to_end((turn.user_id, turn.session_id))
            while len(self._turns) > self._size:
                self._turns.popitem(last=False)

    def drop(self, user_id: str, memory_id: str) -> None:
        """Forget a forgotten turn here too (the search then finds the one before it)."""
        with self._lock:
            for key in [k for k, t in self._turns.items() if k[0] == user_id and t.id == memory_id]:
                del self._turns[key]

    def drop_user(self, user_id: str) -> None:
        """Forget every turn of an erased user: a new key for the same id must not be answered with
        the erased text as its first turn's context."""
        with self._lock:
            for key in [k for k in self._turns if k[0] == user_id]:
                del self._turns[key]


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
        # Recall's stage timings, model inference, consolidation runs (engram.observability); spans too
        # when settings.otel is on. Each model call is timed by a thin wrapper around the model.
        self.telemetry = Telemetry(Tracing.start() if self.settings.otel else None)
        self.embedder: Embedder = timed_embedder(embedder, self.telemetry)
        self.reranker: Reranker | None = timed_reranker(reranker, self.telemetry)
        # late interaction; None: recall skips that stage
        self.token_encoder: TokenEncoder | None = timed_token_encoder(token_encoder, self.telemetry)
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
        self.telemetry.metrics.watch_queue(self.recall_gate.queue_depth)
        # The bound when the gate has no slots (recall_concurrency 0): recalls in the cross-encoder at once.
        self.rerank_admission = Admission(self.settings.rerank_queue if gated else 0)
        self.session_tails = SessionTails()
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
        return vectors, pack_all(tokens.result(), self._lean_model)

    @property
    def _lean_model(self) -> str | None:
        """The token model whose vectors are stored lean (``settings.lean_token_vectors``), else None:
        the int8 format (late_interaction.pack_all)."""
        encoder = self.token_encoder
        return encoder.name if encoder is not None and self.settings.lean_token_vectors else None

    def reindex(self, batch: int = 256, progress: bool = False) -> int:
        """Give every row, of every user and the catalog, token vectors in the format new writes use:
        rows written before late interaction (or with it off) and rows in an older format; returns how
        many rows got new ones. Safe to run while serving, and to stop and run again
        (engram.memory.reindex)."""
        if self.token_encoder is None:
            raise InvalidInput("late interaction is off (ENGRAM_LATE_INTERACTION=false): nothing to index")
        return reindex_tokens(self.store, self.token_encoder, self._lean_model, batch, progress)

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

    def _next_version(self, tenant: Tenant, supersede: Supersession | None) -> int:
        """A playbook's version: one past the playbook it supersedes (an outside review: a revision stayed
        at 1), else 1. A playbook is revised, never "never true": a harsh contradiction is refused."""
        found = self.store.fetch(tenant, [supersede.old_id], include_catalog=False) if supersede else []
        old = found[0] if found and isinstance(found[0], ProceduralMemory) else None
        if old is None:  # none, or not found (NotFound at the write) or not a playbook (InvalidInput there)
            return 1
        if supersede is not None and supersede.retract:
            raise InvalidInput("a playbook is revised, not retracted: supersede it without 'harsh'")
        return old.version + 1

    def _store_row(self, tenant: Tenant, row: Memory, supersede: Supersession | None = None) -> bool:
        """Store one row; False when a turn was stored without its context, the turn it quotes having
        been forgotten meanwhile (perhaps by another process): the answer must not carry those words."""
        check_metadata_size(row.metadata, self.settings.max_metadata_chars)
        vectors, tokens = self.encode_rows([row])
        bare = self.store.insert(tenant, [row], vectors, {row.id: supersede} if supersede else None, tokens)
        return row.id not in bare
