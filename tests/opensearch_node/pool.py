"""Fresh indices for each test on the session's node: an index prefix per store, deleted after the test.

Prefixes are reused once their indices are gone (``engramtest3-``): the store sets up its tenants' DLS
role once per prefix (two security-config updates, ~0.9 s), so a prefix is worth keeping, its indices
not. Tenant users (``engram_u_sarah``) are cluster-wide and stay for the session too.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from tests.opensearch_node.node import OpenSearchNode


class PrefixPool:
    def __init__(self, node: OpenSearchNode) -> None:
        self.node = node
        self._free: list[str] = []
        self._made = 0
        self._lock = threading.Lock()

    def acquire(self) -> str:
        with self._lock:
            if self._free:
                return self._free.pop()
            self._made += 1
            return f"engramtest{self._made}-"

    def release(self, prefix: str) -> None:
        status, body = self.node.request("DELETE", f"/{prefix}*?expand_wildcards=all")
        assert status == 200, body
        with self._lock:
            self._free.append(prefix)

    @contextmanager
    def prefixes(self) -> Iterator[list[str]]:
        """A list the test appends its prefixes to (``take``); all released after it."""
        taken: list[str] = []
        try:
            yield taken
        finally:
            for prefix in taken:
                self.release(prefix)
