"""Fit the lean token format's codebook (not a test): src/engram/data/colbert_codebook_v1.npz.

The texts are bench/data's chat turns (group_chats.json and updates.json: synthetic chats written for
Engram's benchmarks; never the LoCoMo data, never the evaluation corpus the gate reads). Each is encoded
as a document by the packaged ColBERT backbone; the projection is the top principal directions of the
token vectors' uncentred second moment ``X^T X``: the orthonormal basis of that size that keeps the
most of the vectors' squared length, hence of their dot products, which is what MaxSim reads. With it,
the projected vectors' mean and per-dimension standard deviation ("spread"): the lean format stores
each token's distance from that mean in units of the spread (engram.retrieval.token_format).
Deterministic given the model and the data (eigenvector signs fixed: largest component positive).

    python bench/fit_token_projection.py [--dims 128] [--out src/engram/data/colbert_codebook_v1.npz]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def chat_texts() -> list[str]:
    texts = []
    for chat in json.loads((ROOT / "bench/data/group_chats.json").read_text()):
        texts += [f"{t['speaker']}: {t['text']}" for t in chat["turns"]]
    for user in json.loads((ROOT / "bench/data/updates.json").read_text())["users"]:
        texts += [t["text"] for t in user["turns"]]
    return texts


def eval_corpus_texts() -> list[str]:
    """The packaged evaluation corpus's rows as the token encoder reads them (``search_text_of``)."""
    texts = []
    for path in sorted((ROOT / "src/engram/eval/data/corpus").glob("*.json")):
        data = json.loads(path.read_text())
        records = (
            data
            if isinstance(data, list)
            else [r for k in ("episodic", "semantic", "procedural") for r in data.get(k, [])]
        )
        for r in records:
            parts = [r.get(k) for k in ("title", "name", "trigger_text", "description", "text")]
            texts.append("\n".join(p for p in parts if isinstance(p, str) and p))
    return texts


def fit_rows(encode: Callable[[str], np.ndarray], with_eval_corpus: bool = False) -> np.ndarray:
    texts = chat_texts() + (eval_corpus_texts() if with_eval_corpus else [])
    return np.concatenate([encode(t) for t in texts]).astype(np.float64)


def principal_directions(
    encode: Callable[[str], np.ndarray], dims: int, with_eval_corpus: bool = False
) -> np.ndarray:
    rows = fit_rows(encode, with_eval_corpus)
    _, vectors = np.linalg.eigh(rows.T @ rows)
    top = vectors[:, ::-1][:, :dims]
    signs = np.sign(top[np.abs(top).argmax(axis=0), np.arange(dims)])
    return (top * signs).astype(np.float32)


def main() -> None:
    from engram.providers.onnx import OnnxTokenEncoder

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, default=128)
    parser.add_argument("--out", type=Path, default=ROOT / "src/engram/data/colbert_codebook_v1.npz")
    args = parser.parse_args()
    encoder = OnnxTokenEncoder.packaged()
    cache: dict[str, np.ndarray] = {}

    def encode(text: str) -> np.ndarray:
        if text not in cache:
            cache[text] = encoder.encode_documents([text])[0]
        return cache[text]

    projection = principal_directions(encode, args.dims)
    projected = fit_rows(encode) @ projection
    mean = projected.mean(axis=0)
    spread = (projected - mean).std(axis=0) + 1e-6
    np.savez(args.out, projection=projection, mean=mean.astype(np.float32), spread=spread.astype(np.float32))
    print(f"{args.out}: {projection.shape}, from {len(projected)} token vectors")


if __name__ == "__main__":
    main()
