"""Commands on memories: import/export, remember-turn, write, recall, get, history, forget, list, info,
the catalog, and the demo."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Annotated, Literal

import typer

from engram.errors import EngramError, ImportFileError, InvalidInput
from engram.interfaces.cli.common import (
    JsonOpt,
    StoreOpt,
    UserOpt,
    _engram,
    _fail,
    _print_json,
    app,
    catalog_app,
    console,
    counted,
    err_console,
    file_kind,
    note_unknown_user,
    print_hits,
    written_whole,
)
from engram.interfaces.cli.output import print_forgotten, print_info, print_memories, print_record
from engram.models import Contradiction, FactType, MemoryType
from engram.recall_filter import MetadataValue
from engram.validation import check_types


@app.command()
def demo(
    store: StoreOpt = None,
    explain: Annotated[bool, typer.Option("--explain", help="each hit's score breakdown too")] = False,
) -> None:
    """Load a small sample (two users, a supersession, a playbook, a catalog) into the store `engram
    serve` uses (or --store), show a few recalls (with --explain, how each score was made), and print a
    key for sarah; a store whose demo users have memories already is left as it is."""
    from engram.interfaces.cli.demo import run_demo

    try:
        run_demo(store, console, explain)
    except EngramError as exc:
        raise _fail(exc) from None


@app.command("import")
def import_(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="JSON file to import")],
    user: Annotated[str | None, typer.Option("--user", "-u", help="user to import into")] = None,
    all_: Annotated[
        bool, typer.Option("--all", help="FILE is a whole-store export (`engram export`): load it all")
    ] = False,
    allow_no_trailer: Annotated[
        bool,
        typer.Option(
            "--allow-no-trailer",
            help="with --all: import an export that has no trailer (an older Engram's; a cut one "
            "cannot be told apart from it)",
        ),
    ] = False,
    as_json: JsonOpt = False,
    store: StoreOpt = None,
) -> None:
    """Import a user's memories (JSON object) or catalog items (JSON array); an invalid file writes
    nothing, and records already imported are skipped. With --all, a whole store written by `engram
    export`: checked whole first (a cut or changed file writes nothing), and run again to resume."""
    if all_:
        _import_all(file, user, store, allow_no_trailer, as_json)
        return
    if allow_no_trailer:
        raise _fail("--allow-no-trailer goes with --all")
    try:
        document = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        export = " (it is an export, of `engram export` or `engram users export`: add --all)"
        raise _fail(
            f"{file} is not valid JSON: {exc}{export if file_kind(file) == 'export' else ''}"
        ) from None
    with _engram(store) as eng:
        if isinstance(document, list) and user:
            raise ImportFileError("a JSON array is a catalog file; it takes no --user")
        result = eng.import_json(document, user_id=user, progress=console.is_terminal)
    if as_json:
        _print_json(result)
        return
    kinds = ("episodic", "semantic", "procedural", "catalog")
    counts = ", ".join(f"{result[k]} {k}" for k in kinds if result.get(k))
    skipped = f"; skipped {result['skipped']} already there" if result.get("skipped") else ""
    console.print(f"imported {counts or 'nothing'}{skipped}", highlight=False)


def _import_all(
    file: Path, user: str | None, store: str | None, allow_no_trailer: bool, as_json: bool
) -> None:
    from engram.transfer import check_export, import_store

    if user:
        raise _fail("--all loads every user of an export; it takes no --user")
    try:  # before the store is opened: a cut or changed file must not leave an empty store behind
        with file.open(encoding="utf-8") as lines:
            check_export(lines, allow_no_trailer)
        with _engram(store) as eng, file.open(encoding="utf-8") as lines:
            counts = import_store(eng, lines, allow_no_trailer=allow_no_trailer, progress=console.is_terminal)
            admins = [k.id for k in eng.store.list_keys(None) if k.user_id is None and k.revoked_at is None]
    except UnicodeDecodeError as exc:
        raise _fail(f"{file} is not UTF-8 text: {exc}") from None
    except EngramError as exc:  # a user document given --all: say so (a newcomer's walk got "not JSON")
        document = file_kind(file) == "document"
        why = f"{exc} (a user document or a catalog file: import it without --all)" if document else exc
        raise _fail(why) from None
    if len(admins) > 1:  # the export's admin key beside the one this store had (its `engram serve`)
        err_console.print(
            f"warning: this store now has {len(admins)} live admin keys ({', '.join(admins)}): revoke "
            "those not meant to stay (engram keys revoke ID), or set ENGRAM_ADMIN_KEY, which revokes the "
            "others at the next `engram serve`",
            style="yellow",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
    if as_json:
        _print_json(counts)
        return
    skipped = counts.pop("skipped", 0)
    summary = ", ".join(f"{v} {k}" for k, v in counts.items()) or "nothing"
    console.print(
        f"imported {summary}" + (f"; skipped {skipped} already there" if skipped else ""), highlight=False
    )


@app.command()
def export(
    file: Annotated[str, typer.Argument(help="JSON Lines file to write; - for stdout")],
    keys: Annotated[bool, typer.Option("--keys", help="include the API keys (as hashes)")] = False,
    store: StoreOpt = None,
) -> None:
    """Write the whole store (every user, the catalog, tombstones, consolidation marks; API keys with
    --keys) as JSON Lines, for `engram import --all` into any store of any backend."""
    from engram.transfer import export_store

    with _engram(store, existing=True, rerank=False, late_interaction=False) as eng:
        if file == "-":
            counts = export_store(eng, sys.stdout, keys=keys)
        else:
            with written_whole(file) as out:
                counts = export_store(eng, out, keys=keys)
    summary = f"exported {counted(counts) or 'nothing'}"
    err_console.print(summary, highlight=False)


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
    min_confidence: Annotated[
        float | None,
        typer.Option(min=0.0, max=1.0, help="show only hits whose confidence (0-1) reaches this"),
    ] = None,
    record_use: Annotated[
        bool,
        typer.Option(
            "--record-use",
            help="count the returned facts as used (use_count + 1), as an agent's recall does; a look "
            "from here changes nothing by default",
        ),
    ] = False,
    session: Annotated[str | None, typer.Option("--session-id", help="only this session's turns")] = None,
    time_from: Annotated[
        str | None, typer.Option("--from", help="only rows whose event time is at or after this (ISO 8601)")
    ] = None,
    time_to: Annotated[
        str | None, typer.Option("--to", help="only rows whose event time is before this (ISO 8601)")
    ] = None,
    meta: Annotated[
        list[str] | None,
        typer.Option(
            "--meta",
            help="KEY=VALUE: only rows whose metadata has it (repeatable; VALUE is a number, true/false "
            'or text; "5" in JSON quotes is the text 5)',
        ),
    ] = None,
    as_json: JsonOpt = False,
    store: StoreOpt = None,
) -> None:
    """Recall across all memory types and the catalog; each hit shows its event date and confidence.
    Read-only unless --record-use: use counts weigh in the ranking, so a look must not change them."""
    with _engram(store, existing=True) as eng:
        hits = eng.for_user(user).recall(
            query,
            k=k,
            memory_types=check_types(memory_type) if memory_type else None,
            include_catalog=not no_catalog,
            include_superseded=include_superseded,
            min_confidence=min_confidence,
            record_use=record_use,
            session_id=session,
            time_from=_when(time_from, "--from"),
            time_to=_when(time_to, "--to"),
            metadata=_pairs(meta),
        )
        note_unknown_user(eng, user)
    if as_json:
        _print_json([h.model_dump(mode="json") for h in hits])
    else:
        print_hits(hits, explain, min_confidence, floor=eng.settings.min_confidence)


def _when(value: str | None, option: str) -> datetime | None:
    try:
        return None if value is None else datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInput(f"{option} must be an ISO 8601 date-time such as 2024-05-01T10:00:00Z") from None


def _pairs(pairs: list[str] | None) -> dict[str, MetadataValue] | None:
    """--meta KEY=VALUE options as a metadata filter: a VALUE JSON reads as a scalar is that scalar."""
    if not pairs:
        return None
    metadata: dict[str, MetadataValue] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep:
            raise InvalidInput(f"--meta {pair!r}: expected KEY=VALUE")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        metadata[key] = value if isinstance(value, str | bool | int | float) else raw
    return metadata


@app.command("record-outcome")
def record_outcome(
    playbook_id: Annotated[str, typer.Argument(help="the playbook's id")],
    user: UserOpt,
    success: Annotated[
        bool | None, typer.Option("--success/--failure", help="whether following the playbook worked")
    ] = None,
    as_json: JsonOpt = False,
    store: StoreOpt = None,
) -> None:
    """Record one outcome of a playbook (no LLM): its success or failure count goes up by one, and
    recall ranks it by them."""
    if success is None:  # click's own words named --success only
        raise _fail("say how it went: --success or --failure")
    with _engram(store, existing=True) as eng:
        row = eng.for_user(user).record_outcome(playbook_id, success)
    print_record(row, as_json)


@app.command("remember-turn")
def remember_turn(
    text: Annotated[str, typer.Argument(help="the user's message, verbatim")],
    user: UserOpt,
    session: Annotated[
        str | None,
        typer.Option(
            "--session-id", "--session", help="the conversation; the turn is searched with its previous one"
        ),
    ] = None,
    at: Annotated[
        str | None,
        typer.Option("--at", help="when it was said (ISO 8601; default: now), e.g. replaying a log"),
    ] = None,
    as_json: JsonOpt = False,
    store: StoreOpt = None,
) -> None:
    """Store a user turn verbatim (episodic memory)."""
    with _engram(store) as eng:
        row = eng.for_user(user).remember_turn(text, session_id=session, at=_when(at, "--at"))
    print_record(row, as_json)


# The command's name before it took the facade's verb (engram.interfaces.vocabulary): scripts keep working.
app.command("remember", hidden=True, help="Old name of `remember-turn`.")(remember_turn)


@app.command()
def write(
    user: UserOpt,
    text: Annotated[
        str, typer.Argument(help="the fact; a playbook (--type procedural) may leave it out")
    ] = "",
    memory_type: Annotated[
        Literal["semantic", "procedural"], typer.Option("--type", "-t", help="a fact or a playbook")
    ] = "semantic",
    fact_type: Annotated[
        FactType, typer.Option(help="identity, preference, constraint or world")
    ] = "identity",
    confidence: float = 1.0,
    supersedes: Annotated[
        str | None, typer.Option("--supersedes-id", "--supersedes", help="id of the fact this one replaces")
    ] = None,
    contradiction: Annotated[Contradiction | None, typer.Option(help="natural or harsh")] = None,
    name: Annotated[str | None, typer.Option(help="playbook name (procedural)")] = None,
    trigger: Annotated[
        str, typer.Option("--trigger-text", "--trigger", help="when the playbook applies (procedural)")
    ] = "",
    step: Annotated[list[str] | None, typer.Option(help="a playbook step, in order (repeat)")] = None,
    as_json: JsonOpt = False,
    store: StoreOpt = None,
) -> None:
    """Write a fact or a playbook, optionally superseding an older one."""
    with _engram(store) as eng:
        row = eng.for_user(user).write(
            text,
            memory_type=memory_type,
            fact_type=fact_type,
            confidence=confidence,
            supersedes_id=supersedes,
            contradiction=contradiction,
            name=name,
            trigger_text=trigger,
            steps=[{"order": i, "instruction": s} for i, s in enumerate(step or [], start=1)],
        )
    print_record(row, as_json)


@app.command()
def get(memory_id: str, user: UserOpt, as_json: JsonOpt = False, store: StoreOpt = None) -> None:
    """Show one memory (yours, or a catalog row)."""
    with _engram(store, existing=True) as eng:
        row = eng.for_user(user).get(memory_id)
    print_record(row, as_json)


@app.command()
def history(memory_id: str, user: UserOpt, as_json: JsonOpt = False, store: StoreOpt = None) -> None:
    """Show the supersession chain containing a memory, oldest first."""
    with _engram(store, existing=True) as eng:
        rows = eng.for_user(user).history(memory_id)
    print_memories(rows, as_json)


@app.command()
def forget(memory_id: str, user: UserOpt, as_json: JsonOpt = False, store: StoreOpt = None) -> None:
    """Delete one of your memories for good (an audit tombstone without text remains)."""
    if memory_id.startswith("cat_"):  # the facade's own message names its Python handle, not a command
        raise _fail(f"{memory_id} is a catalog row, shared by every user: `engram catalog forget` removes it")
    with _engram(store, existing=True) as eng:
        tombstone = eng.for_user(user).forget(memory_id)
    print_forgotten(tombstone, as_json)


@app.command("list")
def list_(
    user: UserOpt,
    memory_type: Annotated[
        MemoryType | None,
        typer.Option(
            "--type",
            "-t",
            help="episodic, semantic (the default) or procedural (the catalog: `engram catalog list`)",
        ),
    ] = None,
    include_superseded: bool = False,
    limit: int = 50,
    offset: int = 0,
    as_json: JsonOpt = False,
    store: StoreOpt = None,
) -> None:
    """List your memories of one type (facts unless --type says otherwise), newest first, one a line
    (the id last)."""
    if memory_type == "catalog":  # the facade's own message names its Python handle, not this command
        raise _fail("the catalog is not a user's memory: list it with `engram catalog list`")
    listed = memory_type or "semantic"
    with _engram(store, existing=True) as eng:
        rows = eng.for_user(user).list(
            listed, include_superseded=include_superseded, limit=limit, offset=offset
        )
        others = {
            t: n
            for t in ("episodic", "procedural")
            if memory_type is None and (n := eng.reader(user).count(t, include_superseded=False, limit=1000))
        }
        if not rows and not others:
            note_unknown_user(eng, user)
    print_memories(rows, as_json, none=f"no {listed} memories")
    if others:  # a newcomer's `engram list --user marco` showed his facts and not that he had turns
        also = ", ".join(f"{'1000+' if n >= 1000 else n} {t}" for t, n in others.items())
        note = f"(facts only; {user} also has {also}: --type to list them)"
        err_console.print(note, style="dim", markup=False, emoji=False, highlight=False)


@app.command()
def info(as_json: JsonOpt = False, store: StoreOpt = None) -> None:
    """Show where the store is, its embedding model and row counts."""
    with _engram(store, existing=True, rerank=False) as eng:
        stats = eng.store.stats() if hasattr(eng.store, "stats") else {}
    print_info(stats, as_json)


@catalog_app.command("add")
def catalog_add(
    text: str,
    title: Annotated[str, typer.Option(help="short title")] = "",
    as_json: JsonOpt = False,
    store: StoreOpt = None,
) -> None:
    """Add a catalog item, visible to every user."""
    with _engram(store) as eng:
        row = eng.catalog.add(text, title=title)
    print_record(row, as_json)


@catalog_app.command("list")
def catalog_list(limit: int = 50, offset: int = 0, as_json: JsonOpt = False, store: StoreOpt = None) -> None:
    """List catalog items, newest first, one a line (the id last)."""
    with _engram(store, existing=True) as eng:
        rows = eng.catalog.list(limit=limit, offset=offset)
    print_memories(rows, as_json, none="no catalog items")


@catalog_app.command("get")
def catalog_get(memory_id: str, as_json: JsonOpt = False, store: StoreOpt = None) -> None:
    """Show one catalog item."""
    with _engram(store, existing=True) as eng:
        row = eng.catalog.get(memory_id)
    print_record(row, as_json)


@catalog_app.command("forget")
def catalog_forget(memory_id: str, as_json: JsonOpt = False, store: StoreOpt = None) -> None:
    """Delete a catalog item."""
    with _engram(store, existing=True) as eng:
        tombstone = eng.catalog.forget(memory_id)
    print_forgotten(tombstone, as_json)


# -- the service ------------------------------------------------------------------------------------
