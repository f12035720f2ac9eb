"""Token-vector format sweep (not a test): the same dev questions under several lossy formats.

Each format is a function from a document's float32 token matrix (and its token ids) to the matrix
recall would score after storage: rows pruned, projected to fewer dimensions, quantised and
dequantised; queries get the same projection. All model outputs are cached on disk (``--cache``), so
each format costs one store load and the recalls' own work, not the models: the first run fills the
cache (~minutes), the others take seconds to a minute each. Dev sets only: LoCoMo dev (five
conversations, read in place from ../shared/data), own dev, agent-voice dev.

    python bench/lean_sweep.py [--formats int8-384 pca96-int4 ...] [--sets locomo own agent]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import statistics
import tempfile
import unicodedata
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from fit_token_projection import chat_texts, fit_product_quantiser, fit_rows, principal_directions

from engram import Engram
from engram.eval.runner import DEFAULT_EVAL_DIR, import_eval_corpus, read_questions, run_questions
from engram.providers.onnx import OnnxEmbedder, OnnxTokenEncoder
from engram.providers.onnx_rerank import OnnxCrossEncoder
from engram.settings import EngramSettings
from engram.storage.sqlite import SQLiteStore
from engram.text import STOPWORDS

Matrix = npt.NDArray[np.float32]
ROOT = Path(__file__).resolve().parents[1]


class DiskCache:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict[str, Any] = pickle.loads(path.read_bytes()) if path.exists() else {}
        self.dirty = False

    def get(self, key: str, make: Callable[[], Any]) -> Any:
        if key not in self.data:
            self.data[key] = make()
            self.dirty = True
        return self.data[key]

    def save(self) -> None:
        if self.dirty:
            self.path.write_bytes(pickle.dumps(self.data))
            self.dirty = False


def _key(*parts: str) -> str:
    return hashlib.sha1("\x00".join(parts).encode()).hexdigest()


class CachedEmbedder:
    def __init__(self, inner: OnnxEmbedder, cache: DiskCache) -> None:
        self.inner, self.cache = inner, cache
        self.name, self.dim = inner.name, inner.dim

    def embed_documents(self, texts: Sequence[str]) -> Matrix:
        return np.stack(
            [self.cache.get(_key("d", t), lambda t=t: self.inner.embed_documents([t])[0]) for t in texts]
        )

    def embed_query(self, text: str) -> Matrix:
        return self.cache.get(_key("q", text), lambda: self.inner.embed_query(text))  # type: ignore[no-any-return]


class CachedReranker:
    def __init__(self, inner: OnnxCrossEncoder, cache: DiskCache) -> None:
        self.inner, self.cache = inner, cache
        self.name = inner.name

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        missing = [p for p in passages if _key("r", query, p) not in self.cache.data]
        if missing:
            for p, s in zip(missing, self.inner.score(query, missing), strict=True):
                self.cache.data[_key("r", query, p)] = s
            self.cache.dirty = True
        return [self.cache.data[_key("r", query, p)] for p in passages]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


# -- formats -------------------------------------------------------------------------------------
Format = Callable[[Matrix, list[str]], Matrix]  # (document tokens, their wordpieces) -> scored matrix


def int_quantise(m: Matrix, bits: int) -> Matrix:
    """Symmetric per-token quantisation to ``bits`` bits (levels -L..L, L = 2^(bits-1) - 1)."""
    levels = 2 ** (bits - 1) - 1
    scale = np.abs(m).max(axis=1, keepdims=True) / levels
    scale[scale == 0] = 1.0
    scale = scale.astype(np.float16).astype(np.float32)
    return (np.clip(np.round(m / scale), -levels, levels) * scale).astype(np.float32)


def keep_rows(pieces: list[str], rule: str) -> list[int]:
    """Rows kept under a rule: none; specials (drop [CLS], the marker, [SEP]); punct / stop (those and
    punctuation / and stop words); punctonly / stoponly (the same, but [CLS], marker, [SEP] kept)."""
    last = len(pieces) - 1
    kept = []
    for i, piece in enumerate(pieces):
        special = i in (0, 1) or i == last  # [CLS], the marker, [SEP]
        if special and rule in ("specials", "punct", "stop"):
            continue
        word = piece.removeprefix("##")
        punct = not special and all(unicodedata.category(c)[0] in "PS" for c in word)
        if rule != "none" and rule != "specials" and punct:
            continue
        stop = not special and not piece.startswith("##") and word.lower() in STOPWORDS
        if rule in ("stop", "stoponly") and stop:
            continue
        kept.append(i)
    return kept or list(range(len(pieces)))


def make_format(name: str, projections: dict[str, Matrix]) -> tuple[Format, Matrix | None, float]:
    """``prune-proj-quant``: prune none|specials|punct|stop, proj full|pca128|pca96|rand128, quant
    int8|int4|int2 (per token, symmetric), c4|c2 (the residual from the fit's mean, each dimension
    divided by its spread, then per token: one centroid), k4|k2 (the residual from the nearest of 256
    k-means centroids, 1 more byte a token). Returns the format, the query projection and the bytes a
    kept token costs."""
    prune, proj, quant = name.split("-")
    if quant.startswith("pq"):
        groups, flags = int(quant[2:].rstrip("ns")), quant[2:].lstrip("0123456789")
        return pq_format(prune, proj, groups, projections, "n" in flags, "s" in flags)
    projection = None if proj == "full" else projections[proj]
    dims = 384 if projection is None else projection.shape[1]
    bits = int(quant[-1])
    token_bytes = dims * bits / 8 + (4 if name == "none-full-int8" else 2) + (1 if quant[0] == "k" else 0)

    def apply(m: Matrix, pieces: list[str]) -> Matrix:
        m = m[keep_rows(pieces, prune)]
        if projection is not None:
            m = m @ projection
        if quant.startswith("int"):
            return int_quantise(m, bits)
        if quant[0] == "c":
            mean, spread = projections[f"{proj}:mean"], projections[f"{proj}:std"]
            return (int_quantise((m - mean) / spread, bits) * spread + mean).astype(np.float32)
        centroids, spread = projections[f"{proj}:centroids"], projections[f"{proj}:rstd"]
        nearest = centroids[np.argmax(m @ centroids.T - 0.5 * (centroids**2).sum(axis=1), axis=1)]
        return (int_quantise((m - nearest) / spread, bits) * spread + nearest).astype(np.float32)

    return apply, projection, token_bytes


def pq_format(
    prune: str,
    proj: str,
    groups: int,
    projections: dict[str, Matrix],
    unit: bool = False,
    exact_specials: bool = False,
) -> tuple[Format, Matrix, float]:
    """Product quantisation (engram.retrieval.token_pq): ``proj`` full (the model's own dims) or id384
    (the principal directions), dealt round robin into ``groups`` groups, 256 centroids each; with
    ``exact_specials`` ("pq64s") [CLS] and the marker stay int8 (388 bytes each, the rest 64)."""
    key = f"pq:{proj}:{groups}"
    if key not in projections:
        directions = np.eye(384, dtype=np.float32) if proj == "full" else projections[proj]
        projections[key + ":rot"], projections[key] = fit_product_quantiser(
            projections["fit_rows"], directions, groups
        )
    rotation, books = projections[key + ":rot"], projections[key]
    width = 384 // groups

    def apply(m: Matrix, pieces: list[str]) -> Matrix:
        y = m[keep_rows(pieces, prune)] @ rotation
        out = np.empty_like(y)
        for g in range(groups):
            part, c = y[:, g * width : (g + 1) * width], books[g]
            out[:, g * width : (g + 1) * width] = c[np.argmin((c**2).sum(axis=1) - 2 * part @ c.T, axis=1)]
        if exact_specials and prune == "none":
            out[:2] = int_quantise(y[:2], 8)
        return out / np.linalg.norm(out, axis=1, keepdims=True) if unit else out

    return apply, rotation, float(groups)


def fit_codebooks(projections: dict[str, Matrix], rows: Matrix) -> None:
    """Per projection: the mean and per-dimension spread of the projected fit rows, and 256 k-means
    centroids (10 Lloyd rounds, seeded) with the residuals' spread."""
    rng = np.random.default_rng(5)
    for name, p in list(projections.items()):
        y = rows @ p
        projections[f"{name}:mean"] = y.mean(axis=0)
        projections[f"{name}:std"] = (y - y.mean(axis=0)).std(axis=0) + 1e-6
        c = y[rng.choice(len(y), 256, replace=False)]
        for _ in range(10):
            nearest = np.argmax(y @ c.T - 0.5 * (c**2).sum(axis=1), axis=1)
            for k in range(256):
                members = y[nearest == k]
                if len(members):
                    c[k] = members.mean(axis=0)
        nearest = np.argmax(y @ c.T - 0.5 * (c**2).sum(axis=1), axis=1)
        projections[f"{name}:centroids"] = c.astype(np.float32)
        projections[f"{name}:rstd"] = (y - c[nearest]).std(axis=0) + 1e-6


class FormatTokenEncoder:
    """The packaged encoder (its outputs cached), each document passed through a format."""

    def __init__(self, inner: OnnxTokenEncoder, cache: DiskCache, fmt: Format, proj: Matrix | None) -> None:
        self.inner, self.cache, self.fmt, self.proj = inner, cache, fmt, proj
        self.name = inner.name + "+sweep"  # Engram stores what the format gives as it is (legacy int8)
        self.dim = inner.dim if proj is None else proj.shape[1]
        self.tokens_kept: list[int] = []

    def pieces(self, text: str) -> list[str]:
        tok = self.inner._tokenizer
        ids = tok.encode(text).ids
        if len(ids) + 1 > self.inner._max_document_tokens:
            ids = [*ids[: self.inner._max_document_tokens - 2], ids[-1]]
        return [tok.id_to_token(i) for i in [ids[0], self.inner._document_marker, *ids[1:]]]

    def raw_document(self, text: str) -> Matrix:
        return self.cache.get(_key("t", text), lambda: self.inner.encode_documents([text])[0])  # type: ignore[no-any-return]

    def encode_documents(self, texts: Sequence[str]) -> list[Matrix]:
        out = [self.fmt(self.raw_document(t), self.pieces(t)) for t in texts]
        self.tokens_kept.extend(len(m) for m in out)
        return out

    def encode_query(self, text: str) -> Matrix:
        q: Matrix = self.cache.get(_key("tq", text), lambda: self.inner.encode_query(text))
        return q if self.proj is None else (q @ self.proj).astype(np.float32)

    def content_positions(self, text: str, ignore: frozenset[str] = frozenset()) -> list[int]:
        return self.inner.content_positions(text, ignore)  # the query's rows are the inner encoder's


def fit_projections(encoder: FormatTokenEncoder) -> dict[str, Matrix]:
    """Uncentred PCA of bench/data's chat turns' token vectors (bench/fit_token_projection.py), and a
    seeded random orthogonal projection; with their codebooks (``fit_codebooks``)."""
    full = principal_directions(encoder.raw_document, 384)
    encoder.cache.save()
    rand, _ = np.linalg.qr(np.random.default_rng(23).standard_normal((384, 384)))
    projections = {
        "id384": full,  # a rotation: every direction kept
        "pca256": np.ascontiguousarray(full[:, :256]),
        "pca192": np.ascontiguousarray(full[:, :192]),
        "pca160": np.ascontiguousarray(full[:, :160]),
        "pca128": np.ascontiguousarray(full[:, :128]),
        "pca96": np.ascontiguousarray(full[:, :96]),
        "pca64": np.ascontiguousarray(full[:, :64]),
        "rand128": rand[:, :128].astype(np.float32),
    }
    rows = np.concatenate([encoder.raw_document(t) for t in chat_texts()]).astype(np.float32)
    fit_codebooks(projections, rows)
    projections["fit_rows"] = rows
    mixed = {"mix128": principal_directions(encoder.raw_document, 128, with_eval_corpus=True)}
    fit_codebooks(mixed, fit_rows(encoder.raw_document, with_eval_corpus=True).astype(np.float32))
    projections |= mixed
    return projections


def locomo(eng: Engram, samples: list[dict[str, Any]]) -> dict[str, float]:
    import locomo as lc  # bench/locomo.py

    out = lc.run(eng, samples, ["default"], lc.Stores("sqlite", Path(tempfile.mkdtemp())))["default"]
    return {k: out[k] for k in ("questions", "r_at_5", "r_at_10", "mrr", "latency_p50_ms")}


def own(eng: Engram, question_set: str, ids: dict[str, str]) -> dict[str, float]:
    qs = [q for q in read_questions(DEFAULT_EVAL_DIR, question_set, ids) if q.split == "dev"]
    r = run_questions(eng, qs)
    return {"questions": len(qs), **{k: r[k] for k in ("r_at_5", "r_at_10", "mrr", "latency_p50_ms")}}


def main() -> None:
    parser = argparse.ArgumentParser(description="token-vector format sweep")
    parser.add_argument("--formats", nargs="+", default=["none-full-int8"])
    parser.add_argument("--sets", nargs="+", default=["locomo", "own", "agent"])
    parser.add_argument("--cache", type=Path, default=Path("/tmp/lean-sweep-cache.pkl"))
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared/data/locomo-dev.json")
    parser.add_argument("--save-projection", type=Path, help="write pca96/pca128 here (.npz)")
    args = parser.parse_args()
    cache = DiskCache(args.cache)
    settings = EngramSettings()
    embedder = CachedEmbedder(OnnxEmbedder.packaged(threads=settings.model_threads), cache)
    reranker = CachedReranker(OnnxCrossEncoder.packaged(), cache)
    base_encoder = OnnxTokenEncoder.packaged(threads=settings.model_threads)
    projections = fit_projections(FormatTokenEncoder(base_encoder, cache, lambda m, p: m, None))
    if args.save_projection:
        np.savez(args.save_projection, **projections)
    samples = json.loads(args.data.read_text())
    for name in args.formats:
        fmt, proj, token_bytes = make_format(name, projections)
        encoder = FormatTokenEncoder(base_encoder, cache, fmt, proj)
        row: dict[str, Any] = {"format": name, "token_bytes": token_bytes}
        with tempfile.TemporaryDirectory() as tmp:
            store = SQLiteStore(Path(tmp) / "e.db")
            eng = Engram(store, embedder, reranker, token_encoder=encoder, settings=settings)  # type: ignore[arg-type]
            try:
                if "locomo" in args.sets:
                    row["locomo"] = locomo(eng, samples)
                if {"own", "agent"} & set(args.sets):
                    encoder.tokens_kept.clear()
                    ids = import_eval_corpus(eng, DEFAULT_EVAL_DIR)
                    row["own_tokens_per_row"] = statistics.fmean(encoder.tokens_kept)
                    for qset in ("own", "agent"):
                        if qset in args.sets:
                            row[qset] = own(eng, qset, ids)
            finally:
                eng.close()
                cache.save()
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
