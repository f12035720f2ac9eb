"""`engram demo`: a fresh sample store (engram.demo), a few recalls with their explain breakdown, and
the commands to try next on that store; they carry its --store, since the sample is in its own store."""

from __future__ import annotations

import shlex

from rich.console import Console

from engram.demo import QUERIES, ask, fresh_demo_store, load_samples
from engram.interfaces.cli.common import print_hits
from engram.memory import Engram
from engram.settings import load_settings

NEXT = [
    ("recall", "where does Sarah live?", "--user", "sarah", "--explain"),
    ("recall", "where does Sarah live?", "--user", "sarah", "--include-superseded"),
    ("list", "--user", "marco"),
    ("catalog", "list"),
]


def run_demo(store: str | None, console: Console) -> None:
    settings = load_settings()
    if store is None:
        store = fresh_demo_store(settings)
    console.print(f"[bold]Engram demo[/bold] — store: {store}", soft_wrap=True)
    with Engram.from_settings(settings, store) as eng:
        for name, result in load_samples(eng):
            counts = ", ".join(
                f"{v} {k}" for k, v in result.items() if isinstance(v, int) and v and k != "written"
            )
            console.print(f"loaded {name}: {counts}")
        for question in QUERIES:
            opts = f" {question.options}" if question.options else ""
            console.print(f"\n[bold]{question.user}[/bold] asks: [italic]{question.query}[/italic]{opts}")
            print_hits(ask(eng, question), explain=True)
    console.print("\n[bold]Try it yourself[/bold] (the sample is in its own store, hence --store):")
    for args in NEXT:
        console.print(f"  {shlex.join(['engram', *args, '--store', store])}", soft_wrap=True, highlight=False)
