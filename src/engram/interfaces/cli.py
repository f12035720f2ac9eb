"""The `engram` command: a thin skin over the Python API (command = method name)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from engram.errors import ConfigError, EngramError, ImportFileError
from engram.memory import Engram, sqlite_path
from engram.models import Hit
from engram.settings import EngramSettings, load_settings
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


def _fail(message: object) -> typer.Exit:
    console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(1)


def _settings(**overrides: Any) -> EngramSettings:
    """The settings, loaded once here at the edge; a bad one is a one-line error naming it."""
    try:
        return load_settings(**overrides)
    except EngramError as exc:
        raise _fail(exc) from None


def _store_url(store: str | None, settings: EngramSettings, *, existing: bool, why: str = "") -> str:
    """The store to open. ``existing``: a command that only reads or changes what is there refuses a
    SQLite file that does not exist (ConfigError), instead of creating an empty store and answering
    from it."""
    url = store or settings.store_url()
    path = sqlite_path(url)
    if existing and path is not None and not path.exists():
        demo = settings.home / "demo.db"
        hint = f" (the demo's sample is in --store sqlite:///{demo})" if demo.is_file() else ""
        raise ConfigError(f"no store at {path}: {why or 'nothing has been written there yet'}{hint}")
    return url


@contextmanager
def _engram(
    store: str | None, settings: EngramSettings | None = None, *, existing: bool = False, **overrides: Any
) -> Iterator[Engram]:
    """Open Engram; turn our errors into a one-line message and exit code 1."""
    try:
        resolved = settings or _settings(**overrides)
        with Engram.from_settings(resolved, _store_url(store, resolved, existing=existing)) as eng:
            yield eng
    except EngramError as exc:
        raise _fail(exc) from None


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
    all_: Annotated[
        bool, typer.Option("--all", help="FILE is a whole-store export (`engram export`): load it all")
    ] = False,
    store: StoreOpt = None,
) -> None:
    """Import a user's memories (JSON object) or catalog items (JSON array); an invalid file writes
    nothing. With --all, a whole store written by `engram export`."""
    if all_:
        _import_all(file, user, store)
        return
    try:
        document = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        console.print(f"[red]error:[/red] {file} is not valid JSON: {exc}")
        raise typer.Exit(1) from None
    with _engram(store) as eng:
        if isinstance(document, list) and user:
            raise ImportFileError("a JSON array is a catalog file; it takes no --user")
        result = eng.import_json(document, user_id=user, progress=console.is_terminal)
    counts = ", ".join(f"{v} {k}" for k, v in result.items() if isinstance(v, int) and v)
    console.print(f"imported {counts or 'nothing'}")


def _import_all(file: Path, user: str | None, store: str | None) -> None:
    from engram.transfer import import_store

    if user:
        raise _fail("--all loads every user of an export; it takes no --user")
    with _engram(store) as eng, file.open(encoding="utf-8") as lines:
        try:
            counts = import_store(eng, lines)
        except UnicodeDecodeError as exc:
            raise _fail(f"{file} is not UTF-8 text: {exc}") from None
    console.print(f"imported {', '.join(f'{v} {k}' for k, v in counts.items()) or 'nothing'}")


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
            with open(file, "w", encoding="utf-8") as out:
                counts = export_store(eng, out, keys=keys)
    summary = f"exported {', '.join(f'{v} {k}' for k, v in counts.items()) or 'nothing'}"
    Console(stderr=True).print(summary, highlight=False)


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
    with _engram(store, existing=True) as eng:
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
    with _engram(store, existing=True) as eng:
        _print_json(eng.for_user(user).get(memory_id).model_dump(mode="json"))


@app.command()
def history(memory_id: str, user: UserOpt, store: StoreOpt = None) -> None:
    """Show the supersession chain containing a memory, oldest first."""
    with _engram(store, existing=True) as eng:
        _print_json([m.model_dump(mode="json") for m in eng.for_user(user).history(memory_id)])


@app.command()
def forget(memory_id: str, user: UserOpt, store: StoreOpt = None) -> None:
    """Delete one of your memories for good (an audit tombstone without text remains)."""
    with _engram(store, existing=True) as eng:
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
    with _engram(store, existing=True) as eng:
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
    with _engram(store, existing=True, rerank=False) as eng:
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
    with _engram(store, existing=True) as eng:
        _print_json([m.model_dump(mode="json") for m in eng.catalog.list(limit=limit, offset=offset)])


@catalog_app.command("forget")
def catalog_forget(memory_id: str, store: StoreOpt = None) -> None:
    """Delete a catalog item."""
    with _engram(store, existing=True) as eng:
        _print_json(eng.catalog.forget(memory_id).model_dump(mode="json"))


# -- the service ------------------------------------------------------------------------------------
keys_app = typer.Typer(help="Manage API keys (one per user; only hashes are stored).", no_args_is_help=True)
app.add_typer(keys_app, name="keys")


@app.command()
def serve(
    host: Annotated[str, typer.Option(envvar="ENGRAM_HOST", help="interface to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(envvar="ENGRAM_PORT", help="TCP port")] = 8765,
    workers: Annotated[
        int, typer.Option(envvar="ENGRAM_WORKERS", min=1, help="server processes on the one store")
    ] = 1,
    store: StoreOpt = None,
) -> None:
    """Serve the REST API (/v1, docs at /docs), MCP (/mcp) and /healthz; --workers N for N processes."""
    import uvicorn

    from engram.auth import ApiKeys, check_admin_key
    from engram.interfaces.rest import create_app

    settings = _settings()
    admin_key = settings.admin_key.get_secret_value() if settings.admin_key else None
    if admin_key:
        try:
            check_admin_key(admin_key)  # before the models load: a weak key fails at once
        except EngramError as exc:
            raise _fail(exc) from None
    with _engram(store, settings) as eng:
        secret = settings.session_secret.get_secret_value().encode() if settings.session_secret else None
        keys = ApiKeys(eng.store, session_secret=secret)  # type: ignore[arg-type]
        if admin_key:
            revoked = keys.adopt_admin_key(admin_key)
            console.print(
                "admin key: ENGRAM_ADMIN_KEY" + (f" (older admin keys revoked: {revoked})" if revoked else "")
            )
        elif not keys.has_admin():
            key, _ = keys.create(None, label="created on first start")
            console.print(f"[bold]admin key[/bold] (shown once, keep it): {key}", highlight=False)
        console.print(f"Engram on http://{host}:{port}  (REST /v1, docs /docs, MCP /mcp)", highlight=False)
        worker = _consolidation_worker(eng)  # in this process only: one per store, whatever --workers
        try:
            if workers == 1:
                uvicorn.run(create_app(eng, keys, host=host), host=host, port=port, log_level="warning")
            else:
                _serve_processes(
                    workers, eng.settings, _store_url(store, eng.settings, existing=False), host, port
                )
        finally:
            if worker is not None:
                worker.stop()


def _serve_processes(workers: int, settings: EngramSettings, store: str, host: str, port: int) -> None:
    """uvicorn's supervisor over ``workers`` processes (engram.interfaces.rest.workers), each with its
    share of the cores for its models so they do not oversubscribe them."""
    import os
    import secrets

    import uvicorn

    os.environ["ENGRAM_STORE"] = store
    os.environ["ENGRAM_HOST"] = host
    if settings.session_secret is None:  # one inspector sign-in valid whichever process answers
        os.environ["ENGRAM_SESSION_SECRET"] = secrets.token_hex(32)
    if "model_threads" not in settings.model_fields_set:
        os.environ["ENGRAM_MODEL_THREADS"] = str(max(1, (os.cpu_count() or 1) // workers))
    console.print(f"{workers} worker processes", highlight=False)
    uvicorn.run(
        "engram.interfaces.rest.workers:app_from_environment",
        factory=True,
        workers=workers,
        host=host,
        port=port,
        log_level="warning",
    )


def _consolidation_worker(eng: Engram) -> Any:
    """Start background consolidation when an LLM is configured and the worker is on."""
    s = eng.settings
    if not s.consolidation_worker:
        console.print("consolidation worker: off (ENGRAM_CONSOLIDATION_WORKER=false)")
        return None
    if not (s.llm_base_url and s.llm_model):
        console.print("consolidation: disabled: no LLM configured (ENGRAM_LLM_BASE_URL, ENGRAM_LLM_MODEL)")
        return None
    from engram.consolidation.worker import ConsolidationWorker

    worker = ConsolidationWorker(
        eng, every_episodes=s.consolidate_every_episodes, every_hours=s.consolidate_every_hours
    )
    worker.start()
    console.print(
        f"consolidation worker: every {s.consolidate_every_episodes} new turns "
        f"or {s.consolidate_every_hours} h"
    )
    return worker


@keys_app.command("create")
def keys_create(
    user: UserOpt,
    label: Annotated[str, typer.Option(help="a note, e.g. which agent uses it")] = "",
    store: StoreOpt = None,
) -> None:
    """Create a key for a user and print it (only once)."""
    from engram.auth import ApiKeys

    with _engram(store, rerank=False) as eng:
        key, record = ApiKeys(eng.store).create(user, label)  # type: ignore[arg-type]
    console.print(f"{key}\n[dim]id {record.id} for user {record.user_id}; shown once[/dim]", highlight=False)


@keys_app.command("list")
def keys_list(
    user: Annotated[str | None, typer.Option("--user", "-u")] = None, store: StoreOpt = None
) -> None:
    """List keys (ids, users, dates; never the keys)."""
    from engram.auth import ApiKeys

    with _engram(store, existing=True, rerank=False) as eng:
        records = ApiKeys(eng.store).list(user)  # type: ignore[arg-type]
    _print_json([r.__dict__ for r in records])


@keys_app.command("revoke")
def keys_revoke(key_id: str, store: StoreOpt = None) -> None:
    """Revoke a key by id; it stops working at once."""
    from engram.auth import ApiKeys

    with _engram(store, existing=True, rerank=False) as eng:
        ApiKeys(eng.store).revoke(key_id)  # type: ignore[arg-type]
    console.print(f"revoked {key_id}")


@app.command()
def mcp(store: StoreOpt = None) -> None:
    """Serve MCP over stdio for one user: ENGRAM_API_KEY (a user key) or ENGRAM_USER picks the tenant."""
    import os

    from engram.auth import ApiKeys
    from engram.interfaces.mcp import run_stdio

    err = Console(stderr=True)  # stdout carries the protocol
    key, user = os.environ.get("ENGRAM_API_KEY"), os.environ.get("ENGRAM_USER")
    try:
        settings = load_settings()
        # A key can only be checked against the store that holds it: never create an empty one for it.
        why = "ENGRAM_API_KEY cannot be checked against it (is --store right?)"
        with Engram.from_settings(settings, _store_url(store, settings, existing=bool(key), why=why)) as eng:
            if key:
                principal = ApiKeys(eng.store).resolve(key)  # type: ignore[arg-type]
                if principal is None or principal.user_id is None:
                    err.print("error: ENGRAM_API_KEY is not a live user key")
                    raise typer.Exit(1)
                user = principal.user_id
            if not user:
                err.print("error: set ENGRAM_API_KEY (a user key) or ENGRAM_USER")
                raise typer.Exit(1)
            run_stdio(eng, eng.for_user(user).user_id)
    except EngramError as exc:
        err.print(f"error: {exc}")
        raise typer.Exit(1) from None


@app.command("mcp-config")
def mcp_config(
    user: UserOpt,
    url: Annotated[str, typer.Option(help="where `engram serve` listens")] = "http://127.0.0.1:8765",
    key: Annotated[str, typer.Option(help="the user's API key (default: a placeholder)")] = "<API_KEY>",
    store: StoreOpt = None,
) -> None:
    """Print ready-to-paste MCP config for Claude Desktop and Cursor (stdio and HTTP)."""
    import shutil

    command = shutil.which("engram") or "engram"
    stdio = {"command": command, "args": ["mcp", *_pinned_store(store)], "env": {"ENGRAM_API_KEY": key}}
    http = {"url": f"{url.rstrip('/')}/mcp", "headers": {"Authorization": f"Bearer {key}"}}
    console.print(f"[bold]MCP config for user {user}[/bold]\n", highlight=False)
    console.print(
        "Claude Desktop: claude_desktop_config.json\n"
        "  macOS:   ~/Library/Application Support/Claude/claude_desktop_config.json\n"
        "  Windows: %APPDATA%\\Claude\\claude_desktop_config.json\n"
        "  Linux:   ~/.config/Claude/claude_desktop_config.json\n"
        "Cursor: ~/.cursor/mcp.json (all projects) or .cursor/mcp.json (one project)\n",
        highlight=False,
    )
    console.print("stdio (Engram runs as a child process of the client, embedded store):", highlight=False)
    _print_json({"mcpServers": {"engram": stdio}})
    console.print("\nHTTP (a running `engram serve`; Cursor reads this form directly):", highlight=False)
    _print_json({"mcpServers": {"engram": http}})
    console.print(
        "\nClaude Desktop speaks stdio to local servers; to reach an HTTP server from it use a bridge:",
        highlight=False,
    )
    _print_json(
        {
            "mcpServers": {
                "engram": {
                    "command": "npx",
                    "args": ["mcp-remote", http["url"], "--header", f"Authorization: Bearer {key}"],
                }
            }
        }
    )


def _pinned_store(store: str | None) -> list[str]:
    """``--store URL`` for the stdio config: the client starts `engram mcp` in its own directory and
    environment, so a store other than the built-in default is named, with an absolute path."""
    try:
        url = store or load_settings().store_url()
        path = sqlite_path(url)
    except EngramError as exc:
        raise _fail(exc) from None
    if path is not None:
        url = f"sqlite:///{path.resolve()}"
        if url == EngramSettings.defaults().store_url():
            return []
    return ["--store", url]


@app.command()
def reindex(store: StoreOpt = None) -> None:
    """Compute the late-interaction token vectors that rows of an older store lack (all users)."""
    with _engram(store, existing=True, rerank=False) as eng:
        done = eng.reindex()
    console.print(f"token vectors computed for {done} rows")


@app.command()
def consolidate(
    user: Annotated[str | None, typer.Option("--user", "-u", help="the user to consolidate")] = None,
    all_users: Annotated[bool, typer.Option("--all", help="every user with memories")] = False,
    store: StoreOpt = None,
) -> None:
    """Turn new episodes into facts and playbooks with the configured LLM (ENGRAM_LLM_BASE_URL,
    ENGRAM_LLM_MODEL, ENGRAM_LLM_API_KEY); prints one report per user."""
    if bool(user) == all_users:
        console.print("[red]error:[/red] give --user U or --all")
        raise typer.Exit(2)
    settings = _settings(rerank=False)
    if not (settings.llm_base_url and settings.llm_model):
        raise _fail(
            "consolidation is disabled: no LLM configured. It needs an OpenAI-compatible chat endpoint: "
            "set ENGRAM_LLM_BASE_URL (e.g. http://localhost:11434/v1) and ENGRAM_LLM_MODEL"
        )
    with _engram(store, settings, existing=True) as eng:
        users = eng.store.tenants() if all_users else [user]  # type: ignore[attr-defined]
        reports = [eng.consolidate(u).as_dict() for u in users]
    if not users:
        Console(stderr=True).print("no users with memories in this store: nothing to consolidate")
    _print_json(reports)
    if any(r["status"].startswith("error") for r in reports):
        raise typer.Exit(1)


@app.command()
def chat(
    user: Annotated[str | None, typer.Option("--user", "-u", help="the user you chat as")] = None,
    url: Annotated[str | None, typer.Option(help="chat through a running `engram serve` at this URL")] = None,
    key: Annotated[str | None, typer.Option(envvar="ENGRAM_API_KEY", help="a user key, with --url")] = None,
    store: StoreOpt = None,
) -> None:
    """Chat with a support agent that remembers (ENGRAM_LLM_BASE_URL and ENGRAM_LLM_MODEL: an
    OpenAI-compatible endpoint with tool calling); each reply shows what was recalled and written."""
    from engram.agent import Agent
    from engram.agent.chat import run_chat

    settings = _settings()
    if not (settings.llm_base_url and settings.llm_model):
        raise _fail(
            "engram chat needs an LLM: set ENGRAM_LLM_BASE_URL (an OpenAI-compatible endpoint with tool "
            "calling, e.g. http://localhost:11434/v1) and ENGRAM_LLM_MODEL"
        )
    if url is None:
        if not user:
            raise _fail("give --user U (or --url and --key to chat through a running service)")
        with _engram(store, settings) as eng, Agent.for_engram(eng, user) as agent:
            run_chat(agent, console, user=user, where=_store_url(store, settings, existing=False))
        return
    from engram.client import Client

    if not key or store:
        raise _fail("--url needs --key (or ENGRAM_API_KEY), a user key; the service has its own store")
    try:
        with Client(url, key) as client:
            if user and user != client.user_id:
                raise _fail(f"the key is {client.user_id}'s, not {user}'s")
            with Agent.from_settings(client, settings) as agent:
                run_chat(agent, console, user=client.user_id, where=url)
    except EngramError as exc:
        raise _fail(exc) from None


def _metrics_table(
    title: str, rows: dict[str, dict[str, Any]], *, n: bool = True, latency: tuple[str, ...] = ()
) -> Table:
    """A titled table of R@k/MRR (plus the ``latency`` percentiles, e.g. "p50"), one row per entry."""
    table = Table(title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD, show_edge=False)
    table.add_column("", no_wrap=True)
    for column in (["n"] if n else []) + ["R@1", "R@5", "R@10", "MRR"] + [f"{p} ms" for p in latency]:
        table.add_column(column, justify="right")
    for name, m in rows.items():
        cells = [name] + ([str(m.get("n", m.get("questions")))] if n else [])
        cells += [f"{m[k]:.3f}" for k in ("r_at_1", "r_at_5", "r_at_10", "mrr")]
        cells += [f"{m[f'latency_{p}_ms']:.0f}" for p in latency]
        table.add_row(*cells)
    return table


@app.command("eval")
def eval_(
    split: Annotated[str, typer.Option(help="dev, heldout (the CI gate's split) or all")] = "heldout",
    questions: Annotated[
        str, typer.Option(help="own (questions.json) or agent (questions_agent.json: the agent's voice)")
    ] = "own",
    json_path: Annotated[Path | None, typer.Option("--json", help="write the figures as JSON here")] = None,
    ablate: Annotated[
        bool, typer.Option("--ablate", help="also run each pipeline stage alone; PNG chart")
    ] = False,
    chart: Annotated[Path, typer.Option(help="where --ablate writes its chart")] = Path("eval-ablation.png"),
    corpus: Annotated[
        Path | None,
        typer.Option(
            exists=True,
            file_okay=False,
            help="evaluation directory (default: the corpus shipped in the package)",
        ),
    ] = None,
    store: Annotated[
        str | None, typer.Option("--store", help="store URL to load into (default: a fresh temporary SQLite)")
    ] = None,
) -> None:
    """Evaluate recall on the evaluation corpus: R@1/5/10, MRR per type, latency, leak probes."""
    import tempfile

    from engram.eval.runner import DEFAULT_EVAL_DIR, ablation_chart, evaluate_corpus
    from engram.retrieval.recipes import ABLATION

    with tempfile.TemporaryDirectory() as tmp, _engram(store or f"sqlite:///{tmp}/eval.db") as eng:
        try:
            result = evaluate_corpus(
                eng,
                corpus or DEFAULT_EVAL_DIR,
                split=split,
                question_set=questions,
                configs=ABLATION if ablate else None,
                progress=console.is_terminal,  # off when piped: a finished bar would leave a blank line
            )
        except ValueError as exc:  # an unknown split or question set, or a malformed corpus file
            raise _fail(exc) from None
    console.print(f"[bold]{result['questions']} questions ({questions}), split {split}[/bold]")
    console.print(_metrics_table("overall", {"all": result}, latency=("p50", "p95")))
    console.print(_metrics_table("per memory type", result["per_type"]))
    console.print(_metrics_table("per question kind", result["per_kind"]))
    console.print(f"leak probes: {result['leak_probes']}, leaks: {result['leaks']}")
    if ablate:
        stages = result["ablation"]
        console.print(_metrics_table("ablation: each pipeline stage", stages, n=False, latency=("p50",)))
        try:
            ablation_chart(stages, chart)
            console.print(f"chart: {chart}")
        except ImportError:
            console.print("chart skipped: install matplotlib (pip install 'engram-memory[eval]')")
    if json_path:
        json_path.write_text(json.dumps(result, indent=2, default=str))
