"""The consolidation suite's single-store scenarios on an OpenSearch-backed Engram (the ``eng`` fixture
below): the compare-and-set, the batch written as one unit, no reach into other tenants' rows."""

from __future__ import annotations

import pytest

from engram import Engram
from engram.settings import EngramSettings
from tests.conftest import make_store
from tests.consolidation.test_consolidation import (  # noqa: F401
    test_a_fact_the_facade_would_refuse_is_dropped,
    test_a_turn_committed_after_a_later_stamped_one_is_still_consolidated,
    test_a_turn_forgotten_while_the_llm_reads_it_never_becomes_a_fact,
    test_llm_cannot_reach_other_tenants_rows,
    test_one_unreadable_turn_is_set_aside_and_never_blocks_the_rest,
    test_scripted_scenario_ends_with_the_right_memory,
)


@pytest.fixture
def eng(request, tmp_path, embedder, reranker, token_encoder):
    store = make_store("opensearch", tmp_path, request)
    engram = Engram(store, embedder, reranker, token_encoder=token_encoder, settings=EngramSettings())
    yield engram
    engram.close()
