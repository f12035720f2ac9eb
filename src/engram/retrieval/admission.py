"""Admission to the expensive stage: under overload a recall skips the cross-encoder instead of queueing.

The cross-encoder costs tens of milliseconds of CPU per recall and runs on a few sessions; when more
recalls want it than it can serve, every request waits behind the others and tail latency grows
without bound. ``Admission`` lets at most ``limit`` recalls into the stage at once (running or
waiting for a session); one past that keeps the previous stage's order, and its hits say
``"rerank": "skipped: load"``. Batching the waiting requests would not help: the INT8 cross-encoder
runs each pair alone (see OnnxCrossEncoder), so its cost is per pair, not per call.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Admission:
    """A non-blocking counting gate: ``with gate.slot() as admitted:`` never waits."""

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError("limit must be >= 0 (0: never shed)")
        self.limit = limit
        self._inside = 0
        self._lock = threading.Lock()
        self.shed = 0  # how many were turned away, for logs and benchmarks

    @contextmanager
    def slot(self) -> Iterator[bool]:
        """True when admitted (leave the stage by leaving the block); False when full."""
        with self._lock:
            admitted = self.limit == 0 or self._inside < self.limit
            if admitted:
                self._inside += 1
            else:
                self.shed += 1
        try:
            yield admitted
        finally:
            if admitted:
                with self._lock:
                    self._inside -= 1
