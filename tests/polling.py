"""Waiting for another thread's progress in tests, with a bound instead of a fixed sleep."""

from __future__ import annotations

import time
from collections.abc import Callable


def until(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll ``condition`` every 10 ms until it holds (True) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
