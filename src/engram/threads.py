"""Thread CPU priority: recall's helper threads yield the cores to writes, the hot path an agent waits on."""

from __future__ import annotations

import os
import sys
import threading


def available_cores() -> int:
    """The cores this process may run on: its CPU affinity (a container's cpuset), not the host's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity call on this platform
        return max(1, os.cpu_count() or 1)


def lower_priority(nice: int) -> None:
    """Raise the calling thread's nice value to at least ``nice`` (Linux; elsewhere nothing happens).

    Linux schedules each thread on its own, so a thread can be made to yield without touching the rest
    of the process. The value only ever goes up: an unprivileged process may not lower it again, so
    this is for threads that do nothing but the low-priority work. Measured at 32 clients on 2 cores
    (bench/load.py, docs/benchmarks.md): nice 10 for recall's helpers took remember p95 from 182 ms to
    107 ms.
    """
    if nice <= 0 or not sys.platform.startswith("linux"):
        return
    thread = threading.get_native_id()
    try:
        if os.getpriority(os.PRIO_PROCESS, thread) < nice:
            os.setpriority(os.PRIO_PROCESS, thread, nice)
    except OSError:  # a sandbox without the syscall: run at normal priority
        return
