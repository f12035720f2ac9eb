"""Import throughput (not a test): `engram import` of a generated user file, timed end to end.

    python bench/bench_import.py [--rows 10000] [--all]

Rows: 70% episodes (6-20 words), 25% facts (5-12 words), 5% playbooks, real English words.
The time includes process start, model load, validation, embedding and token vectors (batched) and the
chunked commits. ``--all`` times `engram import --all` of a whole-store export instead (the same rows,
imported and exported first, untimed). ``cpu_s`` is the import process's CPU time, user and system:
on a shared machine it moves less than the wall time; ``load1`` is the load average as it ends.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_engine import TextGen


def document(rows: int, gen: TextGen, rng: random.Random) -> dict:
    n_ep, n_fact = int(rows * 0.7), int(rows * 0.25)
    return {
        "user_id": "bulk",
        "episodic": [{"text": gen.sentence(6, 20), "days_ago": rng.uniform(0, 700)} for _ in range(n_ep)],
        "semantic": [{"text": gen.sentence(5, 12), "days_ago": rng.uniform(0, 700)} for _ in range(n_fact)],
        "procedural": [
            {
                "name": gen.sentence(2, 4),
                "trigger_text": gen.sentence(4, 8),
                "description": gen.sentence(6, 12),
                "steps": [{"order": 1, "instruction": gen.sentence(4, 8)}],
            }
            for _ in range(rows - n_ep - n_fact)
        ],
    }


def engram(args: list[str], home: str) -> None:
    env = dict(os.environ, ENGRAM_HOME=home)
    subprocess.run([sys.executable, "-m", "engram", *args], check=True, env=env, stdout=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description="engram import throughput")
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--all", action="store_true", help="time `engram import --all` of an export")
    args = parser.parse_args()
    rng = random.Random(1)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bulk.json"
        path.write_text(json.dumps(document(args.rows, TextGen(rng), rng)))
        command = ["import", str(path)]
        if args.all:
            engram(["import", str(path)], str(Path(tmp) / "source"))
            engram(["export", str(Path(tmp) / "bulk.jsonl")], str(Path(tmp) / "source"))
            command = ["import", "--all", str(Path(tmp) / "bulk.jsonl")]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        engram(command, str(Path(tmp) / "target"))
        elapsed = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    print(
        json.dumps(
            {
                "rows": args.rows,
                "all": args.all,
                "seconds": round(elapsed, 1),
                "rows_per_s": round(args.rows / elapsed),
                "cpu_s": round(cpu, 1),
                "load1": round(os.getloadavg()[0], 1),
            }
        )
    )


if __name__ == "__main__":
    main()
