"""Admission to the expensive stage: under overload a recall skips the cross-encoder instead of queueing.

The cross-encoder costs tens of milliseconds of CPU per recall and runs on a few sessions; when more
recalls want it than it can serve, every request waits behind the others and tail latency grows
without bound. ``RecallGate`` (the default) bounds the recalls computed at once and sheds the
cross-encoder of those that would wait too long; without it, ``Admission`` lets at most ``limit``
recalls into the stage at once (running or waiting for a session). A shed recall keeps the previous
stage's order, and its hits say ``"rerank": "skipped: load"``. Batching the waiting requests would not help: the INT8 cross-encoder
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
        self._closed = False
        self._inside = 0
        self._lock = threading.Lock()
        self.shed = 0  # how many were turned away, for logs and benchmarks

    @classmethod
    def closed(cls) -> Admission:
        """A gate that admits nobody: for a recall the RecallGate already shed."""
        gate = cls(0)
        gate._closed = True
        return gate

    @contextmanager
    def slot(self) -> Iterator[bool]:
        """True when admitted (leave the stage by leaving the block); False when full."""
        with self._lock:
            admitted = not self._closed and (self.limit == 0 or self._inside < self.limit)
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


class RecallGate:
    """At most ``slots`` recalls computed at once; the rest wait for a slot in arrival order. A recall
    that arrives when ``waiting`` are already queued is shed: it still waits its turn, but runs without
    the cross-encoder, so it holds its slot for a few milliseconds instead of ~100.

    Bounding every recall (shed ones too: without the cross-encoder a recall still encodes the query
    twice and scores 160 candidates) leaves the other cores to writes, the hot path an agent waits on;
    shedding keeps the queue short, so recall's tail stays bounded too. Measured at 32 clients on 2
    cores (bench/load.py): 1 slot gave remember p95 107 ms and recall p95 909 ms, where letting shed
    recalls run at once gave 182 ms. ``slots`` 0: no gate (every recall runs at once); ``waiting`` 0:
    never shed here.
    """

    def __init__(self, slots: int, waiting: int) -> None:
        if slots < 0 or waiting < 0:
            raise ValueError("slots and waiting must be >= 0")
        self.slots, self.waiting = slots, waiting
        self._running = 0
        self._queued = 0
        self._free = threading.Condition()
        self.shed = 0  # how many ran without the cross-encoder, for logs and benchmarks

    @property
    def queued(self) -> int:
        """Recalls waiting for a slot now."""
        return self._queued

    @contextmanager
    def enter(self) -> Iterator[bool]:
        """Wait for a slot, then hold it until the block ends. True: a full recall; False: shed (more
        than ``waiting`` were already queued on arrival), so it holds its slot only briefly."""
        if self.slots == 0:
            yield True
            return
        with self._free:
            full = self.waiting == 0 or self._queued < self.waiting
            if not full:
                self.shed += 1
            self._queued += 1
            self._free.wait_for(lambda: self._running < self.slots)
            self._queued -= 1
            self._running += 1
        try:
            yield full
        finally:
            with self._free:
                self._running -= 1
                self._free.notify()
