"""The demo's sample and its questions: two users (a supersession, a playbook) and a catalog, loaded
into a store of its own, and the recalls that show what Engram does with them.

``engram demo`` (engram.interfaces.cli.demo) prints them; the sample goes to its own store
($ENGRAM_HOME/demo.db, recreated on every run) so it never mixes with, or wipes, the user's memories in
engram.db.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from engram.memory import Engram
from engram.models import Hit
from engram.settings import EngramSettings

SAMPLES = ("demo_catalog.json", "demo_sarah.json", "demo_marco.json")  # catalog first: users cite it
HITS_SHOWN = 4


@dataclass(frozen=True)
class DemoQuery:
    user: str
    query: str
    include_superseded: bool = False

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
    DemoQuery("marco", "where does sarah live?"),  # another tenant: Sarah's rows never show up
)


def fresh_demo_store(settings: EngramSettings) -> str:
    """The URL of the demo's own store, emptied: $ENGRAM_HOME/demo.db and its WAL files removed."""
    path = settings.home / "demo.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return f"sqlite:///{path}"


def load_samples(eng: Engram) -> Iterator[tuple[str, dict[str, Any]]]:
    """Import each sample file; yields (file name, the import's result) as each one is written."""
    for name in SAMPLES:
        yield name, eng.import_json(_sample(name))


def ask(eng: Engram, question: DemoQuery) -> list[Hit]:
    return eng.for_user(question.user).recall(
        question.query, k=HITS_SHOWN, include_superseded=question.include_superseded
    )


def _sample(name: str) -> dict[str, Any] | list[Any]:
    document = json.loads(resources.files("engram.data").joinpath(name).read_text(encoding="utf-8"))
    if not isinstance(document, dict | list):
        raise ValueError(f"{name} is not an import document")
    return document
