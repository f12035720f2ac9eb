"""The lean token-vector format, version 2 (the one written): product quantisation, 64 bytes a token.

Chosen by measurement on the development sets (docs/benchmarks.md, "Lean token vectors"): each token
vector of the packaged ColBERT backbone (384 dims) is rotated onto the principal directions of generic
chat text's token vectors (a rotation keeps every dot product), the 384 rotated dimensions are dealt
round robin into 64 groups of 6 (so each group holds strong and weak directions alike), and each group
is stored as the index of its nearest of 256 k-means centroids: one byte a group, no scale
(``engram/data/colbert_codebook_v2.npz``: rotation and centroids, made by
``bench/fit_token_projection.py --version 2`` from bench/data). Version 1 (``token_format``) dropped
256 of the directions to afford 4 bits for the rest; keeping them all, at one byte per 6 dims, loses
less on the development sets (LoCoMo dev R@5 0.743 -> 0.754, int8 0.758; own dev R@5 0.915 -> 0.930,
int8 0.930), at 64 bytes a token against 66.

Scoring never rebuilds float vectors: the centroids are held as int8 with one scale per dimension
(folded into the query), each padded to 8 bytes, so a token's 64 codes gather 64 eight-byte words;
the gathered (n, 512) int8 matrix is multiplied by the rotated query as the legacy int8 format is
(bench/late_stage.py, 160 candidates: p50 1.7 ms, int8 1.5, version 1 0.8; rebuilding float centroids
instead cost ~5x more).

Layout: ``[version: 1 byte = 2][n x 64 code bytes]``: an odd length, like every lean blob
(``token_format.is_lean``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

import numpy as np
import numpy.typing as npt

from engram.retrieval.token_format import LEAN, Matrix, stacked

Int8Matrix = npt.NDArray[np.int8]
CodeMatrix = npt.NDArray[np.uint8]

VERSION = 2
GROUPS = 64
CENTROIDS = 256
_PADDED = 8  # a group's 6 int8 values padded to one 8-byte word, gathered in one read
_ENCODE_CHUNK = 256  # tokens whose distances to every centroid are computed at once (~16 MB)


@dataclass(frozen=True)
class ProductCodebook:
    """The (input_dim, input_dim) rotation, its columns in group order, and the centroids
    (GROUPS, CENTROIDS, width); with the int8 table recall scores with."""

    rotation: Matrix
    centroids: Matrix
    words: npt.NDArray[np.uint64]  # (GROUPS x CENTROIDS,): each centroid's int8 values, padded
    scales: Matrix  # (GROUPS x _PADDED,): each int8 value's scale, 0 on the padding

    @property
    def width(self) -> int:
        return int(self.centroids.shape[2])


@functools.cache
def codebook(name: str = "colbert_codebook_v2.npz") -> ProductCodebook:
    """The packaged codebook, loaded once."""
    with resources.files("engram.data").joinpath(name).open("rb") as f, np.load(f) as data:
        rotation = np.ascontiguousarray(data["rotation"], dtype=np.float32)
        centroids = np.ascontiguousarray(data["centroids"], dtype=np.float32)
    dim = LEAN.input_dim
    if rotation.shape != (dim, dim) or centroids.shape != (GROUPS, CENTROIDS, dim // GROUPS):
        raise ValueError(f"{name}: not a {GROUPS}-group product codebook for {dim} dims")
    width = dim // GROUPS
    scales = np.zeros((GROUPS, _PADDED), dtype=np.float32)  # the padding's scale is 0
    scales[:, :width] = np.maximum(np.abs(centroids).max(axis=1), 1e-12) / 127.0
    table = np.zeros((GROUPS, CENTROIDS, _PADDED), dtype=np.int8)
    table[:, :, :width] = np.round(centroids / scales[:, None, :width]).astype(np.int8)
    return ProductCodebook(rotation, centroids, table.view(np.uint64).reshape(-1), scales.reshape(-1))


def encode_pq_many(matrices: Sequence[Matrix]) -> list[bytes]:
    """Many (n, 384) token matrices as version-2 blobs, rotated and coded together."""
    if not matrices:
        return []
    counts, rows = stacked(matrices)
    book = codebook()
    rotated = rows @ book.rotation
    grouped = rotated.reshape(len(rotated), GROUPS, book.width)
    norms = (book.centroids**2).sum(axis=2)  # (GROUPS, CENTROIDS)
    codes = np.empty((len(rotated), GROUPS), dtype=np.uint8)
    for start in range(0, len(rotated), _ENCODE_CHUNK):
        part = grouped[start : start + _ENCODE_CHUNK]
        # nearest centroid per group: argmin ||c||^2 - 2 y.c (||y||^2 is the same for every c)
        dots = np.einsum("ngw,gkw->ngk", part, book.centroids)
        codes[start : start + len(part)] = np.argmin(norms - 2 * dots, axis=2)
    flat: bytes = codes.tobytes()
    header, blobs, start = bytes([VERSION]), [], 0
    for n in counts:
        blobs.append(header + flat[GROUPS * start : GROUPS * (start + n)])
        start += n
    return blobs


def token_count(blob: bytes) -> int:
    n = (len(blob) - 1) // GROUPS
    if not blob or blob[0] != VERSION or n == 0 or 1 + n * GROUPS != len(blob):
        raise ValueError(f"a version-{VERSION} token blob of {len(blob)} bytes does not hold whole tokens")
    return n


def decode_pq_many(blobs: Sequence[bytes]) -> tuple[list[int], Int8Matrix]:
    """Many version-2 blobs at once: each one's token count, then every token's (n, GROUPS x 8) int8
    values, in order; ``pq_query`` gives the query they are multiplied by."""
    counts = [token_count(b) for b in blobs]
    codes = np.frombuffer(b"".join(b[1:] for b in blobs), dtype=np.uint8).reshape(-1, GROUPS)
    offsets = np.arange(GROUPS, dtype=np.intp) * CENTROIDS
    words = codebook().words[codes.astype(np.intp) + offsets]
    return counts, words.view(np.int8).reshape(len(codes), GROUPS * _PADDED)


def pq_query(query: Matrix) -> Matrix:
    """The query as version-2 values are scored with it: rotated, laid out as the padded groups, each
    dimension times its value scale, so ``values @ pq_query(q).T`` is ``q · d`` for every token d."""
    book = codebook()
    rotated = (np.asarray(query, dtype=np.float32) @ book.rotation).reshape(len(query), GROUPS, book.width)
    padded = np.zeros((len(query), GROUPS, _PADDED), dtype=np.float32)
    padded[:, :, : book.width] = rotated
    weights: Matrix = (padded.reshape(len(query), -1) * book.scales).astype(np.float32)
    return weights


def decode_pq_matrix(blob: bytes) -> Matrix:
    """A version-2 blob's token vectors in the model's own space (up to the quantisation error)."""
    book = codebook()
    codes = np.frombuffer(blob, dtype=np.uint8, offset=1).reshape(token_count(blob), GROUPS)
    rotated = book.centroids[np.arange(GROUPS), codes].reshape(len(codes), -1)
    matrix: Matrix = (rotated @ book.rotation.T).astype(np.float32)
    return matrix
