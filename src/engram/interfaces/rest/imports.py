"""Imports as jobs: a long import outlives any client's timeout, so one sent with an ``Idempotency-Key``
runs on the server's own threads and the request waits for it only so long.

``POST /v1/import`` (and ``/v1/catalog/import``) with the header starts the import, or joins the one
already running or finished under that key for this tenant: it answers 200 with the import's report
when the job ends within ``wait`` seconds (at most ``import_wait_s``), else 202 with its progress.
``GET /v1/import/{key}`` (``/v1/catalog/import/{key}``) waits the same way and answers the same. So
a client that timed out sends the same import again and gets the running job, not a second run racing
the first. The jobs live in the server process: a key unknown there (another worker, a restart, a
result older than ``import_kept_s``) is a 404, and sending the import again is always safe: identity is
per record (engram.importer), so a second run writes only what is missing and reports the rest skipped.
Without the header an import runs within its request, as before.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from fastapi import HTTPException
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from engram.errors import Conflict, EngramError, InvalidInput, NotFound
from engram.limits import MAX_IDEMPOTENCY_KEY_CHARS
from engram.settings import EngramSettings

Progress = Callable[[int, int], None]
Work = Callable[[Progress], dict[str, Any]]
MAX_KEY_CHARS = MAX_IDEMPOTENCY_KEY_CHARS
BUSY = {"Retry-After": "5"}


class ImportRunning(BaseModel):
    """202: the import goes on; ask again at ``GET .../import/{key}`` (or send it again)."""

    status: str = "running"
    key: str
    done: int  # records looked at so far
    total: int  # records in the document (0 until the document is validated)


@dataclass
class _Job:
    key: str
    digest: str
    done: int = 0
    total: int = 0
    result: dict[str, Any] | None = None
    error: EngramError | None = None
    finished_at: float | None = None
    ended: threading.Event = field(default_factory=threading.Event)
    stopped: bool = False  # its user is being erased: the next chunk's progress stops it

    def progress(self, done: int, total: int) -> None:
        self.done, self.total = done, total
        if self.stopped:
            raise Conflict("the user's data was deleted while this import ran: it stopped")


class ImportJobs:
    """The server process's import jobs, by (tenant, key); finished ones are kept ``import_kept_s``."""

    def __init__(self, settings: EngramSettings) -> None:
        self.settings = settings
        self._pool = ThreadPoolExecutor(settings.import_workers, thread_name_prefix="engram-import")
        self._jobs: dict[tuple[str, str], _Job] = {}
        self._lock = threading.Lock()

    def run(self, tenant: str, key: str | None, document: str, work: Work, wait: float | None) -> Any:
        """The import's report (200), or its progress (202) when it runs longer than ``wait``.
        ``document`` is the validated document as JSON: the same key must come with the same one."""
        if key is None:
            return work(lambda done, total: None)
        job = self._start(tenant, _checked(key), hashlib.sha256(document.encode()).hexdigest(), work)
        return self._answer(job, wait)

    def status(self, tenant: str, key: str, wait: float | None) -> Any:
        with self._lock:
            job = self._jobs.get((tenant, key))
        if job is None:
            raise NotFound(key, "import job")
        return self._answer(job, wait)

    def stop_user(self, tenant: str) -> list[threading.Event]:
        """Stop the tenant's imports at their next chunk and forget their reports (an erased user's
        record keys and ids); the events of those still running, to wait on."""
        with self._lock:
            mine = {at: job for at, job in self._jobs.items() if at[0] == tenant}
            for at, job in mine.items():
                job.stopped = True
                del self._jobs[at]
        return [job.ended for job in mine.values() if not job.ended.is_set()]

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _start(self, tenant: str, key: str, digest: str, work: Work) -> _Job:
        with self._lock:
            self._forget_old()
            job = self._jobs.get((tenant, key))
            if job is not None:
                if job.digest != digest:
                    raise Conflict(f"the Idempotency-Key {key!r} was used for another import")
                return job
            if sum(1 for j in self._jobs.values() if not j.ended.is_set()) >= self.settings.import_jobs_max:
                raise HTTPException(  # the server's state, not the store's: said as it is
                    503, "too many imports are running on this server: send it again later", BUSY
                )
            job = self._jobs[(tenant, key)] = _Job(key, digest)
        self._pool.submit(self._work, job, work)
        return job

    def _work(self, job: _Job, work: Work) -> None:
        try:
            job.result = work(job.progress)
        except EngramError as exc:
            job.error = exc
        except Exception as exc:
            job.error = EngramError("the import failed")
            job.error.__cause__ = exc
        finally:
            job.finished_at = time.monotonic()
            job.ended.set()

    def _answer(self, job: _Job, wait: float | None) -> Any:
        limit = self.settings.import_wait_s
        job.ended.wait(limit if wait is None else min(wait, limit))
        if not job.ended.is_set():
            running = ImportRunning(key=job.key, done=job.done, total=job.total)
            return JSONResponse(running.model_dump(), status_code=202, headers={"Retry-After": "1"})
        if job.error is not None:
            raise job.error
        return job.result

    def _forget_old(self) -> None:
        cutoff = time.monotonic() - self.settings.import_kept_s
        for at, job in list(self._jobs.items()):
            if job.finished_at is not None and job.finished_at < cutoff:
                del self._jobs[at]


def _checked(key: str) -> str:
    if not (0 < len(key) <= MAX_KEY_CHARS and key.isascii() and key.isprintable()):
        raise InvalidInput(f"Idempotency-Key must be 1-{MAX_KEY_CHARS} printable ASCII characters")
    return key
