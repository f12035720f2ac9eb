"""The inspector's activity log holds a bounded amount whatever the rows hold: a playbook's steps and a
fact's provenance list were kept whole (68 MiB for one user in the outside review's repro, ~13 GiB at
200 users)."""

from __future__ import annotations

import tracemalloc

from engram.interfaces.inspector import activity
from engram.interfaces.inspector.activity import ActivityLog, ForgetEvent, RecallEvent, WriteEvent, slim
from engram.models import (
    MAX_LINE_CHARS,
    MAX_NAME_CHARS,
    MAX_STEPS,
    EpisodicMemory,
    Hit,
    ProceduralMemory,
    SemanticMemory,
    Step,
    Tombstone,
    new_id,
    utcnow,
)

LONG = 16_000  # DEFAULT_MAX_TEXT_CHARS: the longest text a row can have
BLOB = {"blob": "m" * 100_000}  # metadata is not bounded by the text limit


def heaviest_rows() -> list[SemanticMemory | ProceduralMemory]:
    """A playbook and a fact as large as the API lets them be, and larger than the view shows."""
    now = utcnow()
    steps = [
        Step(order=i + 1, instruction="s" * MAX_LINE_CHARS, tool="t" * MAX_NAME_CHARS)
        for i in range(MAX_STEPS)
    ]
    playbook = ProceduralMemory(
        id=new_id("procedural"),
        text="p" * LONG,
        user_id="u",
        created_at=now,
        name="n" * MAX_NAME_CHARS,
        trigger_text="t" * MAX_LINE_CHARS,
        description="d" * LONG,
        steps=steps,
        refined_steps=steps,
        metadata=BLOB,
    )
    cited = [new_id("episodic") for _ in range(5_000)]  # a fact consolidated from many turns
    fact = SemanticMemory(
        id=new_id("semantic"),
        text="f" * LONG,
        user_id="u",
        created_at=now,
        supporting_episode_ids=cited,
        metadata=BLOB,
    )
    return [playbook, fact]


def heavy_hit(row: SemanticMemory | ProceduralMemory, rank: int) -> Hit:
    explain = {
        "note": "e" * 10_000,
        **{f"stage_{j}": 1.0 for j in range(500)},
        "nested": {"x": list(range(1000))},
    }
    return Hit(memory=row, score=1.0, rank=rank, confidence=0.5, event_time=row.created_at, explain=explain)


def test_a_kept_row_is_slim_whatever_it_holds():
    playbook, fact = (slim(row) for row in heaviest_rows())
    assert isinstance(playbook, ProceduralMemory) and isinstance(fact, SemanticMemory)
    for row in (playbook, fact):
        assert row.metadata == {} and len(row.text) <= activity.TEXT_KEPT + 1
    assert len(playbook.steps) == activity.STEPS_KEPT and playbook.refined_steps is None
    assert all(len(s.instruction) <= activity.TEXT_KEPT + 1 for s in playbook.steps)
    assert max(len(playbook.description), len(playbook.trigger_text)) <= activity.TEXT_KEPT + 1
    assert fact.supporting_episode_ids == []
    kept = activity._slim_hit(heavy_hit(fact, 1))
    assert len(kept.explain) <= activity.EXPLAIN_KEPT and "nested" not in kept.explain
    assert all(len(str(v)) <= activity.TEXT_KEPT + 1 for v in kept.explain.values())


def test_the_log_holds_a_bounded_amount_per_user():
    rows = heaviest_rows()
    hits = [heavy_hit(rows[i % 2], i + 1) for i in range(activity.HITS_PER_RECALL + 5)]
    users = 4
    log = ActivityLog()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for user in (f"u{n}" for n in range(users)):
            for _turn in range(activity.TURNS_KEPT + 2):
                now = utcnow()
                said = EpisodicMemory(
                    id=new_id("episodic"),
                    text="x" * LONG,
                    user_id=user,
                    created_at=now,
                    timestamp=now,
                    metadata=BLOB,
                )
                log.start_turn(user, slim(said))
                for n in range(activity.EVENTS_PER_TURN):  # what RecordingMemory records, heaviest first
                    if n % 3 == 0:
                        kept = [activity._slim_hit(h) for h in hits[: activity.HITS_PER_RECALL]]
                        log.add(user, RecallEvent(now, "q" * activity.TEXT_KEPT, kept, 5))
                    elif n % 3 == 1:
                        log.add(user, WriteEvent(now, slim(rows[0]), slim(rows[1])))
                    else:
                        stone = Tombstone(
                            id=rows[1].id,
                            user_id=user,
                            memory_type="semantic",
                            created_at=now,
                            forgotten_at=now,
                        )
                        log.add(user, ForgetEvent(now, stone))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # What the process really holds (tracemalloc) stays within the budget, whatever the rows hold.
    assert held < users * activity.USER_BYTES, held
    for user in (f"u{n}" for n in range(users)):
        _, turns = log.snapshot(user)
        assert sum(t.size for t in turns) <= activity.USER_BYTES
        assert turns[0].number == activity.TURNS_KEPT + 2 and turns[0].events  # the current turn is kept
        assert turns[0].dropped_events > 0  # ... and what it could not keep is counted
