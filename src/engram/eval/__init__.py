"""Retrieval evaluation: load a corpus with gold keys, run questions, compute R@K and MRR."""
