"""The demo's sample and its questions: two users (a supersession, a playbook) and a catalog, and the
recalls that show what Engram does with them.

``engram demo`` (engram.interfaces.cli.demo) loads them into the store ``engram serve`` uses, so the
service, the inspector and the CLI show them at once; a store whose demo users already have memories
gets nothing (loaded_already), so the sample is never written twice nor mixed into someone's memories.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from typing import Any

from engram.memory import Engram
from engram.models import Hit, MemoryType

SAMPLES = ("demo_catalog.json", "demo_sarah.json", "demo_marco.json")  # catalog first: users cite it
USERS = ("sarah", "marco")  # the users of the sample files
MEMORY_TYPES: tuple[MemoryType, ...] = ("episodic", "semantic", "procedural")
HITS_SHOWN = 4


@dataclass(frozen=True)
class DemoQuery:
    user: str
    query: str
    include_superseded: bool = False
    note: str = ""  # printed under the question: what its hits show
    min_confidence: float | None = None  # as the agent and MCP recall: below it, nothing is shown

    @property
    def options(self) -> dict[str, bool]:
        """The recall options beyond the defaults, as the demo prints them."""
        return {"include_superseded": True} if self.include_superseded else {}


QUERIES = (
    DemoQuery("sarah", "which city does Sarah live in?"),
    DemoQuery("sarah", "which city does Sarah live in?", include_superseded=True),
    DemoQuery("sarah", "my kitchen sensor went offline"),
    DemoQuery("sarah", "will the signal get through thick walls?"),
    DemoQuery("marco", "which pgvector version is prod on?"),
    DemoQuery(
        "marco",
        "where does sarah live?",
        # without it, marco's unrelated hits read as a recall that failed (a newcomer's walk: the four
        # hits at confidence 0.03 still looked like an answer)
        note="another user's memory: only marco's own rows and the catalog are searched, never sarah's; "
        "recalled as the agent recalls, with min_confidence 0.1",
        min_confidence=0.1,
    ),
)


def loaded_already(eng: Engram) -> list[str]:
    """The demo's users that already have memories in this store (superseded or not): loading the
    sample again would write its facts beside theirs (an earlier demo's, or a real user's)."""
    return [
        user
        for user in USERS
        if any(eng.reader(user).count(t, include_superseded=True, limit=1) for t in MEMORY_TYPES)
    ]


def other_users(eng: Engram) -> list[str]:
    """Users of the store who are not the demo's: the demo's catalog rows would join their recalls."""
    return sorted(set(eng.store.tenants()) - set(USERS))


def load_samples(eng: Engram) -> Iterator[tuple[str, dict[str, Any]]]:
    """Import each sample file; yields (file name, the import's result) as each one is written."""
    for name in SAMPLES:
        yield name, eng.import_json(_sample(name))


def ask(eng: Engram, question: DemoQuery) -> list[Hit]:
    # record_use=False: the demo shows the sample as loaded, and leaves its use counts as they were.
    return eng.for_user(question.user).recall(
        question.query,
        k=HITS_SHOWN,
        include_superseded=question.include_superseded,
        record_use=False,
        min_confidence=question.min_confidence,
    )


def _sample(name: str) -> dict[str, Any] | list[Any]:
    document = json.loads(resources.files("engram.data").joinpath(name).read_text(encoding="utf-8"))
    if not isinstance(document, dict | list):
        raise ValueError(f"{name} is not an import document")
    return document
