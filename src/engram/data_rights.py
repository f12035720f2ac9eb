"""Data-rights requests on one user: deleting everything of theirs (an export is
``engram.transfer.export_user``, in the store export's format).

``erase_user`` deletes on the store (``Store.delete_user``: every table or index, their keys and
sessions too, so the keys stop working at the next request) and writes one audit record to the
``engram.audit`` log: who asked (the admin key's id, or the CLI), whose data, how many of each kind;
no content. The record lives in the operator's log, not in the store: the store keeps nothing of the
user afterwards.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from engram.models import utcnow
from engram.storage.base import UserErasure
from engram.validation import validate_user_id

audit = logging.getLogger("engram.audit")


def erase_user(
    store: UserErasure, user_id: str, *, by: str, said: Callable[[str], None] | None = None
) -> dict[str, int]:
    """Delete every row of ``user_id`` on ``store`` and audit it (``by``: who asked; ``said`` is also
    given the record: the CLI prints it, having no log set up). Idempotent: a second call deletes
    nothing and is audited likewise. Returns how many of each kind went."""
    validate_user_id(user_id)
    counts = store.delete_user(user_id)
    summary = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())) or "nothing"
    record = f"deleted user {user_id!r} at {utcnow().isoformat()}, asked by {by}: {summary}"
    audit.info("%s", record)
    if said is not None:
        said(record)
    return counts
