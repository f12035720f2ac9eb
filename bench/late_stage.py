"""The late-interaction stage alone, per token format (not a test): MaxSim of one query against 160
candidates, timed in one process, formats alternating round by round so they share the machine's load.

Candidates are bench/data chat turns encoded by the packaged ColBERT backbone (so their token counts
are real), stored as each format stores them; the query is a 12-word question. Prints each format's
bytes a row and the stage's min / p50 / p95 in ms.

    PYTHONPATH=src python bench/late_stage.py [--rounds 300] [--candidates 160]
"""

from __future__ import annotations

import argparse
import statistics
import time

from fit_token_projection import chat_texts

from engram.providers.onnx import OnnxTokenEncoder
from engram.retrieval.late_interaction import pack_all, token_maxima
from engram.retrieval.token_format import LEAN, encode_lean_many


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--candidates", type=int, default=160)
    args = parser.parse_args()
    encoder = OnnxTokenEncoder.packaged()
    matrices = encoder.encode_documents(chat_texts()[: args.candidates])
    query = encoder.encode_query("which recovery gadget did I buy for my knee after the marathon?")
    formats = {
        "int8": pack_all(matrices),
        "lean v1 (pca128 c4)": encode_lean_many(matrices),
        "lean v2 (pq64)": pack_all(matrices, LEAN.model),
    }
    times: dict[str, list[float]] = {name: [] for name in formats}
    for _ in range(args.rounds):
        for name, blobs in formats.items():
            start = time.perf_counter()
            token_maxima(query, blobs, encoder.dim)
            times[name].append((time.perf_counter() - start) * 1000)
    tokens = statistics.fmean(len(m) for m in matrices)
    print(f"{args.candidates} candidates, {tokens:.1f} tokens a row, query {len(query)} tokens")
    for name, blobs in formats.items():
        t = sorted(times[name])
        row_bytes = statistics.fmean(len(b) for b in blobs)
        p50, p95 = t[len(t) // 2], t[int(len(t) * 0.95)]
        print(f"{name:22} {row_bytes:7.0f} bytes a row   min {t[0]:.2f}  p50 {p50:.2f}  p95 {p95:.2f} ms")


if __name__ == "__main__":
    main()
