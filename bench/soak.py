"""Soak benchmark (not a test): a long mixed load on one `engram serve`, reported window by window.

    python bench/soak.py --minutes 30 --clients 32            # starts its own server on a temp store
    python bench/soak.py --url http://127.0.0.1:8765 --admin-key egk_... --pid 1234   # a running one

Same traffic as bench/load.py (50% remember, 35% recall, 15% write; one user per client). Every
``--window`` seconds it prints one JSON line: requests and errors in that window, p50/p95 per
operation, and the server's resident memory (RSS, from /proc) — so a leak or a tail that grows with
time shows as a trend, not as one average. The last line is the summary over the whole run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from load import client_loop, start_server  # bench scripts run as files, not as a package


def rss_mb(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def pct(values: list[float], q: int) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return round(values[0], 1)
    return round(statistics.quantiles(values, n=100, method="inclusive")[q - 1], 1)


class CurrentWindow:
    """What the clients write into: the window being filled, swapped by the reporter every window."""

    def __init__(self) -> None:
        self.window = fresh_window()

    def __getitem__(self, key: str) -> Any:
        return self.window[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.window[key] = value


def fresh_window() -> dict:
    return {"lat": defaultdict(list), "errors": 0, "5xx": 0, "shed": 0}


async def run(args: argparse.Namespace, url: str, admin_key: str, pid: int | None) -> None:
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {admin_key}"}) as admin:
        keys = []
        for i in range(args.clients):
            r = await admin.post("/v1/keys", json={"user_id": f"soak-{i}", "label": "soak"})
            r.raise_for_status()
            keys.append(r.json()["key"])
    started = time.monotonic()
    stop = started + args.minutes * 60
    current = CurrentWindow()
    totals = {"requests": 0, "errors": 0, "5xx": 0}
    everything: dict[str, list[float]] = defaultdict(list)
    rss_seen: list[float] = []
    tasks = [asyncio.create_task(client_loop(i, url, k, stop, current)) for i, k in enumerate(keys)]
    while time.monotonic() < stop:
        await asyncio.sleep(min(args.window, max(0.0, stop - time.monotonic())))
        done, current.window = current.window, fresh_window()
        line = {
            "t_s": round(time.monotonic() - started),
            "requests": sum(len(v) for v in done["lat"].values()),
            "errors": done["errors"],
            "5xx": done["5xx"],
            "rss_mb": rss_mb(pid),
        }
        for op, values in sorted(done["lat"].items()):
            line[op] = {"p50_ms": pct(values, 50), "p95_ms": pct(values, 95)}
            everything[op] += values
        if line["rss_mb"] is not None:
            rss_seen.append(line["rss_mb"])
        for key in totals:
            totals[key] += line[key]
        print(json.dumps(line), flush=True)
    await asyncio.gather(*tasks)
    elapsed = time.monotonic() - started
    summary = {
        "summary": True,
        "clients": args.clients,
        "minutes": round(elapsed / 60, 1),
        **totals,
        "throughput_rps": round(totals["requests"] / elapsed, 1),
        "rss_mb_first_last_max": [rss_seen[0], rss_seen[-1], max(rss_seen)] if rss_seen else None,
    }
    for op, values in sorted(everything.items()):
        summary[op] = {"p50_ms": pct(values, 50), "p95_ms": pct(values, 95), "p99_ms": pct(values, 99)}
    print(json.dumps(summary), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description="Engram soak benchmark")
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--window", type=float, default=60, help="seconds per report line")
    parser.add_argument("--url", help="a running server (else one is started on a temp store)")
    parser.add_argument("--admin-key", help="with --url")
    parser.add_argument("--pid", type=int, help="with --url: the server's pid, for RSS")
    args = parser.parse_args()
    if args.url:
        if not args.admin_key:
            parser.error("--url needs --admin-key")
        asyncio.run(run(args, args.url, args.admin_key, args.pid))
        return
    proc, url, admin_key = start_server()
    try:
        asyncio.run(run(args, url, admin_key, proc.pid))
    finally:
        proc.terminate()
        proc.wait(30)


if __name__ == "__main__":
    main()
