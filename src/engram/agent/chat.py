"""``engram chat``: the agent in a terminal, showing under each reply what it recalled and wrote.

What the LLM replied, what memories say and what errors quote is untrusted text: it is never read as
rich markup (a "[/x]" in an error would raise MarkupError), and its control characters are dropped
before printing (an ESC could clear the screen, or retitle and recolour the terminal).
"""

from __future__ import annotations

import logging
import sys
from contextlib import nullcontext

from rich.console import Console
from rich.markdown import Markdown
from rich.text import Text

from engram.agent.agent import Agent, Recall, TurnResult
from engram.errors import EngramError
from engram.models import search_text_of
from engram.text import printable

SHOWN_HITS = 3  # hits listed per recall under a reply; the rest are counted
SHOWN_CHARS = 90  # a memory's text is cut to this in those lists

log = logging.getLogger(__name__)


def run_chat(agent: Agent, console: Console, *, user: str, where: str) -> None:
    """Read messages until Ctrl-D (end of input) or Ctrl-C; one turn each."""
    echo = not sys.stdin.isatty()  # piped input: print each message so the transcript reads as a chat
    console.print(
        Text.assemble(("Engram chat", "bold"), _clean(f" · {user} · {where} · model {agent.llm.model}")),
        highlight=False,
    )
    console.print("[dim]Ctrl-D or Ctrl-C to leave. Under each reply: what was recalled and written.[/dim]\n")
    while True:
        try:
            message = console.input("[bold cyan]you ›[/bold cyan] ")
        except (EOFError, KeyboardInterrupt):
            console.print()
            break
        if echo:
            console.print(_clean(message), markup=False, highlight=False)
        if not message.strip():
            continue
        try:
            with console.status("thinking…") if console.is_terminal else nullcontext():
                result = agent.respond(message)
        except KeyboardInterrupt:
            console.print("\n[dim](interrupted)[/dim]")
            break
        except EngramError as exc:  # the message could not be stored (too long, store failure)
            console.print(Text.assemble(("error: ", "red"), _clean(str(exc))), highlight=False)
            continue
        except Exception as exc:  # a bug of ours: say so and keep the chat; the log has the traceback
            log.exception("chat turn failed")
            console.print(Text.assemble(("error: ", "red"), _clean(f"{type(exc).__name__}: {exc}")))
            continue
        show_turn(console, result)
    if agent.consolidation is not None and agent.consolidation.running:  # close() waits for it
        console.print("[dim]finishing the background consolidation…[/dim]")
    console.print("[dim]bye[/dim]")


def show_turn(console: Console, result: TurnResult) -> None:
    console.print("[bold green]engram ›[/bold green]")
    console.print(Markdown(_clean(result.reply)))
    if result.error:
        console.print(Text.assemble(("  the LLM failed: ", "red"), _clean(result.error)), highlight=False)
    for recall in result.recalled:
        _show_recall(console, recall)
    for row in result.written:
        replaced = getattr(row, "supersedes", None)
        note = f" (supersedes {replaced})" if replaced else ""
        console.print(
            Text.assemble(
                ("  ✎ wrote ", "yellow"),
                (_clean(row.id), "dim"),
                f' "{_cut(search_text_of(row))}"{_clean(note)}',
            ),
            highlight=False,
        )
    for stone in result.forgotten:
        console.print(Text.assemble(("  ✗ forgot ", "red"), (_clean(stone.id), "dim")), highlight=False)
    errors = [c for c in result.tool_calls if c.error]
    if errors:
        listed = "; ".join(f"{c.name}: {c.error}" for c in errors)
        console.print(Text(f"  ! {_count(len(errors), 'tool error')}: {_cut(listed, 200)}", style="dim red"))
    if result.round_limit_hit:
        console.print(Text(f"  ! stopped after {result.tool_rounds} tool rounds", style="dim red"))
    if result.consolidating:
        console.print(Text("  ⟳ consolidating this user's recent turns in the background", style="dim"))
    console.print()


def _show_recall(console: Console, recall: Recall) -> None:
    head = (
        "recalled before answering"
        if recall.source == "pre-recall"
        else f'recalled "{_cut(recall.query, 60)}"'
    )
    if recall.error:
        console.print(Text(f"  ↳ {head}: failed ({_clean(recall.error)})", style="dim red"))
        return
    console.print(Text(f"  ↳ {head}: {_count(len(recall.hits), 'hit') or 'nothing'}", style="dim"))
    for hit in recall.hits[:SHOWN_HITS]:
        m = hit.memory
        console.print(
            Text.assemble(
                ("     · ", "dim"),
                (f"{m.memory_type:<10} ", "cyan"),
                _cut(search_text_of(m)),
                (f"  {_clean(m.id)}", "dim"),
            ),
            highlight=False,
        )
    if len(recall.hits) > SHOWN_HITS:
        console.print(Text(f"     · and {len(recall.hits) - SHOWN_HITS} more", style="dim"))


def _count(n: int, what: str) -> str:
    return "" if n == 0 else f"{n} {what}" + ("s" if n > 1 else "")


def _clean(text: str) -> str:
    """``text`` without control characters (but newlines and tabs): safe to print to a terminal."""
    return printable(text)


def _cut(text: str, limit: int = SHOWN_CHARS) -> str:
    text = " ".join(_clean(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
