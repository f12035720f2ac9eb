"""The consolidation prompt and the duplicate judge's prompt."""

from __future__ import annotations

import json
from collections.abc import Sequence

from engram.models import EpisodicMemory, ProceduralMemory, SemanticMemory, named_speaker

ASSISTANT_CONTEXT_KEY = "assistant_context"  # metadata key: the assistant message a turn replied to
# ... cut to this by whoever stores it (the agent, the LangChain history): it is context for
# consolidation, and a runaway reply must not make every later turn too big to store.
ASSISTANT_CONTEXT_CHARS = 2_000

EXTRACT_SYSTEM = """You maintain the long-term memory of an AI assistant for ONE user. You receive the
user's recent messages (episodes, each with an id), optionally the assistant message each one replied
to (context only), and the facts and playbooks already stored. Return JSON:
{"facts": [{"text", "fact_type": "identity|preference|constraint|world", "confidence": 0..1,
            "supporting_episode_ids": [...]}],
 "playbooks": [{"name", "trigger_text", "description", "steps": [{"order", "instruction", "tool"}],
                "supporting_episode_ids": [...]}],
 "procedural_updates": [{"playbook_id", "outcome": "success|failure", "evidence_episode_ids": [...],
                         "refined_steps": [...] or null}],
 "supersessions": [{"fact_id", "new_text", "contradiction": "natural|harsh", "fact_type", "confidence",
                    "supporting_episode_ids": [...]}]}
Rules:
- Only the user's own words become facts. Never turn the assistant's advice or statements into facts.
- Every item cites the ids of the user's episodes that support it; a message with nothing durable
  (small talk, thanks, questions) yields nothing.
- Write facts as short third-person sentences that stand alone ("Sarah's dog Rex chews cables").
- If the user contradicts a stored fact, add a supersession for that fact's id: "natural" when the world
  changed (a move, a new device), "harsh" when the old fact was never true. Do not also add it as a fact.
- A playbook outcome is a success only when the user confirms it worked; advice they have not tried is
  not a success. On failure, give refined_steps if the conversation shows a better way.
- An episode with a "speaker" comes from a conversation with several people: it was said by that
  person, so a fact from it is about them, named, never about the user unless they are the user.
- Do not repeat facts that are already stored. Return empty lists when there is nothing to add."""

JUDGE_SYSTEM = """You deduplicate a user's memory. For each candidate fact, decide whether it states the
same thing as one of the listed existing facts (a repeat, possibly reworded), changes or contradicts one
(another value of the same thing: a new age, number, place, or "not any more"), or adds something new.
Return JSON: {"verdicts": [{"index": <candidate index>, "duplicate_of": "<existing fact id>" or null,
"replaces": "<existing fact id it changes>" or null}]}"""


def extraction_prompt(
    episodes: Sequence[EpisodicMemory],
    facts: Sequence[SemanticMemory],
    playbooks: Sequence[ProceduralMemory],
) -> str:
    payload = {
        "episodes": [
            {
                "id": e.id,
                "at": e.timestamp.isoformat(),
                "user_said": e.text,
                **({"speaker": speaker} if (speaker := named_speaker(e)) else {}),
                **(
                    {"assistant_said_before (context only)": e.metadata[ASSISTANT_CONTEXT_KEY]}
                    if isinstance(e.metadata.get(ASSISTANT_CONTEXT_KEY), str)
                    else {}
                ),
            }
            for e in episodes
        ],
        "stored_facts": [{"id": f.id, "text": f.text, "fact_type": f.fact_type} for f in facts],
        "stored_playbooks": [
            {
                "id": p.id,
                "name": p.name,
                "trigger_text": p.trigger_text,
                "steps": [s.instruction for s in p.steps],
            }
            for p in playbooks
        ],
    }
    return json.dumps(payload, ensure_ascii=False, indent=1)


def judge_prompt(candidates: Sequence[tuple[str, Sequence[SemanticMemory]]]) -> str:
    payload = [
        {"index": i, "candidate": text, "existing": [{"id": f.id, "text": f.text} for f in neighbours]}
        for i, (text, neighbours) in enumerate(candidates)
    ]
    return json.dumps(payload, ensure_ascii=False, indent=1)
