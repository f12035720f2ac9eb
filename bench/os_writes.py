"""OpenSearch write benchmark (not a test): round trips and latency of a write, two source trees on one node.

Starts one OpenSearch 2.19 test node (tests/opensearch_node, one shard, no replica), then runs this
script's child part once per source tree, alternately (A B A B, each on its own index prefix), so the
trees are compared on the same node under the same load. Each child opens an Engram with the default
embedder and token encoder (no cross-encoder: writes do not use it), gives ``--users`` users ``--rows``
rows each (random vectors, one bulk per user), then measures, as the user each time:

  * turn: ``remember_turn`` in the user's ongoing session (embedding, token vectors, store), p50/p95
  * store: ``Store.insert`` of an already encoded turn that quotes the session's previous turn, p50/p95
  * supersede: ``write(..., supersedes_id=...)`` of a fact, p50/p95
  * requests: HTTP requests per operation, counted at the client's connections

    python bench/os_writes.py --compare /tmp/engram-before/src [--users 50] [--samples 200]

The current tree is ``src`` next to this script; ``--compare`` names the other.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def pct(values: list[float], q: int) -> float:
    return round(statistics.quantiles(values, n=100, method="inclusive")[q - 1], 1)


def child(url: str, prefix: str, users: int, rows: int, samples: int) -> dict:
    import numpy as np

    from engram import Engram
    from engram.models import EpisodicMemory, new_id, utcnow
    from engram.providers import default_embedder, default_token_encoder
    from engram.settings import load_settings
    from engram.storage.opensearch import OpenSearchOptions, OpenSearchStore

    settings = load_settings()
    options = OpenSearchOptions(
        user=os.environ["ENGRAM_OS_USER"],
        password=os.environ["ENGRAM_OS_PASSWORD"],
        ca_certs=os.environ["ENGRAM_OS_CA_CERTS"],
        index_prefix=prefix,
        replicas=0,
    )
    store = OpenSearchStore(url, options)
    eng = Engram(
        store,
        default_embedder(settings),
        None,
        token_encoder=default_token_encoder(settings),
        settings=settings,
    )
    sent: list[str] = []
    for conn in store._client.transport.connection_pool.connections:
        real = conn.perform_request

        def counted(method, path, *args, _real=real, **kwargs):
            sent.append(path)
            return _real(method, path, *args, **kwargs)

        conn.perform_request = counted
    rng = np.random.default_rng(7)
    names = [f"user{u:03d}" for u in range(users)]
    for user in names:  # the users' history, and their first turn in the session measured below
        batch = [
            EpisodicMemory(
                id=new_id("episodic"),
                text=f"turn {n} of {user}",
                user_id=user,
                created_at=utcnow(),
                timestamp=utcnow(),
            )
            for n in range(rows)
        ]
        vectors = rng.standard_normal((rows, eng.embedder.dim)).astype("float32")
        store.insert(user, batch, vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
        eng.for_user(user).remember_turn("I am planning a trip to Oban", session_id="chat")
        eng.for_user(user).write("lives in Leith")
    result: dict = {}
    turn_ms, turn_req = [], []
    for n in range(samples):
        you = eng.for_user(names[n % users])
        sent.clear()
        t = time.perf_counter()
        you.remember_turn(f"yes, the early ferry number {n}", session_id="chat")
        turn_ms.append((time.perf_counter() - t) * 1000)
        turn_req.append(len(sent))
    store_ms, store_req = [], []
    previous = {u: eng.for_user(u).list("episodic", limit=1)[0] for u in names}
    for n in range(samples):
        user = names[n % users]
        row = EpisodicMemory(
            id=new_id("episodic"),
            text=f"and a cabin {n}",
            user_id=user,
            created_at=utcnow(),
            timestamp=utcnow(),
            session_id="chat",
            context=previous[user].text,
            context_id=previous[user].id,
        )
        vectors, tokens = eng.encode_rows([row])
        sent.clear()
        t = time.perf_counter()
        store.insert(user, [row], vectors, None, tokens)
        store_ms.append((time.perf_counter() - t) * 1000)
        store_req.append(len(sent))
        previous[user] = row
    sup_ms, sup_req = [], []
    facts = {u: eng.for_user(u).list("semantic", limit=1)[0].id for u in names}
    for n in range(max(20, samples // 4)):
        user = names[n % users]
        sent.clear()
        t = time.perf_counter()
        facts[user] = eng.for_user(user).write(f"lives in Porto {n}", supersedes_id=facts[user]).id
        sup_ms.append((time.perf_counter() - t) * 1000)
        sup_req.append(len(sent))
    for label, ms, req in (
        ("turn", turn_ms, turn_req),
        ("store", store_ms, store_req),
        ("supersede", sup_ms, sup_req),
    ):
        result[f"{label}_p50_ms"], result[f"{label}_p95_ms"] = pct(ms, 50), pct(ms, 95)
        result[f"{label}_requests"] = round(statistics.mean(req), 2)
    eng.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description="OpenSearch write round trips and latency, two trees")
    parser.add_argument("--compare", type=Path, help="the other tree's src folder")
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--rows", type=int, default=20)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", nargs=2, metavar=("URL", "PREFIX"), help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child, args.users, args.rows, args.samples)))
        return
    sys.path.insert(0, str(HERE.parent))
    from tests.opensearch_node.node import USERS, start_node

    trees = {"current": HERE.parent / "src", **({"compare": args.compare.resolve()} if args.compare else {})}
    results: dict[str, list[dict]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory() as tmp:
        node = start_node(Path(tmp) / "os", heap="1g")
        env = dict(
            os.environ,
            ENGRAM_OS_USER="svc",
            ENGRAM_OS_PASSWORD=USERS["svc"][0],
            ENGRAM_OS_CA_CERTS=str(node.ca),
        )
        try:
            for r in range(args.rounds):
                for name, src in trees.items():
                    command = [
                        sys.executable,
                        __file__,
                        "--child",
                        f"opensearchs://{node.address}",
                        f"b{r}{name}-",
                    ]
                    command += [
                        "--users",
                        str(args.users),
                        "--rows",
                        str(args.rows),
                        "--samples",
                        str(args.samples),
                    ]
                    done = subprocess.run(
                        command,
                        env=dict(env, PYTHONPATH=str(src)),
                        capture_output=True,
                        text=True,
                        check=False,
                    )
                    if done.returncode:
                        raise SystemExit(f"{name} failed:\n{done.stderr[-3000:]}")
                    results[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
                    print(name, results[name][-1], flush=True)
        finally:
            node.stop()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
