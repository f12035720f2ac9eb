"""The `engram` command: a thin skin over the Python API (command = method name)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from engram.errors import EngramError, ImportFileError
from engram.memory import Engram
from engram.models import Hit
from engram.storage._rows import search_text_of

app = typer.Typer(help="Engram: persistent, multi-tenant memory for LLM agents.", no_args_is_help=True)
catalog_app = typer.Typer(help="Manage the shared catalog (admin).", no_args_is_help=True)
app.add_typer(catalog_app, name="catalog")
console = Console()

StoreOpt = Annotated[
    str | None,
    typer.Option("--store", envvar="ENGRAM_STORE", help="store URL (default: $ENGRAM_HOME/engram.db)"),
]
UserOpt = Annotated[str, typer.Option("--user", "-u", help="the tenant (user id)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]


@contextmanager
def _engram(store: str | None, **settings: Any) -> Iterator[Engram]:
    """Open Engram; turn our errors into a one-line message and exit code 1."""
    try:
        with Engram.open(store, **settings) as eng:
            yield eng
    except EngramError as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(1) from None


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")


def print_hits(hits: list[Hit], explain: bool) -> None:
    if not hits:
        console.print("  (no hits)")
    for hit in hits:
        m = hit.memory
        text = search_text_of(m).replace("\n", " | ")
        flag = " [yellow](superseded)[/yellow]" if getattr(m, "superseded_by", None) else ""
        console.print(
            f"  {hit.rank}. [cyan]{m.memory_type:<10}[/cyan] score={hit.score:.3g}  {text}{flag}  "
            f"[dim]{m.id}[/dim]",
            highlight=False,
        )
        if explain:
            console.print(f"     [dim]{format_explain(hit.explain)}[/dim]", highlight=False)


def format_explain(explain: dict[str, Any]) -> str:
    parts = []
    for key, value in explain.items():
        if value is None:
            continue
        parts.append(f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}")
    return " ".join(parts)


@app.command()
def demo(store: StoreOpt = None) -> None:
    """Load a small sample (two users, a supersession, a playbook, a catalog) into a fresh demo store
    and show recalls with their explain breakdown."""
    from engram.demo import run_demo

    try:
        run_demo(store, console)
    except EngramError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None


@app.command("import")
def import_(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="JSON file to import")],
    user: Annotated[str | None, typer.Option("--user", "-u", help="user to import into")] = None,
    store: StoreOpt = None,
) -> None:
    """Import a user's memories (JSON object) or catalog items (JSON array). All or nothing."""
    try:
        document = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        console.print(f"[red]error:[/red] {file} is not valid JSON: {exc}")
        raise typer.Exit(1) from None
    with _engram(store) as eng:
        if isinstance(document, list) and user:
            raise ImportFileError("a JSON array is a catalog file; it takes no --user")
        result = eng.import_json(document, user_id=user, progress=True)
    counts = ", ".join(f"{v} {k}" for k, v in result.items() if isinstance(v, int) and v)
    console.print(f"imported {counts or 'nothing'}")


@app.command()
def recall(
    query: str,
    user: UserOpt,
    k: Annotated[int, typer.Option("-k", help="number of hits")] = 10,
    memory_type: Annotated[
        list[str] | None, typer.Option("--type", "-t", help="restrict to these memory types")
    ] = None,
    no_catalog: Annotated[bool, typer.Option("--no-catalog", help="leave out catalog rows")] = False,
    include_superseded: Annotated[bool, typer.Option(help="also return superseded rows")] = False,
    explain: Annotated[bool, typer.Option("--explain", help="show each hit's score breakdown")] = False,
    as_json: JsonOpt = False,
    store: StoreOpt = None,
) -> None:
    """Recall across all memory types and the catalog."""
    with _engram(store) as eng:
        hits = eng.for_user(user).recall(
            query,
            k=k,
            memory_types=memory_type or None,  # type: ignore[arg-type]
            include_catalog=not no_catalog,
            include_superseded=include_superseded,
        )
    if as_json:
        _print_json([h.model_dump(mode="json") for h in hits])
    else:
        print_hits(hits, explain)


@app.command()
def remember(
    text: str,
    user: UserOpt,
    session: Annotated[str | None, typer.Option(help="session id")] = None,
    store: StoreOpt = None,
) -> None:
    """Store a user turn (episodic memory)."""
    with _engram(store) as eng:
        row = eng.for_user(user).remember_turn(text, session_id=session)
    _print_json(row.model_dump(mode="json"))


@app.command()
def write(
    text: str,
    user: UserOpt,
    memory_type: Annotated[str, typer.Option("--type", "-t", help="semantic or procedural")] = "semantic",
    fact_type: Annotated[str, typer.Option(help="identity, preference, constraint or world")] = "identity",
    confidence: float = 1.0,
    supersedes: Annotated[str | None, typer.Option(help="id of the fact this one replaces")] = None,
    contradiction: Annotated[str | None, typer.Option(help="natural or harsh")] = None,
    name: Annotated[str | None, typer.Option(help="playbook name (procedural)")] = None,
    trigger: Annotated[str, typer.Option(help="when the playbook applies (procedural)")] = "",
    step: Annotated[list[str] | None, typer.Option(help="a playbook step, in order (repeat)")] = None,
    store: StoreOpt = None,
) -> None:
    """Write a fact or a playbook, optionally superseding an older one."""
    with _engram(store) as eng:
        row = eng.for_user(user).write(
            text,
            memory_type=memory_type,  # type: ignore[arg-type]
            fact_type=fact_type,  # type: ignore[arg-type]
            confidence=confidence,
            supersedes_id=supersedes,
            contradiction=contradiction,  # type: ignore[arg-type]
            name=name,
            trigger_text=trigger,
            steps=[{"order": i, "instruction": s} for i, s in enumerate(step or [], start=1)],
        )
    _print_json(row.model_dump(mode="json"))


@app.command()
def get(memory_id: str, user: UserOpt, store: StoreOpt = None) -> None:
    """Show one memory (yours, or a catalog row)."""
    with _engram(store) as eng:
        _print_json(eng.for_user(user).get(memory_id).model_dump(mode="json"))


@app.command()
def history(memory_id: str, user: UserOpt, store: StoreOpt = None) -> None:
    """Show the supersession chain containing a memory, oldest first."""
    with _engram(store) as eng:
        _print_json([m.model_dump(mode="json") for m in eng.for_user(user).history(memory_id)])


@app.command()
def forget(memory_id: str, user: UserOpt, store: StoreOpt = None) -> None:
    """Delete one of your memories for good (an audit tombstone without text remains)."""
    with _engram(store) as eng:
        _print_json(eng.for_user(user).forget(memory_id).model_dump(mode="json"))


@app.command("list")
def list_(
    user: UserOpt,
    memory_type: Annotated[str, typer.Option("--type", "-t")] = "semantic",
    include_superseded: bool = False,
    limit: int = 50,
    offset: int = 0,
    store: StoreOpt = None,
) -> None:
    """List your memories of one type, newest first."""
    with _engram(store) as eng:
        rows = eng.for_user(user).list(
            memory_type,  # type: ignore[arg-type]
            include_superseded=include_superseded,
            limit=limit,
            offset=offset,
        )
    _print_json([m.model_dump(mode="json") for m in rows])


@app.command()
def info(store: StoreOpt = None) -> None:
    """Show where the store is, its embedding model and row counts."""
    with _engram(store, rerank=False) as eng:
        stats = eng.store.stats() if hasattr(eng.store, "stats") else {}
    _print_json(stats)


@catalog_app.command("add")
def catalog_add(
    text: str,
    title: Annotated[str, typer.Option(help="short title")] = "",
    store: StoreOpt = None,
) -> None:
    """Add a catalog item, visible to every user."""
    with _engram(store) as eng:
        _print_json(eng.catalog.add(text, title=title).model_dump(mode="json"))


@catalog_app.command("list")
def catalog_list(limit: int = 50, offset: int = 0, store: StoreOpt = None) -> None:
    """List catalog items, newest first."""
    with _engram(store) as eng:
        _print_json([m.model_dump(mode="json") for m in eng.catalog.list(limit=limit, offset=offset)])


@catalog_app.command("forget")
def catalog_forget(memory_id: str, store: StoreOpt = None) -> None:
    """Delete a catalog item."""
    with _engram(store) as eng:
        _print_json(eng.catalog.forget(memory_id).model_dump(mode="json"))
