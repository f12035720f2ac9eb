"""`engram reindex`: every row's token vectors, in the format new writes use.

Two passes per tenant (the catalog, then each user): rows with no token vectors at all (written before
late interaction, or with it off) get them; then the tenant's rows are scanned in write order and each
one stored in an older format (``late_interaction.is_current``) is encoded again and rewritten. Online:
each batch is its own short write, recall reads either format meanwhile. Resumable: a run stopped
halfway leaves converted rows converted, and the next run rewrites only what is still old (it reads
the rest's blobs to tell, it does not encode them again).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from rich.progress import Progress

from engram.models import Memory, search_text_of
from engram.providers.base import TokenEncoder
from engram.retrieval.late_interaction import is_current, pack_all
from engram.storage.base import CATALOG, MemoryStore, Tenant, TransferStore


class ReindexStore(MemoryStore, TransferStore, Protocol):
    """The store roles reindex needs: token vectors read and written, and rows scanned in order."""


def reindex_tokens(
    store: ReindexStore,
    encoder: TokenEncoder,
    lean_model: str | None,
    batch: int = 256,
    progress: bool = False,
) -> int:
    """Give every row current token vectors; returns how many rows got new ones. ``lean_model``: the
    encoder's name when new writes store the lean format (``late_interaction.pack_all``), else None."""
    done = 0
    tenants: list[Tenant] = [CATALOG, *store.tenants()]
    with Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task("token vectors", total=len(tenants))
        for tenant in tenants:
            while rows := store.rows_without_tokens(tenant, batch):
                done += _encode(store, encoder, lean_model, tenant, rows)
            after = 0
            while page := store.scan(tenant, after, batch):
                after = page[-1][0]
                rows = [row for _, row, _ in page]
                blobs = store.token_vectors(tenant, [r.id for r in rows], include_catalog=False)
                old = [r for r in rows if r.id in blobs and not is_current(blobs[r.id], lean_model)]
                if old:
                    done += _encode(store, encoder, lean_model, tenant, old)
                bar.update(task, description=f"token vectors ({done} rows rewritten)")
            bar.advance(task)
    return done


def _encode(
    store: MemoryStore, encoder: TokenEncoder, lean_model: str | None, tenant: Tenant, rows: Sequence[Memory]
) -> int:
    encoded = encoder.encode_documents([search_text_of(r) for r in rows])
    blobs = pack_all(encoded, lean_model)
    store.set_tokens(tenant, {r.id: blob for r, blob in zip(rows, blobs, strict=True)})
    return len(rows)
