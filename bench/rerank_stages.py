"""Whether the cross-encoder runs on each backend, and what it costs (not a test).

Loads bench_engine's synthetic rows (random unit vectors and token vectors) into a SQLite file and into
an OpenSearch test node, then recalls each sampled query twice, without and with the cross-encoder, the
two taking turns in alternating order (so both see the same cache state), and counts what the top hit's
explain says about the rerank stage (a ``skipped`` note, ``*_error`` keys) and how many hits carry a
cross-encoder score.

    python bench/rerank_stages.py [ROWS USERS SAMPLES]      # default 3000 30 60
"""

from __future__ import annotations

import collections
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import bench_engine as be  # noqa: E402

from engram.retrieval.config import RetrievalConfig  # noqa: E402
from engram.storage.opensearch import OpenSearchOptions, OpenSearchStore  # noqa: E402
from engram.storage.sqlite import SQLiteStore  # noqa: E402


def run(eng, label: str, total: int, users: int, samples: int) -> None:
    gen = be.TextGen(random.Random(total))
    be.bulk_load(eng, gen, random.Random(total), total, users)
    rng = random.Random(total + 1)
    norerank = RetrievalConfig(rerank=False)
    notes: collections.Counter = collections.Counter()
    plain, reranked, scored = [], [], []
    for n in range(samples):
        you = eng.for_user(f"user{rng.randrange(users):04d}")
        query = gen.sentence(3, 8)
        turns = ((norerank, plain), (eng.config, reranked))
        for config, out in turns if n % 2 else turns[::-1]:
            t = time.perf_counter()
            hits = you.recall(query, config=config, record_use=False)
            out.append((time.perf_counter() - t) * 1000)
            if config is eng.config and hits:
                said = {k: v for k, v in hits[0].explain.items() if k != "relevance"}  # a stage's name
                noted = (k for k, v in said.items() if k.endswith("_error") or isinstance(v, str))
                notes[tuple(sorted(noted))] += 1
                scored.append(sum(isinstance(h.explain.get("rerank"), float) for h in hits))
    print(
        f"{label}: p50 without {statistics.median(plain):.1f} ms, with {statistics.median(reranked):.1f} ms, "
        f"mean difference {statistics.mean(b - a for a, b in zip(plain, reranked, strict=True)):.1f} ms; "
        f"hits with a cross-encoder score {statistics.mean(scored):.2f}; explain notes/errors {dict(notes)}",
        flush=True,
    )


def main() -> None:
    total, users, samples = (int(a) for a in sys.argv[1:4]) if len(sys.argv) > 3 else (3000, 30, 60)
    from tests.opensearch_node.node import USERS, start_node

    with tempfile.TemporaryDirectory() as tmp:
        with be.with_default_models(SQLiteStore(Path(tmp) / "bench.db")) as eng:
            run(eng, "sqlite", total, users, samples)
        node = start_node(Path(tmp) / "os", heap="1g")
        try:
            options = OpenSearchOptions(
                user="svc",
                password=USERS["svc"][0],
                ca_certs=str(node.ca),
                index_prefix="stages-",
                replicas=0,
            )
            with be.with_default_models(OpenSearchStore(f"opensearchs://{node.address}", options)) as eng:
                run(eng, "opensearch", total, users, samples)
        finally:
            node.stop()


if __name__ == "__main__":
    main()
