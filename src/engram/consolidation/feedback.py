"""Playbook outcomes from a consolidation reply: which of its procedural updates count."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from engram.consolidation import guards
from engram.consolidation.schema import ProceduralUpdate
from engram.errors import InvalidInput
from engram.models import ProceduralMemory, check_playbook
from engram.storage.base import PlaybookFeedback


def playbook_feedback(
    updates: Sequence[ProceduralUpdate],
    playbooks: Sequence[ProceduralMemory],
    batch: set[str],
    max_text_chars: int,
    drop: Callable[[str, str], None],
) -> list[PlaybookFeedback]:
    """The outcomes that count: for a playbook of this user (``playbooks``), told by turns of this
    ``batch`` (ids), each turn counted once per playbook (a reply listing one success twice counted it
    twice); better steps only with a failure, and only within a playbook's limits (the outcome counts
    either way). Every update left out is passed to ``drop`` with its reason."""
    known = {p.id: p for p in playbooks}
    feedback: list[PlaybookFeedback] = []
    counted: set[tuple[str, str]] = set()  # (playbook, turn)
    for update in updates:
        evidence = guards.cited(update.evidence_episode_ids, batch)
        if update.playbook_id not in known:
            drop(update.playbook_id, "feedback for a playbook this user does not have")
            continue
        if not evidence:
            drop(update.playbook_id, f"{update.outcome} without evidence in the user's own words")
            continue
        if any((update.playbook_id, e) in counted for e in evidence):
            drop(update.playbook_id, f"{update.outcome} counted already from the same turns")
            continue
        counted.update((update.playbook_id, e) for e in evidence)
        refined = (
            tuple(update.refined_steps) if update.refined_steps and update.outcome == "failure" else None
        )
        if refined:
            try:
                check_playbook(
                    known[update.playbook_id].model_copy(update={"steps": list(refined)}), max_text_chars
                )
            except InvalidInput as exc:
                drop(update.playbook_id, f"refined steps not storable: {exc}")
                refined = None
        feedback.append(PlaybookFeedback(update.playbook_id, update.outcome == "success", refined))
    return feedback
