"""Load script (not a test): N concurrent clients for M seconds against a running `engram serve`.

    ENGRAM_HOME=/tmp/load engram serve --port 8765        # prints the admin key on first start
    python bench/load.py --url http://127.0.0.1:8765 --admin-key egk_... --clients 32 --seconds 60

Each client gets its own user and key, then loops over a mix of 50% remember (POST /v1/turns),
35% recall (POST /v1/recall) and 15% write (POST /v1/memories). Prints throughput, latency
p50/p95/p99 per operation and overall, and the error count (any non-2xx or transport error).
Traffic goes to the given URL only; keep it on loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from collections import defaultdict

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


async def client_loop(i: int, url: str, key: str, stop: float, max_requests: int, out: dict) -> None:
    rng = random.Random(i)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as http:
        for _ in range(max_requests):
            if time.monotonic() >= stop:
                return
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
                if response.status_code >= 500:
                    out["5xx"] += 1
            except httpx.HTTPError:
                ok = False
            out["lat"][op].append((time.perf_counter() - start) * 1000)
            if not ok:
                out["errors"] += 1


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


async def main() -> None:
    parser = argparse.ArgumentParser(description="Engram load test")
    parser.add_argument("--url", default="http://127.0.0.1:8765")
    parser.add_argument("--admin-key", required=True)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--max-requests", type=int, default=100_000, help="per client, a hard bound")
    args = parser.parse_args()
    async with httpx.AsyncClient(
        base_url=args.url, headers={"Authorization": f"Bearer {args.admin_key}"}
    ) as admin:
        keys = []
        for i in range(args.clients):
            r = await admin.post("/v1/keys", json={"user_id": f"load-{i}", "label": "load test"})
            r.raise_for_status()
            keys.append(r.json()["key"])
    out: dict = {"lat": defaultdict(list), "errors": 0, "5xx": 0}
    started = time.monotonic()
    stop = started + args.seconds
    await asyncio.gather(
        *(client_loop(i, args.url, k, stop, args.max_requests, out) for i, k in enumerate(keys))
    )
    elapsed = time.monotonic() - started
    everything = [v for values in out["lat"].values() for v in values]
    report = {
        "clients": args.clients,
        "seconds": round(elapsed, 1),
        "requests": len(everything),
        "throughput_rps": round(len(everything) / elapsed, 1),
        "errors": out["errors"],
        "5xx": out["5xx"],
    }
    for op, values in [*sorted(out["lat"].items()), ("all", everything)]:
        report[op] = {
            "n": len(values),
            "p50_ms": round(pct(values, 50), 1),
            "p95_ms": round(pct(values, 95), 1),
            "p99_ms": round(pct(values, 99), 1),
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
