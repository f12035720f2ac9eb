import pytest

from engram.retrieval.fusion import rrf


def test_rrf_docstring_example():
    scores = rrf({"bm25": ["a", "b"], "dense": ["x", "y", "a"]}, k=30)
    assert scores["a"] == pytest.approx(1 / 31 + 1 / 33)
    assert scores["a"] == pytest.approx(0.06256, abs=1e-5)
    assert scores["b"] == pytest.approx(1 / 32)
    assert scores["x"] == pytest.approx(1 / 31)
    assert list(scores) == ["a", "x", "b", "y"]  # descending; ties keep first-seen order


def test_rrf_only_ranks_matter_and_k_controls_top_weight():
    tight = rrf({"l1": ["a", "b"], "l2": ["b", "a"]}, k=1)
    assert tight["a"] == pytest.approx(tight["b"])
    assert rrf({"l": []}) == {}
    with pytest.raises(ValueError):
        rrf({"l": ["a"]}, k=0)
