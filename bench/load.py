"""Load benchmark (not a test): concurrent clients against `engram serve`, at several client counts.

    python bench/load.py --clients 1 8 32 128 --seconds 60            # starts its own server
    python bench/load.py --clients 32 --workers 2 --rerank-queue 0    # server options to compare
    python bench/load.py --url http://127.0.0.1:8765 --admin-key egk_... --pid 1234 --clients 32

Each client gets its own user and key, then loops over a mix of 50% remember (POST /v1/turns),
35% recall (POST /v1/recall) and 15% write (POST /v1/memories). For each client count it prints one
JSON object: throughput, errors and 5xx, latency p50/p95/p99 per operation, the server's CPU use
(its processes' CPU seconds over the wall time, in cores), how many recalls skipped the
cross-encoder under load (hits whose explain says "rerank": "skipped: load") or had nothing for it to
reorder (a clear leader, judged alone for its confidence, or calibrated as such when shed: since
2026-12-02; before, such raw-turn recalls skipped the stage and fact windows judged alone counted as
reranked), and of the recalls where it could change the answer, the share that got it. Traffic goes
to loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import httpx

WORDS = [
    "sensor",
    "hub",
    "kitchen",
    "battery",
    "dog",
    "cable",
    "zigbee",
    "thread",
    "router",
    "garden",
    "camera",
    "thermostat",
    "heating",
    "edinburgh",
    "bristol",
    "climbing",
    "coffee",
    "python",
    "version",
    "error",
    "firmware",
    "reset",
    "pairing",
    "offline",
    "door",
]


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 14)))


def start_server(
    extra_env: dict[str, str] | None = None, workers: int = 1
) -> tuple[subprocess.Popen[str], str, str]:
    """`engram serve` on a fresh temporary store; returns (process, url, admin key)."""
    home = tempfile.mkdtemp(prefix="engram-bench-")
    port = 8700 + random.randint(0, 250)
    env = dict(os.environ, ENGRAM_HOME=home, **(extra_env or {}))
    proc = subprocess.Popen(
        # No access log: a line per request would cost throughput and, unread, fill this pipe.
        [
            sys.executable,
            "-m",
            "engram",
            "serve",
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--log-level",
            "warning",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 180
    admin_key = None
    while admin_key is None and time.monotonic() < deadline:
        match = re.search(r"(egk_\S+)", proc.stdout.readline())
        admin_key = match.group(1) if match else None
    if admin_key is None:
        proc.kill()
        raise SystemExit("the server printed no admin key")
    url = f"http://127.0.0.1:{port}"
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.2)
    return proc, url, admin_key


def cpu_seconds(pid: int | None) -> float | None:
    """CPU seconds (user + system) of a process and its children, from /proc."""
    if pid is None:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    pids = {pid}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                pids.add(int(entry.name))
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


async def client_loop(i: int, url: str, key: str, stop: float, out: dict) -> None:
    rng = random.Random(i)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=120) as http:
        while time.monotonic() < stop:
            roll = rng.random()
            if roll < 0.5:
                op, path, body = "remember", "/v1/turns", {"text": sentence(rng)}
            elif roll < 0.85:
                op, path, body = "recall", "/v1/recall", {"query": sentence(rng)[:60], "k": 10}
            else:
                op, path, body = "write", "/v1/memories", {"text": sentence(rng), "fact_type": "preference"}
            start = time.perf_counter()
            try:
                response = await http.post(path, json=body)
                ok = response.is_success
                out["5xx"] += response.status_code >= 500
                if ok and op == "recall":
                    hits = response.json()["hits"]
                    out[cross_encoder_use(hits)] += 1
            except httpx.HTTPError:
                ok = False
            out["lat"][op].append((time.perf_counter() - start) * 1000)
            out["errors"] += not ok


def cross_encoder_use(hits: list[dict]) -> str:
    """What the cross-encoder did for one recall, from its hits' explain: "uncontested" (a clear
    leader, judged alone for its confidence or, shed, calibrated as such: nothing for it to change),
    "reranked", "shed" (skipped under load) or "none" (no hit, or its stage failed)."""
    said = hits[0]["explain"].get("rerank") if hits else None
    if hits and str(hits[0]["explain"].get("rerank_contenders", "")).startswith("the leader only"):
        return "uncontested"
    if said == "skipped: load":
        return "shed"
    return "reranked" if any(isinstance(h["explain"].get("rerank"), float) for h in hits) else "none"


def pct(values: list[float], q: int) -> float:
    if len(values) < 2:
        return round(values[0], 1) if values else 0.0
    return round(statistics.quantiles(values, n=100, method="inclusive")[q - 1], 1)


async def run(url: str, admin_key: str, clients: int, seconds: float, pid: int | None, tag: str) -> dict:
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {admin_key}"}) as admin:
        keys = []
        for i in range(clients):
            r = await admin.post("/v1/keys", json={"user_id": f"load-{tag}-{i}", "label": "load test"})
            r.raise_for_status()
            keys.append(r.json()["key"])
    out: dict = {"lat": defaultdict(list), "errors": 0, "5xx": 0}
    out.update(dict.fromkeys(("shed", "reranked", "uncontested", "none"), 0))
    cpu_before, started = cpu_seconds(pid), time.monotonic()
    await asyncio.gather(*(client_loop(i, url, k, started + seconds, out) for i, k in enumerate(keys)))
    elapsed = time.monotonic() - started
    cpu_after = cpu_seconds(pid)
    everything = [v for values in out["lat"].values() for v in values]
    report: dict = {
        "clients": clients,
        "seconds": round(elapsed, 1),
        "requests": len(everything),
        "throughput_rps": round(len(everything) / elapsed, 1),
        "errors": out["errors"],
        "5xx": out["5xx"],
        "recalls_shed": out["shed"],
        "recalls_reranked": out["reranked"],
        "recalls_uncontested": out["uncontested"],
        "recalls_without_cross_encoder_score": out["none"],
        # of the recalls where the cross-encoder could change the answer, the share that got it
        "contested_reranked_share": round(out["reranked"] / max(1, out["reranked"] + out["shed"]), 3),
        "server_cpu_cores": None
        if cpu_before is None or cpu_after is None
        else round((cpu_after - cpu_before) / elapsed, 2),
    }
    for op, values in [*sorted(out["lat"].items()), ("all", everything)]:
        report[op] = {
            "n": len(values),
            "p50_ms": pct(values, 50),
            "p95_ms": pct(values, 95),
            "p99_ms": pct(values, 99),
        }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description="Engram load benchmark")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32, 128])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--url", help="a running server (else one is started on a temp store)")
    parser.add_argument("--admin-key", help="with --url")
    parser.add_argument("--pid", type=int, help="with --url: the server's pid, for CPU use")
    parser.add_argument("--workers", type=int, default=1, help="server processes of the started server")
    parser.add_argument("--rerank-queue", type=int, help="ENGRAM_RERANK_QUEUE of the started server")
    parser.add_argument(
        "--recall-concurrency", type=int, help="ENGRAM_RECALL_CONCURRENCY of the started server"
    )
    args = parser.parse_args()
    proc = None
    if args.url:
        if not args.admin_key:
            parser.error("--url needs --admin-key")
        url, admin_key, pid = args.url, args.admin_key, args.pid
    else:
        env = {
            name: str(value)
            for name, value in [
                ("ENGRAM_RERANK_QUEUE", args.rerank_queue),
                ("ENGRAM_RECALL_CONCURRENCY", args.recall_concurrency),
            ]
            if value is not None
        }
        proc, url, admin_key = start_server(env, workers=args.workers)
        pid = proc.pid
    try:
        for n in args.clients:
            report = asyncio.run(run(url, admin_key, n, args.seconds, pid, tag=f"{n}-{int(time.time())}"))
            report["server"] = {
                "workers": args.workers,
                "rerank_queue": args.rerank_queue,
                "recall_concurrency": args.recall_concurrency,
            }
            print(json.dumps(report), flush=True)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
