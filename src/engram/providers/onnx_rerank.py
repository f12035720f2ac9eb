"""The packaged cross-encoder (ms-marco-MiniLM-L-12-v2 INT8, see engram.providers.onnx for how its files
are found and verified), reading a long passage in windows."""

from __future__ import annotations

import queue
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from engram.providers.onnx import PACKAGED_RERANKER, load_session, padded
from engram.threads import lower_priority

# A long passage's windows: the answer in a sentence scored 0.003 in a window of 230 tokens of chatter,
# 0.70 in one of 128 (an outside review's repro); at most MAX_WINDOWS pairs a passage.
WINDOW_TOKENS = 128
MAX_WINDOWS = 16  # 1,500 tokens (~6,000 characters) of a passage: a longer memory is a document
MIN_WINDOW_TOKENS = 64  # a query longer than the budget less this leaves no room worth a window


class OnnxCrossEncoder:
    """A cross-encoder with one logit output, turned into a probability by the sigmoid.

    A passage longer than ``WINDOW_TOKENS`` is read in overlapping windows of that many tokens (at
    most ``MAX_WINDOWS``), and its score is its best window's (MaxP): read whole, cut at ``max_tokens``
    with the query, a fact past the first ~1,000 characters of a long turn was scored 0.00002 for the
    question it answers, below unrelated turns, and one after 900 characters of chatter 0.035 (an
    outside review's repro; the model was trained on web passages of about that many tokens).

    Scores are stable: INT8 models quantise activations dynamically over the whole input tensor, so in
    a padded batch a pair's score shifts with its batch-mates (measured: up to 0.5 logit). Each pair is
    therefore run alone and unpadded, and the same (query, passage) always gets the same score. Batching
    bought little anyway (the cost is per token), while ``workers`` single-threaded sessions running
    pairs in parallel were ~30% faster on 2 cores than one session with 2 intra-op threads.
    """

    def __init__(
        self, model_dir: Path, *, name: str, max_tokens: int = 256, workers: int = 2, nice: int = 0
    ) -> None:
        self._tokenizer, first = load_session(model_dir, threads=1)
        self._max_tokens = max_tokens
        self._counter = Tokenizer.from_str(self._tokenizer.to_str())  # the same, cutting nothing
        self._counter.no_truncation()
        # Cut the longer side first: the passage, unless a query is longer than it (with "only_second"
        # a query past max_tokens made every pair fail and recall fell back to RRF order).
        self._tokenizer.enable_truncation(max_tokens, strategy="longest_first")
        self._name = name
        self._sessions: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._sessions.put(first)
        for copy in range(1, workers):  # a session of its own per worker
            self._sessions.put(load_session(model_dir, threads=1, copy=copy)[1])
        # Its threads only ever rerank, so they may run at a lower CPU priority (``nice``, see
        # engram.threads) for good.
        self._pool = ThreadPoolExecutor(
            max_workers=workers,
            thread_name_prefix="engram-rerank",
            initializer=lower_priority,
            initargs=(nice,),
        )

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    @classmethod
    def packaged(cls, *, workers: int = 2, nice: int = 0) -> OnnxCrossEncoder:
        model_dir = PACKAGED_RERANKER.verified_dir()
        return cls(model_dir, name=PACKAGED_RERANKER.name, workers=workers, nice=nice)

    @property
    def name(self) -> str:
        return self._name

    def _logit(self, encoding: Any) -> float:
        session = self._sessions.get()  # blocks while every session is busy: no oversubscription
        try:
            return float(session.run(None, padded([encoding], len(encoding.ids)))[0][0][0])
        finally:
            self._sessions.put(session)

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        room = self._max_tokens - len(self._counter.encode(query, add_special_tokens=False).ids) - 3
        windows = [self._windows(p, room) for p in passages]  # [CLS] q [SEP] p [SEP]: 3 special tokens
        pairs = [(query, w) for ws in windows for w in ws]
        logits = iter(self._pool.map(self._logit, self._tokenizer.encode_batch(pairs)))
        best = [max(next(logits) for _ in ws) for ws in windows]
        return [float(1.0 / (1.0 + np.exp(-x))) for x in best]

    def _windows(self, passage: str, room: int) -> list[str]:
        """``passage`` whole when it has at most WINDOW_TOKENS tokens (or ``room``, if less); else
        windows of that many tokens that overlap by a quarter, cut at token boundaries, at most
        MAX_WINDOWS."""
        offsets = self._counter.encode(passage, add_special_tokens=False).offsets
        size = min(room, WINDOW_TOKENS)
        if size < MIN_WINDOW_TOKENS or len(offsets) <= size:  # a query that long: cut as before
            return [passage]
        starts = range(0, len(offsets) - size // 4, size - size // 4)[:MAX_WINDOWS]
        return [passage[offsets[i][0] : offsets[min(i + size, len(offsets)) - 1][1]] for i in starts]
