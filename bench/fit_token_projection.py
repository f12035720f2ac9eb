"""Fit the lean token formats' codebooks (not a test): src/engram/data/colbert_codebook_v{1,2}.npz.

The texts are bench/data's chat turns (group_chats.json and updates.json: synthetic chats written for
Engram's benchmarks; never the LoCoMo data, never the evaluation corpus the gate reads). Each is encoded
as a document by the packaged ColBERT backbone; the projection is the top principal directions of the
token vectors' uncentred second moment ``X^T X``: the orthonormal basis of that size that keeps the
most of the vectors' squared length, hence of their dot products, which is what MaxSim reads. With it,
the projected vectors' mean and per-dimension standard deviation ("spread"): the lean format stores
each token's distance from that mean in units of the spread (engram.retrieval.token_format).
Version 2 (``--version 2``, the one written) keeps all 384 principal directions (a rotation), deals
them round robin into 64 groups of 6 and fits 256 k-means centroids per group (product quantisation:
engram.retrieval.token_pq). Deterministic given the model and the data (eigenvector signs fixed:
largest component positive; k-means seeded).

    python bench/fit_token_projection.py [--version 1|2] [--dims 128] [--out PATH.npz]
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


def kmeans(x: np.ndarray, k: int, rounds: int, rng: np.random.Generator) -> np.ndarray:
    """Lloyd's k-means from k distinct rows; an emptied centroid is reseeded from a random row."""
    c = x[rng.choice(len(x), k, replace=False)].copy()
    for _ in range(rounds):
        nearest = np.argmin((c**2).sum(axis=1) - 2 * x @ c.T, axis=1)
        for j in range(k):
            members = x[nearest == j]
            c[j] = members.mean(axis=0) if len(members) else x[rng.integers(len(x))]
    return c


def fit_product_quantiser(
    rows: np.ndarray, directions: np.ndarray, groups: int = 64, rounds: int = 15
) -> tuple[np.ndarray, np.ndarray]:
    """The rotation (the principal directions, columns dealt round robin so group g holds directions
    g, g + groups, g + 2 groups, ...: each group gets strong and weak ones) and 256 centroids a group,
    shape (groups, 256, dims / groups)."""
    width = directions.shape[1] // groups
    order = [g + groups * j for g in range(groups) for j in range(width)]
    rotation = np.ascontiguousarray(directions[:, order], dtype=np.float32)
    rotated = np.asarray(rows, dtype=np.float32) @ rotation
    rng = np.random.default_rng(11)
    centroids = np.stack(
        [
            kmeans(np.ascontiguousarray(rotated[:, g * width : (g + 1) * width]), 256, rounds, rng)
            for g in range(groups)
        ]
    )
    return rotation, centroids.astype(np.float32)


def main() -> None:
    from engram.providers.onnx import OnnxTokenEncoder

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", type=int, choices=(1, 2), default=2)
    parser.add_argument("--dims", type=int, default=128, help="version 1: dimensions kept")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    out = args.out or ROOT / f"src/engram/data/colbert_codebook_v{args.version}.npz"
    encoder = OnnxTokenEncoder.packaged()
    cache: dict[str, np.ndarray] = {}

    def encode(text: str) -> np.ndarray:
        if text not in cache:
            cache[text] = encoder.encode_documents([text])[0]
        return cache[text]

    if args.version == 2:
        rows = fit_rows(encode)
        rotation, centroids = fit_product_quantiser(rows, principal_directions(encode, 384))
        np.savez(out, rotation=rotation, centroids=centroids)
        print(
            f"{out}: rotation {rotation.shape}, centroids {centroids.shape}, from {len(rows)} token vectors"
        )
        return
    projection = principal_directions(encode, args.dims)
    projected = fit_rows(encode) @ projection
    mean = projected.mean(axis=0)
    spread = (projected - mean).std(axis=0) + 1e-6
    np.savez(out, projection=projection, mean=mean.astype(np.float32), spread=spread.astype(np.float32))
    print(f"{out}: {projection.shape}, from {len(projected)} token vectors")


if __name__ == "__main__":
    main()
