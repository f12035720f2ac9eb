"""Import throughput (not a test): `engram import` of a generated user file, timed end to end.

    python bench/bench_import.py [--rows 10000]

Rows: 70% episodes (6-20 words), 25% facts (5-12 words), 5% playbooks, real English words.
The time includes process start, model load, validation, embedding (batched) and the single commit.
"""

from __future__ import annotations

import argparse
import json
import os
import random
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


def main() -> None:
    parser = argparse.ArgumentParser(description="engram import throughput")
    parser.add_argument("--rows", type=int, default=10_000)
    args = parser.parse_args()
    rng = random.Random(1)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bulk.json"
        path.write_text(json.dumps(document(args.rows, TextGen(rng), rng)))
        env = dict(os.environ, ENGRAM_HOME=tmp)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "engram", "import", str(path)], check=True, env=env)
        elapsed = time.perf_counter() - start
    print(
        json.dumps(
            {"rows": args.rows, "seconds": round(elapsed, 1), "rows_per_s": round(args.rows / elapsed)}
        )
    )


if __name__ == "__main__":
    main()
