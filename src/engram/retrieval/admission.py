"""Admission to the expensive stage: under overload a recall skips the cross-encoder instead of queueing.

The cross-encoder costs tens of milliseconds of CPU per recall and runs on a few sessions; when more
recalls want it than it can serve, every request waits behind the others and tail latency grows
without bound. ``RecallGate`` (the default) bounds the recalls computed at once and sheds the
cross-encoder of those that would wait too long; without it, ``Admission`` lets at most ``limit``
recalls into the stage at once (running or waiting for a session). A shed recall keeps the previous
stage's order, its hits say ``"rerank": "skipped: load"``, and the service says so at the top of the
response (``shed``, and the ``Engram-Recall-Shed`` header). Neither gate is on in an embedded Engram
unless its settings say ``recall_gate``; ``engram serve`` turns it on. Batching the waiting requests would not
help: the INT8 cross-encoder runs each pair alone (see OnnxCrossEncoder), so its cost is per pair, not
per call.
"""

from __future__ import annotations

import threading
from collections import deque
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
    """At most ``slots`` recalls computed at once; the rest wait for a slot. A recall that has to wait
    while its tenant already has its share of ``waiting`` queued is shed: it waits its turn too, but is
    computed without the cross-encoder, so it holds its slot for a few milliseconds instead of ~100.
    Past ``max_queued`` waiting in all, a shed recall runs at once instead of queueing, so waiting
    recalls can never take every request thread of a server from the writes.

    Fair per tenant: once ``waiting`` recalls wait, a newcomer is shed unless its tenant has fewer
    queued than its share, ``waiting`` divided among the tenants with recalls waiting (itself
    included, rounded down: 0 when more tenants wait than there are places, so the queue stays
    bounded, at most ``2 x waiting``), and a finishing recall hands its slot to the next tenant in turn
    (first come first served within a tenant). So one tenant flooding recall sheds its own recalls,
    not everyone's, and the others' wait behind one of its recalls at a time, not its whole queue.
    With one tenant this is the plain first-come-first-served gate. (A share of at least one for every
    tenant shed nothing at 32 clients of one recall each: recall p50 1.9 s in bench/load.py.)

    Bounding every recall (shed ones too: without the cross-encoder a recall still encodes the query
    twice and scores 160 candidates) leaves the other cores to writes, the hot path an agent waits on;
    shedding keeps the queue short, so recall's tail stays bounded too. Measured at 32 clients on 2
    cores (bench/load.py): 1 slot gave remember p95 107 ms and recall p95 909 ms, where letting shed
    recalls run at once gave 182 ms. ``slots`` 0: no gate (every recall runs at once); ``waiting`` 0:
    never shed here (nor run at once).
    """

    def __init__(self, slots: int, waiting: int, max_queued: int = 64) -> None:
        if slots < 0 or waiting < 0 or max_queued < 0:
            raise ValueError("slots, waiting and max_queued must be >= 0")
        self.slots, self.waiting, self.max_queued = slots, waiting, max_queued
        self._running = 0
        # Each tenant's waiters, oldest first (set: the slot was handed to it); the dict's order is
        # the turn: the tenant served next is moved to the end.
        self._queues: dict[str, deque[threading.Event]] = {}
        self._lock = threading.Lock()
        self.shed = 0  # how many ran without the cross-encoder, for logs and benchmarks

    @property
    def queued(self) -> int:
        """Recalls waiting for a slot now."""
        return sum(len(q) for q in self._queues.values())

    def queue_depth(self) -> int:
        """``queued``, read under the lock: for a scrape from another thread while recalls queue."""
        with self._lock:
            return self.queued

    @contextmanager
    def enter(self, tenant: str = "") -> Iterator[bool]:
        """Hold a slot until the block ends (waiting for one if need be). True: a full recall; False:
        shed (``tenant`` had its share of ``waiting`` queued), so it holds its slot only briefly."""
        if self.slots == 0:
            yield True
            return
        with self._lock:
            queued = self.queued
            if self._running < self.slots and not queued:
                self._running += 1
                turn = None
                full = True
            else:
                mine = len(self._queues.get(tenant, ()))
                tenants = len(self._queues) + (tenant not in self._queues)
                # Room in the queue: every recall waits for a full one. Full: only a tenant below its
                # share (floor, so 0 once more tenants wait than there are places) still gets one.
                full = self.waiting == 0 or queued < self.waiting or mine < self.waiting // tenants
                if not full:
                    self.shed += 1
                if not full and queued >= self.max_queued:
                    turn = None  # run at once, outside the slots
                else:
                    turn = threading.Event()
                    self._queues.setdefault(tenant, deque()).append(turn)
        holds_slot = turn is not None or full
        if turn is not None:
            try:
                turn.wait()
            except BaseException:  # interrupted while waiting: leave the queue or pass the slot on
                with self._lock:
                    if turn.is_set():
                        self._release()
                    else:
                        self._leave(tenant, turn)
                raise
        try:
            yield full
        finally:
            if holds_slot:
                with self._lock:
                    self._release()

    def _leave(self, tenant: str, turn: threading.Event) -> None:
        queue = self._queues[tenant]
        queue.remove(turn)
        if not queue:
            del self._queues[tenant]

    def _release(self) -> None:
        """Hand the slot to the oldest waiter of the tenant whose turn it is, else free it (called with
        the lock held)."""
        if not self._queues:
            self._running -= 1
            return
        tenant = next(iter(self._queues))
        queue = self._queues.pop(tenant)
        queue.popleft().set()
        if queue:
            self._queues[tenant] = queue  # back of the line: the other tenants go first
