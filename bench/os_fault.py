"""OpenSearch fault run (a benchmark, not a test: three JVMs on a 2-core CI machine cost minutes).

Starts a 3-node OpenSearch cluster on 127.0.0.1 (tests/opensearch_node: three JVMs, security on, one
CA), opens Engram on it through the public API with every node in the URL and ENGRAM_OS_REPLICAS=1 (each
shard has a copy on a second node), and runs writer threads (one user each: remember_turn in a session,
and a fact every third write) and recall threads. After ``--before`` seconds it stops the node that holds
the primary of the memories index (SIGTERM: a clean shutdown; ``--mode kill``: SIGKILL, a crash), keeps
writing and recalling through the survivors while a monitor polls the cluster health, until the cluster
is green again (replicas re-created on the two survivors, after ``index.unassigned.node_left.
delayed_timeout``, 1 min by default) plus ``--after`` seconds. Then it checks that every acknowledged
write is readable: by id through the public API (``reader(user).present``) and counted by user and type
with the admin account, and reports the writes and recalls per phase (before the stop, stop -> yellow,
yellow -> green, after green) with errors and latency.

    python bench/os_fault.py [--mode sigterm kill] [--writers 4] [--recallers 2] [--replicas 1]
                             [--before 20] [--after 15] [--json bench/results/os_fault.json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.opensearch_node

from tests.opensearch_node.node import USERS, OpenSearchCluster, start_cluster  # noqa: E402

from engram import Engram  # noqa: E402

PREFIX = "engramfault-"
TOPICS = (
    "billing invoice refund",
    "router firmware upgrade",
    "password reset email",
    "shipping delay warehouse",
    "printer driver error",
    "vpn tunnel disconnects",
    "laptop battery swelling",
    "calendar sync conflict",
)


@dataclass
class Event:
    at: float  # seconds since the run's start
    ms: float
    ok: bool
    error: str = ""


@dataclass
class Run:
    start: float = field(default_factory=time.monotonic)
    writes: list[Event] = field(default_factory=list)
    recalls: list[Event] = field(default_factory=list)
    acked: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # user -> [(id, type)]
    health: list[tuple[float, str, int]] = field(default_factory=list)  # (at, status, nodes)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)

    def now(self) -> float:
        return time.monotonic() - self.start


def writer(eng: Engram, user: str, run: Run, seed: int) -> None:
    rng = random.Random(seed)
    memory = eng.for_user(user)
    i = 0
    while not run.stop.is_set():
        i += 1
        topic = rng.choice(TOPICS)
        t0 = time.monotonic()
        at = run.now()
        try:
            if i % 3 == 0:
                kind = "semantic"
                written = memory.write(f"{user} fact {i}: prefers {topic} answers by email, ref {seed}-{i}")
            else:
                kind = "episodic"
                written = memory.remember_turn(
                    f"{user} turn {i}: my {topic} problem is back, ticket {seed}-{i}", session_id=f"s-{user}"
                )
        except Exception as exc:
            with run.lock:
                run.writes.append(Event(at, (time.monotonic() - t0) * 1000, False, _short(exc)))
            time.sleep(0.05)
            continue
        with run.lock:
            run.writes.append(Event(at, (time.monotonic() - t0) * 1000, True))
            run.acked.setdefault(user, []).append((written.id, kind))


def recaller(eng: Engram, users: list[str], run: Run, seed: int) -> None:
    rng = random.Random(seed)
    while not run.stop.is_set():
        user = rng.choice(users)
        t0 = time.monotonic()
        at = run.now()
        try:
            eng.for_user(user).recall(rng.choice(TOPICS) + " problem", k=10, record_use=False)
            event = Event(at, (time.monotonic() - t0) * 1000, True)
        except Exception as exc:
            event = Event(at, (time.monotonic() - t0) * 1000, False, _short(exc))
            time.sleep(0.05)
        with run.lock:
            run.recalls.append(event)


def monitor(cluster: OpenSearchCluster, run: Run) -> None:
    while not run.stop.is_set():
        try:
            body = cluster.health(timeout_s=1)
            run.health.append((run.now(), str(body.get("status")), int(body.get("number_of_nodes", 0))))
        except Exception as exc:
            run.health.append((run.now(), f"error: {_short(exc)}", 0))
        time.sleep(0.5)


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:160]}"


def primary_holder(cluster: OpenSearchCluster) -> tuple[int, str]:
    """The node holding the memories index's primary (and the elected cluster manager's name)."""
    _, shards = cluster.request("GET", f"/_cat/shards/{PREFIX}memories*?format=json")
    primary = next(s["node"] for s in shards if s["prirep"] == "p")
    _, managers = cluster.request("GET", "/_cat/cluster_manager?format=json")
    return int(primary.removeprefix("node-")), str(managers[0]["node"])


def stats(events: list[Event]) -> dict[str, Any]:
    ok = [e.ms for e in events if e.ok]
    out: dict[str, Any] = {"ok": len(ok), "failed": len(events) - len(ok)}
    if ok:
        q = statistics.quantiles(ok, n=100, method="inclusive") if len(ok) > 1 else [ok[0]] * 99
        out |= {"p50_ms": round(q[49], 1), "p95_ms": round(q[94], 1), "max_ms": round(max(ok), 1)}
    errors = Counter(
        e.error.split(":")[0] + ": " + e.error.split(":", 1)[-1][:90] for e in events if not e.ok
    )
    if errors:
        out["errors"] = dict(errors.most_common(5))
    return out


def run_once(mode: str, args: argparse.Namespace, home: Path) -> dict[str, Any]:
    print(f"\n=== {mode}: starting 3 nodes", flush=True)
    cluster = start_cluster(home / mode, 3)
    print(f"cluster green in {cluster.startup_s:.1f} s: {cluster.url()}", flush=True)
    result: dict[str, Any] = {
        "mode": mode,
        "replicas": args.replicas,
        "cluster_start_s": round(cluster.startup_s, 1),
    }
    try:
        eng = Engram.open(
            cluster.url(),
            os_user="svc",
            os_password=USERS["svc"][0],
            os_ca_certs=str(cluster.ca),
            os_index_prefix=PREFIX,
            os_replicas=args.replicas,
            rerank=False,  # the cross-encoder would take the 2 cores from the three JVMs
        )
        users = [f"fault{u}" for u in range(args.writers)]
        with eng:
            for user in users:  # tenants' users created before the clock starts
                eng.for_user(user).remember_turn(f"{user} opened a ticket", session_id=f"s-{user}")
            run = Run()
            threads = [threading.Thread(target=monitor, args=(cluster, run), daemon=True)]
            threads += [
                threading.Thread(target=writer, args=(eng, u, run, i), daemon=True)
                for i, u in enumerate(users)
            ]
            threads += [
                threading.Thread(target=recaller, args=(eng, users, run, 100 + i), daemon=True)
                for i in range(args.recallers)
            ]
            for t in threads:
                t.start()
            time.sleep(args.before)
            victim, manager = primary_holder(cluster)
            node = cluster.nodes[victim]
            stopped_at = run.now()
            print(
                f"t={stopped_at:.1f} s: {mode} node-{victim} (memories primary; cluster manager {manager})",
                flush=True,
            )
            t0 = time.monotonic()
            (node.stop if mode == "sigterm" else node.kill)()
            result["stop_call_s"] = round(time.monotonic() - t0, 2)
            yellow_at = green_at = None
            deadline = time.monotonic() + args.green_timeout
            while time.monotonic() < deadline:
                seen = [h for h in run.health if h[0] > stopped_at + result["stop_call_s"]]
                if yellow_at is None:
                    yellow_at = next((h[0] for h in seen if h[2] == 2 and h[1] in ("yellow", "green")), None)
                green_at = next((h[0] for h in seen if h[2] == 2 and h[1] == "green"), None)
                if green_at is not None:
                    break
                time.sleep(0.5)
            print(
                f"yellow at +{_rel(yellow_at, stopped_at)} s, green at +{_rel(green_at, stopped_at)} s",
                flush=True,
            )
            time.sleep(args.after)
            run.stop.set()
            for t in threads:
                t.join(timeout=120)
            end = run.now()
            result |= verify(eng, cluster, run)
            result |= {
                "victim": f"node-{victim}",
                "victim_was_cluster_manager": manager == f"node-{victim}",
                "seconds_to_yellow": _rel(yellow_at, stopped_at),
                "seconds_to_green": _rel(green_at, stopped_at),
                "duration_s": round(end, 1),
                "health_statuses": dict(Counter(h[1] for h in run.health if h[0] > stopped_at)),
                "final_health": cluster.health(),
            }
            phases = [
                ("before_stop", 0.0, stopped_at),
                ("stop_to_yellow", stopped_at, yellow_at or end),
                ("yellow_to_green", yellow_at or end, green_at or end),
                ("after_green", green_at or end, end),
            ]
            for name, lo, hi in phases:
                result[f"writes_{name}"] = stats([e for e in run.writes if lo <= e.at < hi])
                result[f"recalls_{name}"] = stats([e for e in run.recalls if lo <= e.at < hi])
            result["writes_total"] = stats(run.writes)
            result["recalls_total"] = stats(run.recalls)
    finally:
        cluster.stop()
    return result


def _rel(at: float | None, since: float) -> float | None:
    return None if at is None else round(at - since, 1)


def verify(eng: Engram, cluster: OpenSearchCluster, run: Run) -> dict[str, Any]:
    """Every acknowledged write readable by id (public API) and counted by user and type (admin)."""
    cluster.request("POST", f"/{PREFIX}memories/_refresh")
    acked = sum(len(v) for v in run.acked.values())
    missing_by_id: list[str] = []
    short_counts: dict[str, Any] = {}
    extra = 0
    for user, rows in run.acked.items():
        ids = [i for i, _ in rows]
        present = set()
        for k in range(0, len(ids), 200):
            present |= eng.reader(user).present(ids[k : k + 200])
        missing_by_id += [i for i in ids if i not in present]
        for kind in ("episodic", "semantic"):
            want = sum(1 for _, t in rows if t == kind) + (1 if kind == "episodic" else 0)  # + the opener
            query = {
                "query": {"bool": {"filter": [{"term": {"owner": user}}, {"term": {"memory_type": kind}}]}}
            }
            _, body = cluster.request("POST", f"/{PREFIX}memories/_count", query)
            have = int(body["count"])
            if have < want:
                short_counts[f"{user}/{kind}"] = {"acknowledged": want, "stored": have}
            extra += max(0, have - want)
    return {
        "acknowledged_writes": acked,
        "lost_by_id": len(missing_by_id),
        "lost_ids_sample": missing_by_id[:10],
        "users_short_by_count": short_counts,
        "stored_but_unacknowledged": extra,  # a write that failed at the client yet landed (a retry's twin)
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="OpenSearch 3-node fault run")
    parser.add_argument("--mode", nargs="+", choices=["sigterm", "kill"], default=["sigterm", "kill"])
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--recallers", type=int, default=2)
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--before", type=float, default=20)
    parser.add_argument("--after", type=float, default=15)
    parser.add_argument("--green-timeout", type=float, default=240)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="os-fault-") as tmp:
        for mode in args.mode:
            result = run_once(mode, args, Path(tmp))
            results.append(result)
            print(json.dumps(result, indent=1), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "runs": results}, indent=2))


if __name__ == "__main__":
    main()
