"""Bulk writes batch the token encoder; a text's token vectors must not depend on its batch-mates."""

import numpy as np

from engram.providers.onnx import PACKAGED_COLBERT, OnnxTokenEncoder

TEXTS = [
    "Sarah moved to Edinburgh",
    "The hub firmware is 2.1",
    "ok",
    "café naïve",
    "My sister's wedding is in June, and I still need to book the flights to Lisbon for the whole family.",
    "Sarah moved to Glasgow",  # as long as the first: same-length batch-mates
    "remind me to water the ficus every Tuesday morning before work",
    " ".join(["token"] * 400),  # past max_document_tokens: cut to its head, as alone
]


def test_a_batched_encoding_gives_each_text_the_vectors_it_gets_alone():
    # Batches of three sorted by length: padded batch-mates in every batch. With the packaged graph
    # as it is, padded or same-length batch-mates moved token vectors to cosine 0.78 (the shared INT8
    # activation range); the per-text graph must give what the text gets alone (cosine >= 0.9999).
    encoder = OnnxTokenEncoder(PACKAGED_COLBERT.verified_dir(), name="colbert", threads=1, batch_size=3)
    batched = encoder.encode_documents(TEXTS)
    assert encoder._per_text_session() is not None  # the per-text graph ran, not the one-at-a-time path
    for text, together in zip(TEXTS, batched, strict=True):
        (alone,) = encoder.encode_documents([text])
        assert together.shape == alone.shape and together.dtype == np.float32
        assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
        assert float(np.min(np.sum(together * alone, axis=1))) >= 0.9999, text
    assert batched[-1].shape[0] == 180  # the cut keeps max_document_tokens tokens
    assert encoder.encode_documents([]) == []
