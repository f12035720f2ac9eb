"""The benches' OpenSearch: one test node (tests/opensearch_node: java 17, mvn, openssl) started for a
run and stopped after it, with the store options that reach it as the service account ``svc``.

    with opensearch_node(Path(tmp) / "os", heap="1g") as node:
        store = OpenSearchStore(node.url, node.options("mybench-"))

Bench scripts run as files (``python bench/x.py``), so a bench imports this as ``os_node`` (its own folder
is on ``sys.path``).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram.storage.opensearch import OpenSearchOptions

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class BenchNode:
    """A running test node: its store URL, and options for a store under a prefix of one's choosing
    (one shard, no replica: a single node would stay yellow with one)."""

    node: Any  # tests.opensearch_node.node.OpenSearchNode
    password: str

    @property
    def url(self) -> str:
        return f"opensearchs://{self.node.address}"

    def options(self, index_prefix: str) -> OpenSearchOptions:
        return OpenSearchOptions(
            user="svc",
            password=self.password,
            ca_certs=str(self.node.ca),
            index_prefix=index_prefix,
            replicas=0,
        )


@contextlib.contextmanager
def opensearch_node(home: Path, heap: str = "1g") -> Iterator[BenchNode]:
    """Start a node in ``home`` (NodeSetupError when it cannot: a tool missing, no jars, a timeout) and
    stop it when the block ends, however it ends."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # tests.opensearch_node
    from tests.opensearch_node.node import USERS, start_node

    node = start_node(home, heap=heap)
    print(f"OpenSearch test node up in {node.startup_s:.1f} s (heap {heap})", flush=True)
    try:
        yield BenchNode(node, USERS["svc"][0])
    finally:
        node.stop()
