"""The background consolidation cadence inside `engram serve`: a user is consolidated once they have
``every_episodes`` new turns, or at least every ``every_hours`` when any turn is waiting."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Protocol

from engram.consolidation.policy import ConsolidationReport
from engram.storage.base import ConsolidationStore

log = logging.getLogger(__name__)
ERROR_BACKOFF_S = 600.0  # a user whose run failed waits this long, or a failing LLM is called every tick


class WorkerStore(ConsolidationStore, Protocol):
    """What the worker reads to find who is due: the users, and each one's waiting episodes."""

    def tenants(self) -> list[str]: ...


class Consolidates(Protocol):
    """What the worker drives: the facade (``Engram``) is one; its ``consolidate`` makes the LLM client
    and policy from its settings."""

    @property
    def store(self) -> WorkerStore: ...

    def consolidate(self, user_id: str) -> ConsolidationReport: ...


class ConsolidationWorker:
    def __init__(
        self, engram: Consolidates, *, every_episodes: int, every_hours: float, poll_seconds: float = 30.0
    ) -> None:
        self.engram = engram
        self.every_episodes = every_episodes
        self.every_seconds = every_hours * 3600
        self.poll_seconds = poll_seconds
        self._started = time.monotonic()
        self._last_run: dict[str, float] = {}
        self._failed_until: dict[str, float] = {}  # user -> when a failed user may be tried again
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="engram-consolidation", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            try:
                self.tick()
            except Exception:  # the worker must outlive any one failure; the next tick retries
                log.exception("consolidation tick failed")

    def tick(self) -> list[dict[str, Any]]:
        """Consolidate every user that is due; returns their reports."""
        store = self.engram.store
        now = time.monotonic()
        reports: list[dict[str, Any]] = []
        for user in store.tenants():
            if self._stop.is_set():
                break
            if now < self._failed_until.get(user, 0.0):
                continue
            try:
                waiting = len(store.waiting_episodes(user, self.every_episodes))
                waited = now - self._last_run.get(user, self._started)
                if waiting and (waiting >= self.every_episodes or waited >= self.every_seconds):
                    self._last_run[user] = now
                    report = self.engram.consolidate(user).as_dict()
                    failed = str(report["status"]).startswith("error")  # a run that ended in a report
                    log.log(
                        logging.ERROR if failed else logging.INFO,
                        "consolidation of %s %s: %s",
                        user,
                        "failed" if failed else "done",
                        {k: report[k] for k in ("status", "episodes")},
                    )
                    reports.append(report)
            except Exception as exc:  # one user's failure must not starve every user after it
                log.exception("consolidation of %s failed", user)
                report = {"user_id": user, "status": f"error: {exc}", "episodes": 0}
                reports.append(report)
            if reports and reports[-1]["user_id"] == user and str(reports[-1]["status"]).startswith("error"):
                self._failed_until[user] = now + ERROR_BACKOFF_S
        return reports
