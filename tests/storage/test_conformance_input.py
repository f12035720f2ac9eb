"""Input every backend refuses alike, through Engram on each Store backend (the ``store`` fixture): a NUL
character (U+0000) in a text or in metadata is InvalidInput and writes nothing. PostgreSQL's text and
jsonb cannot hold it, so without the check the same call was a storage error there and a write on
SQLite."""

from __future__ import annotations

import pytest

from engram import Engram
from engram.errors import InvalidInput
from engram.settings import load_settings


@pytest.fixture
def eng(store, embedder, token_encoder):
    engram = Engram(store, embedder, None, token_encoder=token_encoder, settings=load_settings())
    yield engram
    engram.use_counts.close()  # the store fixture closes the store


def test_a_nul_character_is_refused_and_writes_nothing(eng):
    mem = eng.for_user("sarah")
    calls = [
        lambda: mem.remember_turn("my locker code is 4\x0012"),
        lambda: mem.remember_turn("my locker code is 4412", metadata={"note": "a\x00b"}),
        lambda: mem.remember_turn("my locker code is 4412", metadata={"a\x00b": "note"}),
        lambda: mem.write("Sarah's locker code is 4\x0012"),
        lambda: mem.write("", memory_type="procedural", name="open the\x00 locker"),
        lambda: mem.recall("locker\x00 code"),
    ]
    for i, call in enumerate(calls):
        with pytest.raises(InvalidInput, match="NUL"):
            call()
            pytest.fail(f"call {i} was accepted")
    assert all(mem.list(t, include_superseded=True) == [] for t in ("episodic", "semantic", "procedural"))
    kept = mem.remember_turn("my locker code is 4412", metadata={"note": "ab"})  # the same without it
    assert [h.memory.id for h in mem.recall("what is my locker code?", k=1)] == [kept.id]
