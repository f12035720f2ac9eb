"""The mem0 side of bench/vs_mem0.py: a worker run by the mem0 venv's Python, never imported by Engram.

It speaks JSON lines: one request per line on stdin, one answer per line on stdout (anything mem0 or its
libraries print goes to stderr instead, so the protocol stays clean). Requests:

    {"op": "info"}                                  -> versions and the embedder's description
    {"op": "embed", "texts": [...], "query": bool}  -> {"vectors": [[...], ...]} (the equivalence check)
    {"op": "load", "store": s, "user": u, "turns": [{"key", "text"}, ...]}
                                    -> one add(text, user_id=u, infer=False) a turn, into the mem0 Memory
                                       named s (made on first use: its own Qdrant folder and history)
    {"op": "search", "store": s, "user": u, "query": q, "k": 10}
                                    -> {"keys": [...], "ms": time of Memory.search inside this worker}
    {"op": "drop", "store": s}      -> closes that Memory
    {"op": "quit"}

The embedder is Engram's packaged bge-small-en-v1.5 INT8 ONNX model, loaded from the very files Engram
verified (the bench passes their folder) with the same onnxruntime and tokenizers versions, the same CLS
pooling, L2 normalisation, 512-token truncation and bge query prefix (engram.providers.onnx.OnnxEmbedder).
mem0's config validator knows only its built-in providers, so the Memory is built with a placeholder
OpenAI embedder (never called) and its ``embedding_model`` is replaced by that class before any use.
No LLM is ever called: every add is ``infer=False``; the placeholder key only satisfies the constructors.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PROTOCOL = sys.stdout
sys.stdout = sys.stderr  # mem0 prints notices; only answers go to PROTOCOL

TMP = Path(tempfile.mkdtemp(prefix="engram-bench-mem0-"))  # removed by main() on the way out
os.environ.setdefault("MEM0_DIR", str(TMP / "mem0-home"))  # not ~/.mem0
os.environ.setdefault("MEM0_TELEMETRY", "False")  # no posthog events (and no network anyway)
os.environ.setdefault("OPENAI_API_KEY", "unused-no-llm-is-called")

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
from mem0 import Memory  # noqa: E402
from mem0.embeddings.base import EmbeddingBase  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

BGE_QUERY_PREFIX = "Represent this sentence for searching relevant passages: "


class OnnxBgeEmbedding(EmbeddingBase):
    """A mem0 embedder over Engram's ONNX bge-small files (what OnnxEmbedder computes for one text)."""

    def __init__(self, model_dir: Path, threads: int) -> None:
        super().__init__(None)
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(512)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(
            str(model_dir / "model.onnx"), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self.dim = int(self.session.get_outputs()[0].shape[-1])
        self.config.embedding_dims = self.dim

    def vector(self, text: str) -> list[float]:
        enc = self.tokenizer.encode(text)
        ids = np.array([enc.ids], dtype=np.int64)
        inputs = {
            "input_ids": ids,
            "attention_mask": np.ones_like(ids),
            "token_type_ids": np.array([enc.type_ids], dtype=np.int64),
        }
        cls = self.session.run(None, inputs)[0][0, 0, :]
        return (cls / max(float(np.linalg.norm(cls)), 1e-12)).tolist()

    def embed(self, text: str, memory_action: str | None = None) -> list[float]:
        # bge's instruction goes on queries only, as in Engram.
        return self.vector(BGE_QUERY_PREFIX + text if memory_action == "search" else text)


class Worker:
    def __init__(self, model_dir: Path, threads: int) -> None:
        self.embedder = OnnxBgeEmbedding(model_dir, threads)
        self.memories: dict[str, Any] = {}

    def new_memory(self, store: str) -> Any:
        """mem0 OSS's local mode: Qdrant in-process on a folder of its own, SQLite history."""
        folder = TMP / store
        config = {
            "vector_store": {
                "provider": "qdrant",
                "config": {
                    "collection_name": "bench",
                    "embedding_model_dims": self.embedder.dim,
                    "path": str(folder / "qdrant"),
                },
            },
            "embedder": {"provider": "openai", "config": {"embedding_dims": self.embedder.dim}},
            "history_db_path": str(folder / "history.db"),
        }
        folder.mkdir(parents=True, exist_ok=True)
        memory = Memory.from_config(config)
        memory.embedding_model = self.embedder
        return memory

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req["op"]
        if op == "info":
            from importlib.metadata import version

            return {
                "versions": {
                    p: version(p) for p in ("mem0ai", "qdrant-client", "onnxruntime", "tokenizers", "numpy")
                },
                "python": sys.version.split()[0],
                "dim": self.embedder.dim,
            }
        if op == "embed":
            action = "search" if req.get("query") else "add"
            return {"vectors": [self.embedder.embed(t, action) for t in req["texts"]]}
        if op == "load":
            user, store = req["user"], req["store"]
            if store not in self.memories:
                self.memories[store] = self.new_memory(store)
            memory = self.memories[store]
            started = time.perf_counter()
            for turn in req["turns"]:
                memory.add(turn["text"], user_id=user, metadata={"dia_id": turn["key"]}, infer=False)
            return {"load_s": time.perf_counter() - started, "count": len(req["turns"])}
        if op == "search":
            memory = self.memories[req["store"]]
            started = time.perf_counter()
            found = memory.search(req["query"], top_k=req.get("k", 10), filters={"user_id": req["user"]})
            ms = 1000 * (time.perf_counter() - started)
            keys = [(hit.get("metadata") or {}).get("dia_id") for hit in found["results"]]
            return {"keys": keys, "ms": ms}
        if op == "drop":
            memory = self.memories.pop(req["store"], None)
            if memory is not None:
                memory.close()
            return {}
        raise ValueError(f"unknown op {op!r}")


def main() -> None:
    try:
        worker = Worker(Path(sys.argv[1]), int(sys.argv[2]))
        for line in sys.stdin:
            req = json.loads(line)
            if req["op"] == "quit":
                break
            try:
                answer = {"ok": True, **worker.handle(req)}
            except Exception as exc:  # reported to the bench, which stops
                answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            PROTOCOL.write(json.dumps(answer) + "\n")
            PROTOCOL.flush()
        for store in list(worker.memories):
            worker.handle({"op": "drop", "store": store})
    finally:
        shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    main()
