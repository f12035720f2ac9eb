"""Late interaction (ColBERT MaxSim) over token vectors stored at write time: pure functions.

A memory's token vectors are computed once, when it is written, and stored compactly (``pack``); recall
encodes the query once and scores every fused candidate (``token_maxima``, ``late_score``): well under a
millisecond per candidate, so the whole first-stage set (up to 2 x 80) can be scored, where the
cross-encoder (~5-11 ms per pair on 2 cores) can afford only the top few.

Two blob formats, told apart by length alone (so a store may hold both, and one recall may score both):

* legacy int8 (Engram 0.2, and any token model but the packaged one): n float32 scales, then n x dim
  int8 values; no header, so at dim 384 its length ``n (4 + dim)`` is always even.
* lean (the packaged model only): one version byte, then fixed-size tokens of an even byte count, so
  its length is always odd. Version 2 (``engram.retrieval.token_pq``, product quantisation, 64 bytes a
  token) is what lean stores write; version 1 (``engram.retrieval.token_format``, 128 dims at 4 bits)
  is still read. Lean blobs exist only at the packaged model's dim (384), so at any other dim every
  blob is read as legacy.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator, Sequence

import numpy as np
import numpy.typing as npt
from threadpoolctl import ThreadpoolController

from engram.retrieval.token_format import (
    LEAN,
    decode_lean_many,
    decode_lean_matrix,
    is_lean,
    lean_query,
)
from engram.retrieval.token_format import Matrix as Matrix  # re-exported: the pipeline's type
from engram.retrieval.token_pq import VERSION as PQ_VERSION
from engram.retrieval.token_pq import decode_pq_many, decode_pq_matrix, encode_pq_many, pq_query

LATE_FLOOR = 0.01  # the last of the late-interaction head scores this, not 0: a multiplier can lift it
_SCALE_BYTES = 4  # one float32 scale per token (legacy int8)


def pack(tokens: Matrix, model: str | None = None) -> bytes:
    """Store a (n, dim) token matrix: the lean format (version 2) when ``model`` is the one its codebook
    was fitted for (``token_format.LEAN.model``), else the legacy int8 one."""
    return pack_all([tokens], model)[0]


def pack_all(matrices: Sequence[Matrix], model: str | None = None) -> list[bytes]:
    """``pack`` for many rows at once (a write batch): lean rows are rotated and coded together."""
    arrays = [np.asarray(m, dtype=np.float32) for m in matrices]
    if model == LEAN.model and all(a.ndim == 2 and a.shape[1] == LEAN.input_dim for a in arrays):
        with _one_blas_thread():
            return encode_pq_many(arrays)
    return [pack_int8(a) for a in arrays]


def is_current(blob: bytes, model: str | None) -> bool:
    """Whether ``blob`` is in the format ``pack(..., model)`` writes (``model`` None: int8): a version-1
    lean blob is not, so ``engram reindex`` rewrites it."""
    if model == LEAN.model:
        return is_lean(blob) and blob[0] == PQ_VERSION
    return not is_lean(blob)


def _lean_version(blob: bytes, dim: int) -> int | None:
    """The lean format version of a blob, None for a legacy one."""
    return blob[0] if dim == LEAN.input_dim and is_lean(blob) else None


def pack_int8(tokens: Matrix) -> bytes:
    """The legacy format: int8 with one scale per token, ``q = round(127 x / max|x|)``; n float32 scales,
    then n x dim int8 values (~15 KB for a 40-token turn at dim 384)."""
    matrix = np.asarray(tokens, dtype=np.float32)
    scales: Matrix = np.abs(matrix).max(axis=1) / 127.0
    scales[scales == 0] = 1.0
    values = np.round(matrix / scales[:, None]).astype(np.int8)
    return scales.astype("<f4").tobytes() + values.tobytes()


def _int8_parts(blob: bytes, dim: int) -> tuple[Matrix, npt.NDArray[np.int8]]:
    n = len(blob) // (_SCALE_BYTES + dim)
    if n == 0 or n * (_SCALE_BYTES + dim) != len(blob):
        raise ValueError(f"a token blob of {len(blob)} bytes does not hold {dim}-dim vectors")
    scales: Matrix = np.frombuffer(blob, dtype="<f4", count=n).astype(np.float32)
    return scales, np.frombuffer(blob, dtype=np.int8, offset=n * _SCALE_BYTES).reshape(n, dim)


def unpack(blob: bytes, dim: int) -> Matrix:
    """The float32 matrix a blob of any format holds (up to its quantisation error): (n, dim) for a
    legacy or version-2 blob, (n, LEAN.dim) in the projected space for a version-1 one."""
    version = _lean_version(blob, dim)
    if version == PQ_VERSION:
        return decode_pq_matrix(blob)
    if version is not None:
        return decode_lean_matrix(blob)
    scales, values = _int8_parts(blob, dim)
    matrix: Matrix = values.astype(np.float32) * scales[:, None]
    return matrix


_BLAS_LOCK = threading.Lock()


@functools.cache
def _blas() -> ThreadpoolController:
    return ThreadpoolController()


@contextlib.contextmanager
def _one_blas_thread() -> Iterator[None]:
    """One BLAS thread for these small products: OpenBLAS threads spin after a call and starve the
    ONNX sessions running beside them on a small machine (measured: docs/benchmarks.md; a 12 x 384
    by 384 x 128 product took ~100 ms on a loaded 2-core machine without the limit, ~0.1 ms with it)."""
    with _BLAS_LOCK, _blas().limit(limits=1, user_api="blas"):  # the limit is process-wide
        yield


def _int8_many(blobs: Sequence[bytes], dim: int) -> tuple[list[int], Matrix, npt.NDArray[np.int8]]:
    parts = [_int8_parts(b, dim) for b in blobs]
    counts = [len(s) for s, _ in parts]
    return counts, np.concatenate([s for s, _ in parts]), np.concatenate([v for _, v in parts])


def _segment_maxima(
    counts: Sequence[int], values: npt.NDArray[np.int8], query: Matrix, scales: Matrix | None = None
) -> Matrix:
    """One matrix product over all the blobs' tokens at once (integer values, any per-token scales
    applied after the product: ``q · (s x) = s (q · x)``), then a maximum per blob: ~1 ms for 160
    candidates of ~40 tokens, where one call per candidate cost ~7 ms in Python overhead."""
    sims = values.astype(np.float32) @ query.T
    if scales is not None:
        sims *= scales[:, None]
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    maxima: Matrix = np.maximum.reduceat(sims, starts, axis=0)
    return maxima


def token_maxima(query: Matrix, packed: Sequence[bytes], dim: int) -> Matrix:
    """For each packed document, each query token's best match: ``M[d, i] = max_j q_i · d_j``.

    Blobs of every format may be mixed: version-2 ones against the rotated query
    (``token_pq.pq_query``), version-1 ones in their projected space (an orthonormal projection keeps
    dot products, up to what the dropped directions held; ``token_format.lean_query``), legacy ones
    against the query as it is.
    Returns shape (len(packed), len(query)).
    """
    result: Matrix = np.zeros((len(packed), len(query)), dtype=np.float32)
    if not packed:
        return result
    query = np.asarray(query, dtype=np.float32)
    versions = [_lean_version(b, dim) for b in packed]
    pq = [i for i, v in enumerate(versions) if v == PQ_VERSION]
    lean = [i for i, v in enumerate(versions) if v is not None and v != PQ_VERSION]
    legacy = [i for i, v in enumerate(versions) if v is None]
    with _one_blas_thread():
        if pq:
            counts, values = decode_pq_many([packed[i] for i in pq])
            result[pq] = _segment_maxima(counts, values, pq_query(query))
        if lean:
            weights, offsets = lean_query(query)
            counts, scales, values = decode_lean_many([packed[i] for i in lean])
            result[lean] = _segment_maxima(counts, values, weights, scales) + offsets  # the mean's share
        if legacy:
            counts, scales, values = _int8_many([packed[i] for i in legacy], dim)
            result[legacy] = _segment_maxima(counts, values, query, scales)
    return result


def late_score(own: Matrix, context: Matrix | None = None, left_out: Sequence[int] = ()) -> float:
    """ColBERT MaxSim of a row, read alone and with the turn it replied to, in [-1, 1].

    With ``own[i] = max_j q_i · d_j`` over the row's tokens and ``ctx[i]`` the same over the context's
    tokens: ``score = ½ (mean_i own[i] + mean_i max(own[i], ctx[i]))``. The second term lets an
    elliptic reply ("Yeah, it was amazing!") match through the words of the previous turn (MaxSim over
    the union of both token sets); the first keeps a row that matches on its own ahead of one that only
    borrows its match. Without a context, ``score = mean_i own[i]``. The means run over the query
    tokens ``i`` not in ``left_out``: the user's own name (``TokenEncoder.content_positions``) says whom
    a question is about, which is every memory of theirs, and matched only the facts that name them,
    never their turns, which say "I" (docs/benchmarks.md, "The user's own name").

    Example: own = [1, 0], ctx = [0, 1] -> ½ (0.5 + 1.0) = 0.75; own = [1, 0] alone -> 0.5;
    own = [1, 0, 1], left_out [2] -> 0.5.
    """
    if len(left_out):
        own = np.delete(own, [i for i in left_out if i < len(own)])
        context = None if context is None else np.delete(context, [i for i in left_out if i < len(context)])
    alone = float(np.mean(own)) if len(own) else 0.0
    if context is None:
        return alone
    return 0.5 * (alone + float(np.mean(np.maximum(own, context))))


def text_similarity(a: bytes, b: bytes, dim: int) -> float:
    """How closely two rows' stored token vectors match each other: MaxSim both ways, averaged,
    ``½ (mean_i max_j a_i · b_j + mean_j max_i a_i · b_j)``, in [-1, 1]. A version-1 lean blob and
    one of another format are compared in the version-1 projection. Tells two turns about one subject
    ("we live in Bristol btw", "we moved to Edinburgh last week!": 0.74) from two that only share words
    (0.6-0.7).

    Example: a = [[1, 0]], b = [[1, 0], [0, 1]] -> ½ (1 + ½ (1 + 0)) = 0.75.
    """
    left, right = unpack(a, dim), unpack(b, dim)
    if left.shape[1] != right.shape[1]:  # one version-1 lean, one not: project the other one
        projection = LEAN.codebook().projection
        left, right = (
            (left @ projection if left.shape[1] == dim else left),
            (right @ projection if right.shape[1] == dim else right),
        )
    with _one_blas_thread():
        products = left @ right.T
    return 0.5 * (float(products.max(axis=1).mean()) + float(products.max(axis=0).mean()))


def query_coverage(own: Matrix, positions: Sequence[int]) -> float | None:
    """How well a row covers the query's least-matched content word: ``min_{i in positions} own[i]``,
    with ``own[i]`` the best cosine of query token ``i`` among the row's tokens (``token_maxima``).

    MaxSim averages over every query token, so a row that matches "what's my sister's" and nothing for
    "birthday" still scores well; the minimum over the content words (``TokenEncoder.content_positions``)
    says whether anything in the row answers to each of them: on the knowledge-update set's dev split it
    told questions about things never said from answerable ones far better than any stage's score
    (docs/benchmarks.md, "Current truth"). None without content words.

    Example: own = [0.9, 0.4, 0.8], positions [0, 2] -> 0.8.
    """
    kept = [i for i in positions if i < len(own)]
    return float(np.min(own[kept])) if kept else None


def normalised(scores: list[float]) -> list[float]:
    """Min-max scaling into [f, 1]: ``f + (1 - f) (s - min) / (max - min)`` with ``f = LATE_FLOOR``, all
    1.0 when the scores are equal.

    MaxSim scores are mean cosines bunched in a narrow band (~0.5-0.8), where a multiplier such as
    the catalog prior 0.85 would outweigh any difference in relevance; spread over [0, 1] within the
    head, they weigh against the multipliers as the cross-encoder's probabilities do. Measured: own
    evaluation dev split R@10 0.934 raw -> 0.977 scaled; LoCoMo dev unchanged (docs/benchmarks.md).
    The floor keeps the last of the head above 0, where no multiplier could lift it: with two turns,
    "we moved to Edinburgh last week!" scored 0 and could never go above "we live in Bristol btw".
    Example: [0.5, 0.6, 0.7] -> [0.01, 0.505, 1.0].
    """
    low, high = min(scores, default=0.0), max(scores, default=0.0)
    if high <= low:
        return [1.0] * len(scores)
    return [LATE_FLOOR + (1.0 - LATE_FLOOR) * (s - low) / (high - low) for s in scores]
