"""`engram demo`: the sample (engram.demo) loaded into the store `engram serve` uses, a few recalls (with
their explain breakdown on request), a ready key for one of its users, and what to try next. A store
whose demo users already have memories is left as it is: the demo says so and how to see them."""

from __future__ import annotations

import shlex

from rich.console import Console

from engram.auth import ApiKeys
from engram.demo import QUERIES, USERS, ask, load_samples, loaded_already, other_users
from engram.interfaces.cli.common import _fail, print_hits
from engram.interfaces.cli.urls import base_url, without_password
from engram.memory import Engram
from engram.settings import load_settings

KEY_USER = USERS[0]
NEXT = [
    ("recall", "where does Sarah live?", "--user", "sarah", "--explain"),
    ("recall", "where does Sarah live?", "--user", "sarah", "--include-superseded"),
    ("list", "--user", "marco"),
    ("catalog", "list"),
]


def run_demo(store: str | None, console: Console, explain: bool = False) -> None:
    settings = load_settings()
    url = store or settings.store_url()
    shown = without_password(url)
    # The default store needs no --store; one with a password is named by ENGRAM_STORE rather than
    # printed into the terminal (and its scrollback) in every suggested command.
    pinned = ["--store", store] if store and shown == store else []

    def command(*args: str) -> str:
        return shlex.join(["engram", *args, *pinned])

    console.print(f"[bold]Engram demo[/bold] — store: {shown}", soft_wrap=True, highlight=False)
    if store and not pinned:
        console.print(
            "(the commands below leave out --store: set ENGRAM_STORE to that URL, password included)",
            style="dim",
        )
    service = base_url()
    with Engram.from_settings(settings, url) as eng:
        present = loaded_already(eng)
        if present:
            console.print(
                f"The demo's users already have memories in this store ({', '.join(present)}): nothing "
                "loaded, so nothing is written twice.\nSee them:\n"
                f"  {command('list', '--user', present[0])}\n"
                f"  {command('serve')}, then {service}/inspector with a key from "
                f"`{command('keys', 'create', '--user', present[0])}`"
                + (
                    ""
                    if store
                    else "\nA fresh copy in a store of its own: engram demo --store sqlite:///PATH/demo.db"
                ),
                soft_wrap=True,
                highlight=False,
            )
            return
        others = other_users(eng)
        if others:
            whom = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
            raise _fail(
                f"this store holds other users' memories ({whom}): the demo's catalog would show in "
                "their recalls, so nothing was loaded. A store of its own: engram demo --store "
                "sqlite:///PATH/demo.db"
            )
        for name, result in load_samples(eng):
            counts = ", ".join(
                f"{v} {k}" for k, v in result.items() if isinstance(v, int) and v and k != "written"
            )
            console.print(f"loaded {name}: {counts}")
        for question in QUERIES:
            opts = (
                f" ({', '.join(f'{k}={v}' for k, v in question.options.items())})" if question.options else ""
            )
            console.print(f"\n[bold]{question.user}[/bold] asks: [italic]{question.query}[/italic]{opts}")
            if question.note:
                console.print(f"  ({question.note})", style="dim", soft_wrap=True, highlight=False)
            print_hits(ask(eng, question), explain, question.min_confidence, notes=console)
        key, _ = ApiKeys(eng.store).create(KEY_USER, label="engram demo")
    serve = command("serve")
    console.print(
        f"\n[bold]Ready[/bold]: a key for {KEY_USER} (shown once, keep it): {key}\n"
        f"  {serve}     then open {service}/inspector and sign in with it;\n"
        f"  REST at {service}/v1 (docs {service}/docs), MCP at {service}/mcp, with that key as "
        "Authorization: Bearer",
        soft_wrap=True,
        highlight=False,
    )
    if not explain:
        console.print(
            "\n(`engram demo --explain`, in a fresh store, shows how each score was made)", style="dim"
        )
    console.print("\n[bold]Try it yourself[/bold]:")
    for args in NEXT:
        console.print(f"  {command(*args)}", soft_wrap=True, highlight=False)
