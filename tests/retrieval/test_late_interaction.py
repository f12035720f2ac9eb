"""Late interaction: the packing codec, MaxSim over packed tokens, and the score's formula."""

import numpy as np
import pytest

from engram.providers.onnx import OnnxTokenEncoder
from engram.retrieval import token_pq
from engram.retrieval.late_interaction import (
    is_current,
    late_score,
    pack,
    pack_all,
    query_coverage,
    text_similarity,
    token_maxima,
    unpack,
)
from engram.retrieval.pipeline import normalised
from engram.retrieval.token_format import LEAN, decode_lean, encode_lean, is_lean
from engram.text import is_content_word


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
        unpack(blob[:-2], 384)  # (an odd length would read as a lean blob: see the next test)


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
    # Another model's odd dim gives odd-length legacy blobs: only the packaged model's dim reads lean.
    odd = unit_rows(rng, 3, 63)
    assert len(pack(odd)) % 2 == 1
    np.testing.assert_allclose(
        token_maxima(query[:, :63], [pack(odd)], 63)[0], (query[:, :63] @ odd.T).max(axis=1), atol=0.02
    )
    with pytest.raises(ValueError):
        token_maxima(query, [b""], 64)


def test_lean_blobs_hold_each_token_as_its_nearest_centroid_per_group_with_a_version_byte():
    rng = np.random.default_rng(3)
    tokens = unit_rows(rng, 21, 384)
    blob = pack(tokens, LEAN.model)
    assert blob[0] == token_pq.VERSION and len(blob) == 1 + 21 * token_pq.GROUPS
    assert is_lean(blob) and is_current(blob, LEAN.model) and not is_current(blob, "another-model")
    book = token_pq.codebook()
    codes = np.frombuffer(blob, dtype=np.uint8, offset=1).reshape(21, token_pq.GROUPS)
    rotated = (tokens @ book.rotation).reshape(21, token_pq.GROUPS, book.width)
    for g in (0, 17, 63):  # each group's code is its nearest centroid
        distances = ((rotated[:, g, None, :] - book.centroids[g][None]) ** 2).sum(axis=2)
        np.testing.assert_array_equal(codes[:, g], distances.argmin(axis=1))
    back = unpack(blob, 384)  # in the model's own space: the centroids, rotated back
    np.testing.assert_allclose(back, book.centroids[np.arange(64), codes].reshape(21, 384) @ book.rotation.T)
    # Scoring reads int8 centroids (a scale per dimension): within 1% of the float centroids' products.
    query = unit_rows(rng, 5, 384)
    np.testing.assert_allclose(token_maxima(query, [blob], 384)[0], (query @ back.T).max(axis=1), atol=0.01)
    for broken in (blob[:-2], b"\x03" + blob[1:]):  # a torn blob, an unknown version
        with pytest.raises(ValueError):
            unpack(broken, 384)
        with pytest.raises(ValueError):
            token_maxima(query, [broken], 384)


def test_version_1_lean_blobs_are_still_read_and_are_rewritten_by_reindex():
    rng = np.random.default_rng(6)
    tokens = unit_rows(rng, 21, 384)
    blob = encode_lean(tokens)  # what lean stores wrote before version 2
    assert blob[0] == LEAN.version == 1 and len(blob) == 1 + 21 * (2 + LEAN.dim // 2)
    assert is_lean(blob) and not is_current(blob, LEAN.model) and not is_current(blob, None)
    book = LEAN.codebook()
    projected = tokens @ book.projection
    back = unpack(blob, 384)
    assert back.shape == (21, LEAN.dim)
    # 4-bit: within half a level of each projected value, a level being max|z| / 7 of the token's
    # distance from the mean in units of the spread, z = (x - mean) / spread.
    z = (projected - book.mean) / book.spread
    bound = np.abs(z).max(axis=1, keepdims=True) / 14 * book.spread * 1.01
    assert np.all(np.abs(back - projected) <= bound)
    scales, values = decode_lean(blob)
    assert values.min() >= -7 and values.max() <= 7 and scales.dtype == np.float32


def test_a_batch_packs_to_the_same_bytes_as_its_rows_one_by_one():
    rng = np.random.default_rng(5)
    rows = [unit_rows(rng, n, 384) for n in (1, 7, 30, 300)]
    assert pack_all(rows) == [pack(r) for r in rows]
    assert pack_all(rows, LEAN.model) == [pack(r, LEAN.model) for r in rows]  # 300 tokens: two chunks
    assert pack_all([], LEAN.model) == []
    with pytest.raises(ValueError, match="no token vectors"):
        pack_all([rows[0], rows[0][:0]], LEAN.model)


def test_legacy_and_lean_blobs_are_told_apart_by_length_and_score_alike():
    rng = np.random.default_rng(4)
    for n in range(1, 200):  # legacy lengths are even, lean ones odd, whatever n
        assert len(pack(unit_rows(rng, n, 384))) % 2 == 0
        assert len(pack(unit_rows(rng, n, 384), LEAN.model)) % 2 == 1
    other = pack(unit_rows(rng, 3, 384), "another-model")
    assert not is_lean(other) and is_current(other, "another-model") and not is_current(other, LEAN.model)


def test_one_maxsim_scores_legacy_and_lean_blobs_of_real_token_vectors_alike(token_encoder):
    texts = ["Sarah: we hiked up to the lake on Saturday", "Bob: my laptop will not charge any more"]
    hike, laptop = token_encoder.encode_documents(texts)
    query = token_encoder.encode_query("where did Sarah go hiking?")
    mixed = [pack(hike), pack(hike, LEAN.model), encode_lean(hike)]
    mixed += [pack(laptop), pack(laptop, LEAN.model), encode_lean(laptop)]
    maxima = token_maxima(query, mixed, token_encoder.dim)
    assert maxima.shape == (6, len(query))
    scores = [late_score(m) for m in maxima]
    assert scores[0] == pytest.approx(late_score((query @ hike.T).max(axis=1)), abs=0.01)
    assert scores[1] == pytest.approx(scores[0], abs=0.03)  # version 2 keeps MaxSim
    assert scores[2] == pytest.approx(scores[0], abs=0.05)  # so did version 1
    assert scores[4] == pytest.approx(scores[3], abs=0.03) and scores[5] == pytest.approx(scores[3], abs=0.05)
    assert min(scores[:3]) > max(scores[3:]) + 0.1  # every format ranks the hike first
    # Two rows compared across formats: version 2 in the model's space, version 1 in its projection.
    legacy, v2, v1 = (text_similarity(pack(hike), b, token_encoder.dim) for b in mixed[:3])
    assert legacy == pytest.approx(1.0, abs=0.01) and v2 == pytest.approx(1.0, abs=0.05) and v1 > 0.9


def test_late_score_follows_its_docstring():
    assert late_score(np.array([1.0, 0.0])) == 0.5
    assert late_score(np.array([1.0, 0.0]), np.array([0.0, 1.0])) == 0.75
    # A context can only add: the union's maxima are >= the row's own.
    own, ctx = np.array([0.4, 0.6]), np.array([0.1, 0.2])
    assert late_score(own, ctx) == late_score(own)


def test_normalised_spreads_scores_over_the_unit_interval():
    assert normalised([0.5, 0.6, 0.7]) == pytest.approx([0.01, 0.505, 1.0])  # the floor: LATE_FLOOR
    assert normalised([0.3, 0.3]) == [1.0, 1.0]
    assert normalised([]) == []


def test_query_coverage_is_the_least_matched_content_token():
    own = np.array([0.9, 0.4, 0.8], dtype=np.float32)
    assert query_coverage(own, [0, 2]) == pytest.approx(0.8)
    assert query_coverage(own, [0, 1, 2]) == pytest.approx(0.4)
    assert query_coverage(own, []) is None


def test_the_packaged_encoder_finds_the_content_words_of_a_query():
    """Question words, stopwords, punctuation, a possessive 's and the ignored words (the user's own
    name) are left out; a word's pieces all count."""
    encoder = OnnxTokenEncoder.packaged(threads=1)
    query = "What phone does Aisha use for her sister's firmware?"
    pieces = encoder._tokenizer.encode(query).tokens
    rows = encoder.content_positions(query, frozenset({"aisha"}))
    assert [pieces[r - 1] for r in rows] == ["phone", "sister", "firm", "##ware"]
    assert max(rows) < len(encoder.encode_query(query))
    assert (
        is_content_word("brother's")
        and not is_content_word("what")
        and not is_content_word("Aisha", frozenset({"aisha"}))
    )


def test_a_contraction_is_judged_whole_not_by_the_tokenizers_pieces():
    # The tokenizer splits "didn't" at the apostrophe: "didn" counted as a content word that no row
    # says, and the hits of "what didn't I like ...?" fell below those of "what did I not like ...?".
    encoder = OnnxTokenEncoder.packaged(threads=1)
    for query, words in [
        ("what didn't I like about the hotel?", ["like", "hotel"]),
        ("why won’t the hub connect?", ["hub", "connect"]),
        ("where we've moved to, and my sister's job", ["moved", "sister", "job"]),
    ]:
        pieces = encoder._tokenizer.encode(query).tokens
        assert [pieces[r - 1] for r in encoder.content_positions(query)] == words, query
    assert not is_content_word("didn't") and not is_content_word("CAN'T") and not is_content_word("we've")
    assert is_content_word("sister’s") and is_content_word("hub")


def test_late_score_leaves_out_the_rows_it_is_told_to():
    assert late_score(np.array([1.0, 0.0, 1.0]), left_out=[2]) == 0.5
    own, ctx = np.array([1.0, 0.0, 0.2]), np.array([0.0, 1.0, 0.9])
    assert late_score(own, ctx, left_out=[2]) == 0.75
    assert late_score(own, left_out=[7]) == late_score(own)  # a row past the query's is ignored


def test_user_named_in_finds_the_users_name_as_the_query_writes_it():
    from engram.text import user_named_in

    assert user_named_in("Where does Aisha's brother live?", "aisha") == "Aisha"
    assert user_named_in("what car does Alice Smith drive?", "alice.smith@example.com") == "Alice"
    assert user_named_in("where do I live?", "aisha") is None
    assert user_named_in("what may I eat before a run?", "may") is None  # a word, not the user
    assert user_named_in("what does aisha do?", "aisha") is None  # uncapitalised: read as a word
    assert user_named_in("what did Aishah say?", "aisha") is None  # a whole word, not a prefix


def test_text_similarity_follows_its_docstring():
    from engram.retrieval.late_interaction import text_similarity

    a, b = (
        pack(np.array([[1.0, 0.0]], dtype=np.float32)),
        pack(np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)),
    )
    assert text_similarity(a, b, 2) == pytest.approx(0.75, abs=0.01)
    assert text_similarity(a, a, 2) == pytest.approx(1.0, abs=0.01)
