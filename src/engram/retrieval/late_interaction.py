"""Late interaction (ColBERT MaxSim) over token vectors stored at write time: pure functions.

A memory's token vectors are computed once, when it is written, and stored int8-quantised
(``pack``); recall encodes the query once and scores every fused candidate (``token_maxima``, ``late_score``):
well under a millisecond per candidate, so the whole first-stage set (up to 2 x 80) can be scored, where the
cross-encoder (~5-11 ms per pair on 2 cores) can afford only the top few.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from threadpoolctl import ThreadpoolController

Matrix = npt.NDArray[np.float32]
_SCALE_BYTES = 4  # one float32 scale per token


def pack(tokens: Matrix) -> bytes:
    """Quantise a (n, dim) matrix to int8 with one scale per token: ``q = round(127 x / max|x|)``.

    Layout: n float32 scales, then n x dim int8 values. Measured on LoCoMo dev: the same R@10 as
    float32 (docs/benchmarks.md), at a quarter of the bytes (~15 KB for a 40-token turn at dim 384).
    """
    matrix = np.asarray(tokens, dtype=np.float32)
    scales: Matrix = np.abs(matrix).max(axis=1) / 127.0
    scales[scales == 0] = 1.0
    values = np.round(matrix / scales[:, None]).astype(np.int8)
    return scales.astype("<f4").tobytes() + values.tobytes()


def unpack(blob: bytes, dim: int) -> Matrix:
    """The (n, dim) float32 matrix that ``pack`` stored (up to its quantisation error)."""
    n = len(blob) // (_SCALE_BYTES + dim)
    if n * (_SCALE_BYTES + dim) != len(blob):
        raise ValueError(f"a token blob of {len(blob)} bytes does not hold {dim}-dim vectors")
    scales = np.frombuffer(blob, dtype="<f4", count=n)
    values = np.frombuffer(blob, dtype=np.int8, offset=n * _SCALE_BYTES).reshape(n, dim)
    matrix: Matrix = values.astype(np.float32) * scales[:, None]
    return matrix


_BLAS_LOCK = threading.Lock()


@functools.cache
def _blas() -> ThreadpoolController:
    """One BLAS thread for these small products: OpenBLAS threads spin after a call and starve the
    ONNX sessions running beside them on a small machine (measured: docs/benchmarks.md)."""
    return ThreadpoolController()


def token_maxima(query: Matrix, packed: Sequence[bytes], dim: int) -> Matrix:
    """For each packed document, each query token's best match: ``M[d, i] = max_j q_i · d_j``.

    One matrix product over all documents' tokens at once (int8 values, scales applied after the
    product: ``q · (s x) = s (q · x)``), then a maximum per document segment: ~1 ms for 160
    candidates of ~40 tokens, where one call per candidate cost ~7 ms in Python overhead.
    Returns shape (len(packed), len(query)).
    """
    if not packed:
        return np.zeros((0, len(query)), dtype=np.float32)
    counts = [len(blob) // (_SCALE_BYTES + dim) for blob in packed]
    if any(n == 0 or n * (_SCALE_BYTES + dim) != len(b) for n, b in zip(counts, packed, strict=True)):
        raise ValueError(f"a token blob does not hold a whole number of {dim}-dim vectors")
    scales = np.concatenate(
        [np.frombuffer(b, dtype="<f4", count=n) for n, b in zip(counts, packed, strict=True)]
    )
    values = np.concatenate(
        [
            np.frombuffer(b, dtype=np.int8, offset=n * _SCALE_BYTES).reshape(n, dim)
            for n, b in zip(counts, packed, strict=True)
        ]
    )
    with _BLAS_LOCK, _blas().limit(limits=1, user_api="blas"):  # the limit is process-wide
        sims = (values.astype(np.float32) @ np.asarray(query, dtype=np.float32).T) * scales[:, None]
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    return np.maximum.reduceat(sims, starts, axis=0)


def late_score(own: Matrix, context: Matrix | None = None) -> float:
    """ColBERT MaxSim of a row, read alone and with the turn it replied to, in [-1, 1].

    With ``own[i] = max_j q_i · d_j`` over the row's tokens and ``ctx[i]`` the same over the context's
    tokens: ``score = ½ (mean_i own[i] + mean_i max(own[i], ctx[i]))``. The second term lets an
    elliptic reply ("Yeah, it was amazing!") match through the words of the previous turn (MaxSim over
    the union of both token sets); the first keeps a row that matches on its own ahead of one that only
    borrows its match. Without a context, ``score = mean_i own[i]``.

    Example: own = [1, 0], ctx = [0, 1] -> ½ (0.5 + 1.0) = 0.75; own = [1, 0] alone -> 0.5.
    """
    alone = float(np.mean(own)) if len(own) else 0.0
    if context is None:
        return alone
    return 0.5 * (alone + float(np.mean(np.maximum(own, context))))
