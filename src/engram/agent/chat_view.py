"""How ``engram chat`` shows a turn, a background consolidation's result and a list of memories.

What the LLM replied, what memories say and what errors quote is untrusted text: it is never read as
rich markup (a "[/x]" in an error would raise MarkupError), and its control characters are dropped
before printing (an ESC could clear the screen, or retitle and recolour the terminal).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from rich.console import Console
from rich.markdown import Markdown
from rich.text import Text

from engram.agent.agent import Recall, TurnResult
from engram.agent.handle import MemoryHandle
from engram.consolidation.policy import ConsolidationReport
from engram.errors import EngramError
from engram.models import Hit, Memory, search_text_of
from engram.text import printable

SHOWN_HITS = 3  # hits listed per recall under a reply; the rest are counted
SHOWN_CHARS = 90  # a memory's text is cut to this in those lists

log = logging.getLogger(__name__)


def show_turn(console: Console, result: TurnResult) -> None:
    if result.error:  # the reply is our fallback sentence: the failure is the one message to show
        console.print(Text.assemble(("  ✗ the LLM failed: ", "red"), clean(result.error)), highlight=False)
    else:
        console.print("[bold green]engram ›[/bold green]")
        console.print(Markdown(clean(result.reply)))
    for recall in result.recalled:
        _show_recall(console, recall)
    for row in result.written:
        replaced = getattr(row, "supersedes", None)
        line = Text.assemble(
            ("  ✎ stored ", "yellow"), f'"{cut(search_text_of(row))}" ', (clean(row.id), "dim")
        )
        if replaced:
            line.append_text(_replacing(replaced, result.texts.get(replaced)))
        console.print(line, highlight=False)
    for stone in result.forgotten:
        console.print(forgot_line(stone.id, result.texts.get(stone.id)), highlight=False)
    errors = [c for c in result.tool_calls if c.error]
    if errors:
        listed = "; ".join(f"{c.name}: {c.error}" for c in errors)
        console.print(Text(f"  ! {count(len(errors), 'tool error')}: {cut(listed, 200)}", style="dim red"))
    if result.round_limit_hit:
        console.print(Text(f"  ! stopped after {result.tool_rounds} tool rounds", style="dim red"))
    if result.consolidating:
        console.print(Text("  ⟳ consolidating this user's recent turns in the background", style="dim"))
    console.print()


def forgot_line(memory_id: str, text: str | None) -> Text:
    quoted = f'"{cut(text)}" ' if text is not None else ""
    return Text.assemble(("  ✗ forgot ", "red"), quoted, (clean(memory_id), "dim"))


def _replacing(old_id: str, old_text: str | None) -> Text:
    quoted = f'"{cut(old_text)}" ' if old_text is not None else ""
    return Text.assemble(("\n     replacing ", "yellow"), quoted, (clean(old_id), "dim"))


def show_consolidation(console: Console, report: ConsolidationReport, memory: MemoryHandle) -> None:
    """A finished background run: what it stored and replaced, by text, or why it failed."""
    if report.status.startswith("error"):
        failure = report.status.removeprefix("error: ")
        console.print(Text.assemble(("⟳ background consolidation failed: ", "red"), clean(failure)))
        console.print(Text("  its turns stay waiting for the next run", style="dim"))
        return
    rows = _read(memory, report.written)
    replaced = [r for r in rows if getattr(r, "supersedes", None)]
    stored = [r for r in rows if not getattr(r, "supersedes", None)]
    parts = [
        f"{len(stored)} stored",
        f"{len(replaced)} replaced",
        f"{len(report.merged)} merged into stored facts" if report.merged else "",
        f"{len(report.dropped)} dropped" if report.dropped else "",
        count(len(report.skipped_episodes), "unreadable turn"),
    ]
    summary = ", ".join(p for p in parts if p)
    status = "" if report.status == "ok" else f" ({report.status})"
    head = f"⟳ background consolidation of {count(report.episodes, 'turn') or '0 turns'}: {summary}{status}"
    console.print(Text(clean(head), style="cyan"), highlight=False)
    for row in stored:
        console.print(
            Text.assemble(("  + ", "green"), f'"{cut(search_text_of(row))}" ', (clean(row.id), "dim"))
        )
    olds = {m.id: m for m in _read(memory, [str(getattr(r, "supersedes", "")) for r in replaced])}
    for row in replaced:
        old = olds.get(str(getattr(row, "supersedes", "")))
        before = (
            f'"{cut(search_text_of(old))}"' if old is not None else clean(str(getattr(row, "supersedes", "")))
        )
        console.print(
            Text.assemble(
                ("  ~ ", "yellow"), before, " → ", f'"{cut(search_text_of(row))}" ', (clean(row.id), "dim")
            )
        )


def show_hits(console: Console, hits: Sequence[Hit], none: str = "nothing found") -> None:
    if not hits:
        console.print(Text(f"  {none}", style="dim"))
    for hit in hits:
        console.print(memory_line(hit.memory, f"  {hit.confidence:.2f}"), highlight=False)


def memory_line(memory: Memory, tail: str = "") -> Text:
    return Text.assemble(
        ("  · ", "dim"),
        (f"{memory.memory_type:<10} ", "cyan"),
        cut(search_text_of(memory)),
        (f"  {clean(memory.id)}{tail}", "dim"),
    )


def _read(memory: MemoryHandle, ids: Sequence[str]) -> list[Memory]:
    """The rows of these ids that can still be read (one may be forgotten since)."""
    rows = []
    for memory_id in ids:
        try:
            rows.append(memory.get(memory_id))
        except EngramError as exc:
            log.info("%s could not be read for the consolidation report: %s", memory_id, exc)
    return rows


def _show_recall(console: Console, recall: Recall) -> None:
    head = (
        "recalled before answering"
        if recall.source == "pre-recall"
        else f'recalled "{cut(recall.query, 60)}"'
    )
    if recall.error:
        console.print(Text(f"  ↳ {head}: failed ({clean(recall.error)})", style="dim red"))
        return
    console.print(Text(f"  ↳ {head}: {count(len(recall.hits), 'hit') or 'nothing'}", style="dim"))
    for hit in recall.hits[:SHOWN_HITS]:
        m = hit.memory
        console.print(
            Text.assemble(
                ("     · ", "dim"),
                (f"{m.memory_type:<10} ", "cyan"),
                cut(search_text_of(m)),
                (f"  {clean(m.id)}", "dim"),
            ),
            highlight=False,
        )
    if len(recall.hits) > SHOWN_HITS:
        console.print(Text(f"     · and {len(recall.hits) - SHOWN_HITS} more", style="dim"))


def count(n: int, what: str) -> str:
    return "" if n == 0 else f"{n} {what}" + ("s" if n > 1 else "")


def clean(text: str) -> str:
    """``text`` without control characters (but newlines and tabs): safe to print to a terminal."""
    return printable(text)


def cut(text: str, limit: int = SHOWN_CHARS) -> str:
    text = " ".join(clean(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
