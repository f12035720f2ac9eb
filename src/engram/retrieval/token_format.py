"""The lean token-vector format, version 1: 128 projected dimensions, 4 bits each. Read, no longer
written: lean stores write version 2 (``token_pq``), and ``engram reindex`` rewrites these blobs.

Chosen by measurement on the development sets (docs/benchmarks.md, "Lean token vectors"): each token
vector of the packaged ColBERT backbone (384 dims) is projected onto the top 128 principal directions of
generic chat text's token vectors, and each projected dimension is stored as its distance from those
vectors' mean in units of that dimension's spread, quantised per token to signed 4-bit levels -7..7 with
one float16 scale (``engram/data/colbert_codebook_v1.npz``: projection, mean, spread, made by
``bench/fit_token_projection.py`` from bench/data). Centring matters: the backbone's vectors share one
large direction, which a per-token scale would otherwise spend the 15 levels on. An orthonormal
projection keeps dot products (up to what the dropped directions held), so MaxSim runs in the small
space against the query projected the same way (``lean_query``).

Layout: ``[version: 1 byte][n float16 scales][n x dim/2 bytes, two 4-bit values a byte, low nibble
first, each value + 8]``. A token costs ``2 + dim/2`` bytes, an even number, so a lean blob's length is
always odd: a legacy int8 blob (n x (4 + 384) bytes, no header) is always even. That is how a store
holding both is read (``is_lean``), with no per-store setting.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float32]
Int8Matrix = npt.NDArray[np.int8]


@dataclass(frozen=True)
class Codebook:
    """What a lean blob is read with: the (input_dim, dim) orthonormal projection, and the mean and
    per-dimension spread of projected token vectors (each dimension is quantised as its distance from
    the mean in units of its spread, so 4 bits go where the vectors differ, not to the direction they
    all share)."""

    projection: Matrix
    mean: Matrix
    spread: Matrix


@dataclass(frozen=True)
class LeanFormat:
    version: int
    model: str  # the token model whose vectors the codebook was fitted on
    input_dim: int
    dim: int
    codebook_file: str

    @property
    def token_bytes(self) -> int:
        return 2 + self.dim // 2

    def codebook(self) -> Codebook:
        """The codebook, loaded once."""
        return _load_codebook(self.codebook_file, self.input_dim, self.dim)


LEAN = LeanFormat(
    version=1,
    model="answerai-colbert-small-v1-backbone-int8",
    input_dim=384,
    dim=128,
    codebook_file="colbert_codebook_v1.npz",
)
_LEVELS = 7  # signed 4-bit, symmetric: -7..7 (the 16th code is unused, so the mean stays exact)


@functools.cache
def _load_codebook(name: str, input_dim: int, dim: int) -> Codebook:
    with resources.files("engram.data").joinpath(name).open("rb") as f, np.load(f) as data:
        parts = {k: np.ascontiguousarray(data[k], dtype=np.float32) for k in ("projection", "mean", "spread")}
    shapes = [parts[k].shape for k in ("projection", "mean", "spread")]
    if shapes != [(input_dim, dim), (dim,), (dim,)]:
        raise ValueError(f"{name}: not a codebook from {input_dim} to {dim} dims")
    return Codebook(**parts)


def is_lean(blob: bytes) -> bool:
    """A versioned blob (odd length, see the module doc) rather than a legacy int8 one."""
    return len(blob) % 2 == 1


def encode_lean(tokens: Matrix) -> bytes:
    """A (n, LEAN.input_dim) token matrix as a lean blob."""
    return encode_lean_many([tokens])[0]


def stacked(matrices: Sequence[Matrix]) -> tuple[list[int], Matrix]:
    """Each matrix's token count, and all their tokens as one float32 matrix (a lean format codes a
    whole write batch at once); ValueError for a matrix without tokens."""
    counts = [len(m) for m in matrices]
    if 0 in counts:
        raise ValueError("no token vectors to store")
    return counts, np.concatenate([np.asarray(m, dtype=np.float32) for m in matrices])


def encode_lean_many(matrices: Sequence[Matrix]) -> list[bytes]:
    """Many token matrices as lean blobs, projected and quantised together (one product for a whole
    import batch, not one per row)."""
    if not matrices:
        return []
    counts, rows = stacked(matrices)
    book = LEAN.codebook()
    centred = (rows @ book.projection - book.mean) / book.spread
    scales = (np.abs(centred).max(axis=1) / _LEVELS).astype(np.float16)
    scales[scales == 0] = 1.0
    codes = np.clip(np.round(centred / scales.astype(np.float32)[:, None]), -_LEVELS, _LEVELS)
    nibbles = (codes + 8).astype(np.uint8).reshape(len(rows), LEAN.dim // 2, 2)
    packed = (nibbles[:, :, 0] | (nibbles[:, :, 1] << 4)).astype(np.uint8)
    scale_bytes: bytes = scales.astype("<f2").tobytes()
    value_bytes: bytes = packed.tobytes()
    blobs, start, width = [], 0, LEAN.dim // 2
    header = bytes([LEAN.version])
    for n in counts:
        end = start + n
        blobs.append(header + scale_bytes[2 * start : 2 * end] + value_bytes[width * start : width * end])
        start = end
    return blobs


def _token_count(blob: bytes) -> int:
    if not blob or blob[0] != LEAN.version:
        raise ValueError(f"a token blob of unknown format version {blob[0] if blob else None}")
    n = (len(blob) - 1) // LEAN.token_bytes
    if n == 0 or 1 + n * LEAN.token_bytes != len(blob):
        raise ValueError(f"a lean token blob of {len(blob)} bytes does not hold whole tokens")
    return n


def decode_lean_many(blobs: Sequence[bytes]) -> tuple[list[int], Matrix, Int8Matrix]:
    """Many lean blobs at once: each one's token count, then all their tokens' scales (float32) and
    (total, LEAN.dim) values -7..7 (int8), in order. The bytes are joined first, so the numpy work is
    done once for all the blobs (a recall decodes up to ~200), not once per blob."""
    counts = [_token_count(b) for b in blobs]
    scales = b"".join(b[1 : 1 + 2 * n] for b, n in zip(blobs, counts, strict=True))
    packed = np.frombuffer(
        b"".join(b[1 + 2 * n :] for b, n in zip(blobs, counts, strict=True)), dtype=np.uint8
    ).reshape(-1, LEAN.dim // 2)
    values = np.empty((len(packed), LEAN.dim), dtype=np.int8)
    values[:, 0::2] = (packed & 0x0F).astype(np.int8) - 8
    values[:, 1::2] = (packed >> 4).astype(np.int8) - 8
    return counts, np.frombuffer(scales, dtype="<f2").astype(np.float32), values


def decode_lean(blob: bytes) -> tuple[Matrix, Int8Matrix]:
    """A lean blob's per-token scales (float32) and its (n, LEAN.dim) values -7..7 (int8): the token
    is ``mean + spread * scale * values`` in the projected space."""
    _, scales, values = decode_lean_many([blob])
    return scales, values


def lean_query(query: Matrix) -> tuple[Matrix, Matrix]:
    """The query as lean blobs are scored with it: ``q · d = (q P ∘ spread) · (scale values) + q P · mean``
    for ``d = mean + spread * scale * values``: the weights (n_query, dim) and the offsets (n_query,)."""
    book = LEAN.codebook()
    projected = np.asarray(query, dtype=np.float32) @ book.projection
    weights: Matrix = (projected * book.spread).astype(np.float32)
    offsets: Matrix = (projected @ book.mean).astype(np.float32)
    return weights, offsets


def decode_lean_matrix(blob: bytes) -> Matrix:
    """A lean blob's token vectors in the projected space (up to the quantisation error)."""
    book = LEAN.codebook()
    scales, values = decode_lean(blob)
    matrix: Matrix = (book.mean + book.spread * (values.astype(np.float32) * scales[:, None])).astype(
        np.float32
    )
    return matrix
