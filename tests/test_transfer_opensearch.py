"""A whole store exported from SQLite into OpenSearch and back: nothing lost, nothing changed
(tests/test_transfer.py's round trip, with OpenSearch as one side)."""

from __future__ import annotations

import pytest

from tests.test_transfer import test_round_trip_between_backends_is_lossless as round_trip


@pytest.mark.parametrize(("source", "target"), [("sqlite", "opensearch"), ("opensearch", "sqlite")])
def test_round_trip_through_opensearch_is_lossless(
    source, target, tmp_path, request, embedder, token_encoder
):
    round_trip(source, target, tmp_path, request, embedder, token_encoder)
