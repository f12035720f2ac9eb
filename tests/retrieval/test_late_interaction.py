"""Late interaction: the packing codec, MaxSim over packed tokens, and the score's formula."""

import numpy as np
import pytest

from engram.retrieval.late_interaction import late_score, pack, token_maxima, unpack
from engram.retrieval.pipeline import normalised


def unit_rows(rng, n, dim):
    m = rng.standard_normal((n, dim)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def test_pack_round_trips_within_int8_error():
    rng = np.random.default_rng(1)
    tokens = unit_rows(rng, 37, 384)
    blob = pack(tokens)
    assert len(blob) == 37 * (4 + 384)
    back = unpack(blob, 384)
    assert back.shape == tokens.shape
    assert np.max(np.abs(back - tokens)) <= np.abs(tokens).max(axis=1).max() / 254 + 1e-6
    with pytest.raises(ValueError, match="384-dim"):
        unpack(blob[:-1], 384)


def test_token_maxima_equals_the_per_document_maxsim():
    rng = np.random.default_rng(2)
    query = unit_rows(rng, 9, 64)
    docs = [unit_rows(rng, n, 64) for n in (1, 5, 40, 3)]
    maxima = token_maxima(query, [pack(d) for d in docs], 64)
    assert maxima.shape == (4, 9)
    for row, doc in zip(maxima, docs, strict=True):
        exact = (query @ doc.T).max(axis=1)
        np.testing.assert_allclose(row, exact, atol=0.02)
    assert token_maxima(query, [], 64).shape == (0, 9)
    with pytest.raises(ValueError):
        token_maxima(query, [b""], 64)


def test_late_score_follows_its_docstring():
    assert late_score(np.array([1.0, 0.0])) == 0.5
    assert late_score(np.array([1.0, 0.0]), np.array([0.0, 1.0])) == 0.75
    # A context can only add: the union's maxima are >= the row's own.
    own, ctx = np.array([0.4, 0.6]), np.array([0.1, 0.2])
    assert late_score(own, ctx) == late_score(own)


def test_normalised_spreads_scores_over_the_unit_interval():
    assert normalised([0.5, 0.6, 0.7]) == pytest.approx([0.0, 0.5, 1.0])
    assert normalised([0.3, 0.3]) == [1.0, 1.0]
    assert normalised([]) == []
