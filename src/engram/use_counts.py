"""Recall's use-count bumps, recorded without ever making a recall wait behind a bulk write.

A recall first bumps the counts itself, waiting at most ``use_wait_ms`` for the store's write lock,
and reports the counts the store returns. When another writer holds the lock longer (a large import,
a reindex, another process), the bump is queued instead, and a background thread applies it once the
lock is free: merged per memory, so no increment is lost while the process runs. ``flush()`` waits for
the queue; ``close()`` flushes it, then stops the thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Sequence
from datetime import datetime

from engram.errors import StoreBusy
from engram.storage.base import Store

log = logging.getLogger(__name__)
RETRY_PAUSE_S = 0.5  # between attempts of the background thread when the store failed


class UseRecorder:
    """Bumps use counts for one store; see the module docstring."""

    def __init__(self, store: Store, max_wait_s: float) -> None:
        self._store = store
        self._max_wait_s = max_wait_s
        self._queued: dict[str, tuple[Counter[str], datetime]] = {}  # tenant -> (uses, latest at)
        self._busy = False  # the thread is applying a batch taken from the queue
        self._closing = False
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def record(self, tenant: str, ids: Sequence[str], at: datetime) -> dict[str, int] | None:
        """Add one use to each id; the counts after it, or None when the bump was queued."""
        if not ids:
            return {}
        try:
            return self._store.record_use(tenant, Counter(ids), at, max_wait_s=self._max_wait_s)
        except StoreBusy:
            self._queue(tenant, Counter(ids), at)
            return None

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every queued bump is applied; False if ``timeout_s`` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queued and not self._busy, timeout_s)

    def close(self, timeout_s: float = 30.0) -> None:
        if not self.flush(timeout_s):
            with self._cond:
                lost = sum(sum(uses.values()) for uses, _ in self._queued.values())
            log.warning("closing with %d use-count increments not recorded: the store stayed busy", lost)
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    def _queue(self, tenant: str, uses: Counter[str], at: datetime) -> None:
        with self._cond:
            queued, latest = self._queued.get(tenant, (Counter(), at))
            self._queued[tenant] = (queued + uses, max(latest, at))
            if self._thread is None or not self._thread.is_alive():
                self._closing = False  # a bump after close() is applied too, by a new thread
                self._thread = threading.Thread(target=self._run, name="engram-use-counts", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queued or self._closing)
                if self._closing:
                    return
                batch, self._queued, self._busy = self._queued, {}, True
            failed = False
            try:
                for tenant, (uses, at) in batch.items():
                    try:
                        self._store.record_use(tenant, uses, at)  # waits the store's full busy timeout
                    except Exception as exc:  # keep them queued whatever went wrong; never die here
                        log.warning("use counts of %s not recorded yet, will retry: %s", tenant, exc)
                        failed = True
                        self._queue(tenant, uses, at)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
            if failed:
                time.sleep(RETRY_PAUSE_S)
