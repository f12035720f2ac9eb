"""`engram demo`: a fresh sample store, a few recalls with their explain breakdown, and the commands to
try next on that store.

The sample goes to its own store ($ENGRAM_HOME/demo.db, recreated on every run) so it never mixes with,
or wipes, the user's memories in engram.db; the suggested commands therefore carry its --store.
"""

from __future__ import annotations

import json
import shlex
from importlib import resources
from pathlib import Path

from rich.console import Console

from engram.memory import Engram
from engram.settings import load_settings

QUERIES = [
    ("sarah", "which city does Sarah live in?", {}),
    ("sarah", "which city does Sarah live in?", {"include_superseded": True}),
    ("sarah", "my kitchen sensor went offline", {}),
    ("sarah", "will the signal get through thick walls?", {}),
    ("marco", "which pgvector version is prod on?", {}),
    ("marco", "where does sarah live?", {}),  # another tenant: Sarah's rows never show up
]


def _sample(name: str) -> object:
    return json.loads(resources.files("engram.data").joinpath(name).read_text(encoding="utf-8"))


NEXT = [
    ("recall", "where does Sarah live?", "--user", "sarah", "--explain"),
    ("recall", "where does Sarah live?", "--user", "sarah", "--include-superseded"),
    ("list", "--user", "marco"),
    ("catalog", "list"),
]


def run_demo(store: str | None, console: Console) -> None:
    from engram.interfaces.cli import print_hits

    settings = load_settings()
    if store is None:
        path = settings.home / "demo.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        store = f"sqlite:///{path}"
    console.print(f"[bold]Engram demo[/bold] — store: {store}", soft_wrap=True)
    with Engram.from_settings(settings, store) as eng:
        for name in ("demo_catalog.json", "demo_sarah.json", "demo_marco.json"):
            result = eng.import_json(_sample(name))  # type: ignore[arg-type]
            counts = ", ".join(f"{v} {k}" for k, v in result.items() if isinstance(v, int) and v)
            console.print(f"loaded {name}: {counts}")
        for user, query, options in QUERIES:
            opts = f" {options}" if options else ""
            console.print(f"\n[bold]{user}[/bold] asks: [italic]{query}[/italic]{opts}")
            hits = eng.for_user(user).recall(query, k=4, **options)
            print_hits(hits, explain=True)
    console.print("\n[bold]Try it yourself[/bold] (the sample is in its own store, hence --store):")
    for args in NEXT:
        console.print(f"  {shlex.join(['engram', *args, '--store', store])}", soft_wrap=True, highlight=False)
