"""OpenSearch scale run (a benchmark, not a test): write and recall under concurrent clients on one node,
then on three nodes with replicas, each loaded with the engine benchmark's rows.

For each cluster size in ``--nodes``: start that many OpenSearch nodes on 127.0.0.1 (tests/opensearch_node,
security on; ``--heap`` each), open Engram on all of them (one shard; no replica on one node, ``--replicas``
on three), bulk-load ``--rows`` memories over ``--users`` tenants as bench/bench_engine.py does (random
vectors, real words, Pareto-sized tenants, 200 catalog items), wait for green, then for each count in
``--clients`` run that many client threads in this process for ``--seconds`` (after ``--warmup``
seconds not counted). Each client loops: a tenant drawn at random, then half the time ``remember_turn``
in the client's session with that tenant, half the time ``recall`` (k=10, without the cross-encoder unless
``--rerank``: on two cores it would measure the models, not the store; ``record_use=False``), through the
public API with the real models, as one ``engram serve`` process would run them. Prints and saves
throughput, p50 / p95 / p99 per operation, errors, the disk on the primaries and in all, and the load.

    python bench/os_scale.py [--nodes 1 3] [--rows 100000] [--users 1000] [--clients 1 8 32]
                             [--seconds 60] [--replicas 1] [--heap 2g] [--json bench/results/os_scale.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.opensearch_node
sys.path.insert(0, str(ROOT / "bench"))

import bench_engine as engine_bench  # noqa: E402
from tests.opensearch_node.node import USERS, OpenSearchCluster, start_cluster  # noqa: E402

from engram import Engram  # noqa: E402
from engram.retrieval.config import RetrievalConfig  # noqa: E402
from engram.storage.opensearch import OpenSearchOptions, OpenSearchStore  # noqa: E402

PREFIX = "engramscale-"


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {f"p{q}_ms": round(engine_bench.pct(values, q), 1) for q in (50, 95, 99)}


def drive(eng: Engram, clients: int, users: int, args: argparse.Namespace) -> dict[str, Any]:
    """``clients`` threads of half writes, half recalls for warmup + seconds; figures of the counted part."""
    config = eng.config if args.rerank else RetrievalConfig(rerank=False)
    events: list[tuple[str, float, float, str]] = []  # (operation, started at, ms, error or "")
    lock = threading.Lock()
    stop = threading.Event()
    start = time.monotonic()

    def client(seed: int) -> None:
        rng = random.Random(seed)
        gen = engine_bench.TextGen(rng)
        while not stop.is_set():
            user = f"user{rng.randrange(users):04d}"
            operation = "write" if rng.random() < 0.5 else "recall"
            begun = time.monotonic()
            error = ""
            try:
                if operation == "write":
                    eng.for_user(user).remember_turn(gen.sentence(6, 20), session_id=f"scale-{seed}")
                else:
                    eng.for_user(user).recall(gen.sentence(3, 8), k=10, config=config, record_use=False)
            except Exception as exc:  # counted and shown, the run goes on
                error = f"{type(exc).__name__}: {str(exc)[:100]}"
            with lock:
                events.append((operation, begun - start, (time.monotonic() - begun) * 1000, error))

    threads = [
        threading.Thread(target=client, args=(1000 * clients + i,), daemon=True) for i in range(clients)
    ]
    cpu0 = os.times()
    for t in threads:
        t.start()
    time.sleep(args.warmup + args.seconds)
    stop.set()
    for t in threads:
        t.join(timeout=120)
    cpu1 = os.times()
    counted = [e for e in events if args.warmup <= e[1] < args.warmup + args.seconds]
    result: dict[str, Any] = {"clients": clients, "seconds": args.seconds, "load_average": os.getloadavg()[0]}
    result["engram_process_cores"] = round(
        ((cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)) / (args.warmup + args.seconds), 2
    )
    for operation in ("write", "recall"):
        ok = [ms for op, _, ms, error in counted if op == operation and not error]
        failed = Counter(error for op, _, _, error in counted if op == operation and error)
        result[operation] = {
            "per_s": round(len(ok) / args.seconds, 1),
            **percentiles(ok),
            "failed": sum(failed.values()),
            **({"errors": dict(failed.most_common(3))} if failed else {}),
        }
    return result


def disk(cluster: OpenSearchCluster) -> dict[str, float]:
    cluster.request("POST", f"/{PREFIX}*/_flush")
    _, body = cluster.request("GET", f"/{PREFIX}*/_stats/store")
    return {
        "disk_primaries_mb": round(body["_all"]["primaries"]["store"]["size_in_bytes"] / 2**20, 1),
        "disk_total_mb": round(body["_all"]["total"]["store"]["size_in_bytes"] / 2**20, 1),
    }


def run_cluster(nodes: int, args: argparse.Namespace, home: Path) -> dict[str, Any]:
    replicas = 0 if nodes == 1 else args.replicas
    print(f"\n=== {nodes} node(s), {replicas} replica(s): starting", flush=True)
    cluster = start_cluster(home / f"nodes{nodes}", nodes, heap=args.heap)
    result: dict[str, Any] = {
        "nodes": nodes,
        "replicas": replicas,
        "cluster_start_s": round(cluster.startup_s, 1),
    }
    try:
        options = OpenSearchOptions(
            user="svc",
            password=USERS["svc"][0],
            ca_certs=str(cluster.ca),
            index_prefix=PREFIX,
            replicas=replicas,
        )
        with engine_bench.with_default_models(OpenSearchStore(cluster.url(), options)) as eng:
            gen = engine_bench.TextGen(random.Random(args.rows))
            eng.import_json([{"title": gen.sentence(2, 4), "text": gen.sentence(8, 20)} for _ in range(200)])
            engine_bench._tenant_hash[:] = [engine_bench.bcrypt_hash(engine_bench.random_password())]
            engine_bench.create_tenant_users(eng, args.users)
            # 500 rows a bulk: a tenant's 2,000 (~30 MB with token vectors) once took longer than the
            # client's 30 s read timeout with three nodes on two cores
            load_s = engine_bench.bulk_load(
                eng, gen, random.Random(args.rows), args.rows, args.users, chunk_rows=500
            )
            cluster.health(wait_for="green", timeout_s=600)
            result |= {"rows": args.rows, "users": args.users, "bulk_load_s": round(load_s, 1)}
            result |= disk(cluster)
            print(f"{args.rows} rows loaded in {load_s:.0f} s; {result}", flush=True)
            result["runs"] = []
            for clients in args.clients:
                run = drive(eng, clients, args.users, args)
                print(json.dumps(run), flush=True)
                result["runs"].append(run)
    finally:
        cluster.stop()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description="OpenSearch scale run: 1 node vs 3 nodes under load")
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--warmup", type=float, default=10)
    parser.add_argument("--replicas", type=int, default=1, help="on more than one node")
    parser.add_argument("--heap", default="2g", help="each node's heap")
    parser.add_argument(
        "--rerank", action="store_true", help="recall with the cross-encoder (default: without)"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="os-scale-") as tmp:
        for nodes in args.nodes:
            results.append(run_cluster(nodes, args, Path(tmp)))
    summary = {
        "date": time.strftime("%Y-%m-%d"),
        "args": {k: v for k, v in vars(args).items() if k != "json"},
    }
    if args.json:
        args.json.write_text(json.dumps(summary | {"clusters": results}, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
