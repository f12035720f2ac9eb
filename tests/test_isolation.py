"""Two tenants, hostile ids: a tenant can never read, change or learn of another tenant's rows."""

import pytest

from engram import InvalidInput, NotFound


@pytest.fixture
def tenants(eng):
    sarah, bob = eng.for_user("sarah"), eng.for_user("bob")
    rows = {
        "ep": bob.remember_turn("Bob's garage code is 9931, the door sticks"),
        "fact": bob.write("Bob lives at 12 Harbour Road, Leith"),
        "playbook": bob.write(
            "",
            memory_type="procedural",
            name="Bob's secret reset",
            trigger_text="garage door sticks",
            steps=[{"order": 1, "instruction": "kick it"}],
        ),
    }
    sarah.write("Sarah lives in Edinburgh")
    return sarah, bob, rows


def hostile_ids(rows):
    real = [r.id for r in rows.values()]
    return [
        *real,
        "sem_" + "A" * 22,
        "",
        " ",
        "%",
        "sem_%",
        "*",
        "' OR '1'='1",
        "sem_x'; DELETE FROM memories; --",
        real[0].upper(),
        real[1] + " ",
        "\x00",
        "cat_" + real[1][4:],
    ]


def test_reads_by_id_are_denied_exactly_like_missing_rows(tenants):
    sarah, _, rows = tenants
    for bad in hostile_ids(rows):
        for op in (sarah.get, sarah.history, sarah.forget):
            with pytest.raises(NotFound) as exc:
                op(bad)
            assert str(exc.value) == f"memory {bad!r} not found"  # same words for "not yours" and "none"


def test_cannot_supersede_another_tenants_row(tenants):
    sarah, bob, rows = tenants
    for bad in hostile_ids(rows):
        with pytest.raises(NotFound):
            sarah.write("Bob moved", supersedes_id=bad)
    assert bob.get(rows["fact"].id).superseded_by is None
    assert len(sarah.list("semantic", include_superseded=True)) == 1


def test_recall_never_returns_foreign_rows(tenants):
    sarah, bob, rows = tenants
    for query in [
        "Bob's garage code is 9931, the door sticks",
        "12 Harbour Road Leith",
        "secret reset kick it",
        "9931",
        "Bob",
        "where does bob live",
        "*",
        "garage",
    ]:
        for include_superseded in (False, True):
            hits = sarah.recall(query, k=50, include_superseded=include_superseded)
            assert all(h.memory.user_id == "sarah" for h in hits), query
    assert {h.memory.id for h in bob.recall("garage code", k=50)} >= {rows["ep"].id}


def test_provenance_cannot_cite_foreign_or_missing_episodes(tenants):
    sarah, _, rows = tenants
    own = sarah.remember_turn("I moved to Leith")
    fact = sarah.write("Sarah lives in Leith", supporting_episode_ids=[own.id, own.id])
    assert fact.supporting_episode_ids == [own.id]
    for bad in (rows["ep"].id, rows["fact"].id, "epi_" + "A" * 22):  # another's, or none: as if absent
        with pytest.raises(NotFound):
            sarah.write("Sarah likes tea", supporting_episode_ids=[own.id, bad])
    with pytest.raises(InvalidInput, match="is a semantic memory"):  # one's own fact: said what it is
        sarah.write("Sarah likes tea", supporting_episode_ids=[own.id, fact.id])
    assert len(sarah.list("semantic")) == 2


def test_lists_and_use_counts_stay_per_tenant(tenants):
    sarah, bob, rows = tenants
    assert [
        m.user_id for m in sarah.list("episodic") + sarah.list("semantic") + sarah.list("procedural")
    ] == ["sarah"]
    sarah.recall("where does bob live", k=50)
    assert bob.get(rows["fact"].id).use_count == 0


def test_user_ids_are_not_patterns(eng):
    eng.for_user("bob").write("Bob's fact")
    for lookalike in ("Bob", "bob.", "bo", "bob_"):
        assert eng.for_user(lookalike).recall("Bob's fact", k=50) == []
