"""Consolidation on demand: ``POST /v1/consolidate`` and the MCP tool ``consolidate_memory`` start a run
for the key's user on the server's threads and answer at once with its id; ``GET
/v1/consolidate/{run_id}`` (or the tool with ``run_id``) reads how it went.

One run at a time per user: a trigger while one is queued or running answers that run, not a second
one (two would race for the same turns; the store would refuse the loser's batch anyway). Runs live in
the server process, like import jobs (``rest/imports.py``): a run id unknown there (another worker, a
restart, a run ended more than ``import_kept_s`` ago) is NotFound, and triggering again is always
safe: a run reads only the turns still waiting. Without an LLM configured there is nothing to run:
Conflict, naming the settings.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from engram.errors import Conflict, NotFound, public_failure
from engram.memory import Engram
from engram.models import utcnow

log = logging.getLogger(__name__)
RunStatus = Literal["queued", "running", "succeeded", "failed"]
NO_LLM = (
    "consolidation needs an LLM and none is configured: set ENGRAM_LLM_BASE_URL and ENGRAM_LLM_MODEL "
    "(an OpenAI-compatible chat endpoint) and restart the server"
)
LLM_FAILED = (
    "the LLM failed or gave no usable answer: the turns still wait for the next run; the server log "
    "has the details"
)


@dataclass
class ConsolidationRun:
    """One run: its id, state and, once ended, what it wrote (``counts``) or why it failed (``error``)."""

    run_id: str
    user_id: str
    status: RunStatus = "queued"
    created_at: datetime = field(default_factory=utcnow)
    finished_at: datetime | None = None
    counts: dict[str, int] | None = None
    note: str | None = None  # the consolidator's own word when it did part of the work ("partial: ...")
    error: str | None = None
    ended_monotonic: float | None = None

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "run_id": self.run_id,
            "status": self.status,
            "created_at": self.created_at.isoformat(),
            "finished_at": None if self.finished_at is None else self.finished_at.isoformat(),
        }
        for name in ("counts", "note", "error"):
            if getattr(self, name) is not None:
                body[name] = getattr(self, name)
        return body


class ConsolidationRuns:
    """The server process's consolidation runs, by user; ended ones are kept ``import_kept_s``."""

    def __init__(self, engram: Engram) -> None:
        self._engram = engram
        self._pool = ThreadPoolExecutor(
            engram.settings.consolidation_runs, thread_name_prefix="engram-consolidate"
        )
        self._runs: dict[str, ConsolidationRun] = {}
        self._lock = threading.Lock()

    def trigger(self, user_id: str) -> ConsolidationRun:
        """Start a run for the user, or the user's run already queued or running."""
        settings = self._engram.settings
        if not (settings.llm_base_url and settings.llm_model):  # what LLMClient.from_settings needs
            raise Conflict(NO_LLM)
        with self._lock:
            self._forget_old()
            for run in self._runs.values():
                if run.user_id == user_id and run.status in ("queued", "running"):
                    return run
            run = ConsolidationRun(run_id=f"run_{secrets.token_urlsafe(12)}", user_id=user_id)
            self._runs[run.run_id] = run
        self._pool.submit(self._work, run)
        return run

    def get(self, user_id: str, run_id: str) -> ConsolidationRun:
        """The user's run of that id; another user's is NotFound, like an unknown one."""
        with self._lock:
            run = self._runs.get(run_id)
        if run is None or run.user_id != user_id:
            raise NotFound(run_id, "consolidation run")
        return run

    def drop_user(self, user_id: str) -> list[ConsolidationRun]:
        """Forget the user's runs (an erased user's); those still queued or running, to wait for."""
        with self._lock:
            mine = [run for run in self._runs.values() if run.user_id == user_id]
            for run in mine:
                del self._runs[run.run_id]
        return [run for run in mine if run.ended_monotonic is None]

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _work(self, run: ConsolidationRun) -> None:
        run.status = "running"
        try:
            report = self._engram.consolidate(run.user_id)
        except Exception as exc:  # the store or the LLM client failed outside the report
            run.error, run.status = public_failure(exc, "the consolidation run"), "failed"
        else:
            run.counts = {
                "batches": report.batches,
                "episodes": report.episodes,
                "written": len(report.written),
                "merged": len(report.merged),
                "superseded": len(report.superseded),
                "feedback": len(report.feedback),
                "dropped": len(report.dropped),
                "skipped_episodes": len(report.skipped_episodes),
            }
            failed = report.status.startswith(("error", "stopped", "disabled"))
            if report.status.startswith("error"):  # the LLM's error may name its endpoint: logged only
                log.error("consolidation of %s: %s", run.user_id, report.status)
                run.error = LLM_FAILED
            elif failed:
                run.error = report.status
            elif report.status != "ok":
                run.note = report.status
            run.status = "failed" if failed else "succeeded"
        finally:
            run.finished_at, run.ended_monotonic = utcnow(), time.monotonic()

    def _forget_old(self) -> None:
        cutoff = time.monotonic() - self._engram.settings.import_kept_s
        for run_id, run in list(self._runs.items()):
            if run.ended_monotonic is not None and run.ended_monotonic < cutoff:
                del self._runs[run_id]
