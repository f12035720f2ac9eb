"""``engram chat``: the agent in a terminal, showing under each reply what it recalled and wrote.

The terminal belongs to the person typing: nothing but the chat prints to it. Log records (the LLM
client's retries, a background consolidation's errors, a library's warnings) go to a log file for the
whole chat (``logging_to``), and what the background consolidation did is shown between turns, once
the person has pressed Enter, never into the line being typed. Each failure is one message.

Lines starting with a command word (``/help``) are commands, not messages: see ``COMMANDS``.
"""

from __future__ import annotations

import logging
import logging.handlers
import re
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.text import Text

from engram.agent.agent import Agent
from engram.agent.chat_view import (
    clean,
    count,
    cut,
    forgot_line,
    memory_line,
    show_consolidation,
    show_hits,
    show_turn,
)
from engram.agent.prompt import PROFILE_RULE, profile_facts
from engram.agent.tools import recall
from engram.errors import EngramError
from engram.models import search_text_of

__all__ = ["COMMANDS", "logging_to", "run_chat", "show_turn"]

LOG_BYTES = 1_000_000  # a chat log is rotated at this size (one old file kept): it never fills a disk
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s"
STATUS_CHARS = 100  # a warning is cut to this on the spinner's line, which must stay one line
MEMORY_HITS = 8  # hits /memory lists
COMMANDS = {
    "/help": "this list",
    "/profile": "the facts the agent is given about you each turn",
    "/memory QUERY": "search your memory as the agent does",
    "/forget ID": "forget one memory for good (ids are shown in the lists)",
    "/new": "start a new conversation (the memory stays)",
}
COMMAND_WORD = re.compile(r"/[a-z]+")  # a line starting "/word" is meant as a command; "/etc/x" is not

log = logging.getLogger(__name__)


@contextmanager
def logging_to(path: Path) -> Iterator[Path | None]:
    """Every log record goes to ``path`` (and nowhere else) until the block ends; Python warnings too.
    Yields the path, or None if it cannot be written (then records are dropped: the terminal is
    still not theirs)."""
    root = logging.getLogger()
    handler: logging.Handler
    written: Path | None = path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.handlers.RotatingFileHandler(
            path, maxBytes=LOG_BYTES, backupCount=1, encoding="utf-8"
        )
    except OSError:
        handler, written = logging.NullHandler(), None
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    saved_handlers, saved_level = root.handlers[:], root.level
    root.handlers = [handler]
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)
    try:
        yield written
    finally:
        logging.captureWarnings(False)
        root.handlers = saved_handlers
        root.setLevel(saved_level)
        handler.close()


@contextmanager
def _status_line(console: Console) -> Iterator[None]:
    """A spinner while the turn runs; a warning the turn logs (an LLM call retried) shows on its line
    until the next one, as well as in the log file."""
    if not console.is_terminal:
        yield
        return
    with console.status("thinking…") as status:
        handler = _TurnWarnings(lambda text: status.update(f"thinking… ({text})"))
        logging.getLogger().addHandler(handler)
        try:
            yield
        finally:
            logging.getLogger().removeHandler(handler)


class _TurnWarnings(logging.Handler):
    """Passes the warnings of this thread (the turn's, not a background consolidation's) to ``show``."""

    def __init__(self, show: Callable[[str], None]) -> None:
        super().__init__(logging.WARNING)
        self.show = show
        self.thread = threading.get_ident()

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self.thread:
            self.show(cut(record.getMessage(), STATUS_CHARS))


def run_chat(agent: Agent, console: Console, *, user: str, where: str, log_path: Path | None = None) -> None:
    """Read messages until Ctrl-D (end of input) or Ctrl-C; one turn each, or one command."""
    echo = not sys.stdin.isatty()  # piped input: print each message so the transcript reads as a chat
    chat = _Chat(agent, console, log_path)
    console.print(
        Text.assemble(("Engram chat", "bold"), clean(f" · {user} · {where} · model {agent.llm.model}")),
        highlight=False,
    )
    if log_path is not None:
        console.print(Text(f"logs: {log_path}", style="dim"))
    console.print(
        "[dim]/help for commands, Ctrl-D or Ctrl-C to leave. Under each reply: what was recalled and "
        "written.[/dim]\n"
    )
    while True:
        try:
            message = console.input("[bold cyan]you ›[/bold cyan] ")
        except (EOFError, KeyboardInterrupt):
            console.print()
            break
        if echo:
            console.print(clean(message), markup=False, highlight=False)
        chat.show_consolidations()  # what finished while the person typed, now that the line is done
        if not message.strip():
            continue
        if chat.command(message):
            continue
        try:
            with _status_line(console):
                result = agent.respond(message)
        except KeyboardInterrupt:
            console.print("\n[dim](interrupted)[/dim]")
            break
        except EngramError as exc:  # the message could not be stored (too long, store failure)
            console.print(Text.assemble(("error: ", "red"), clean(str(exc))), highlight=False)
            continue
        except Exception as exc:  # a bug of ours: say so and keep the chat; the log has the traceback
            log.exception("chat turn failed")
            console.print(Text.assemble(("error: ", "red"), clean(f"{type(exc).__name__}: {exc}")))
            continue
        show_turn(console, result)
        chat.show_consolidations()  # a run that finished during the turn
    if agent.consolidation is not None and agent.consolidation.running:
        console.print("[dim]finishing the background consolidation…[/dim]")
        agent.consolidation.wait()
        chat.show_consolidations()
    console.print("[dim]bye[/dim]")


class _Chat:
    """The chat's commands, and which background consolidation reports it has shown."""

    def __init__(self, agent: Agent, console: Console, log_path: Path | None) -> None:
        self.agent = agent
        self.console = console
        self.log_path = log_path
        self.shown_reports = 0
        self.handlers: dict[str, Callable[[str], None]] = {
            "/help": self.help,
            "/profile": self.profile,
            "/memory": self.memory,
            "/forget": self.forget,
            "/new": self.new,
        }

    def show_consolidations(self) -> None:
        if self.agent.consolidation is None:
            return
        reports = self.agent.consolidation.reports[self.shown_reports :]
        self.shown_reports += len(reports)
        for report in reports:
            show_consolidation(self.console, report, self.agent.memory)
            self.console.print()

    def command(self, line: str) -> bool:
        """Run ``line`` if it is a command; False if it is a message for the agent."""
        word, _, argument = line.strip().partition(" ")
        if not COMMAND_WORD.fullmatch(word):
            return False
        handler = self.handlers.get(word)
        if handler is None:
            self.console.print(Text(f"unknown command {word}: /help lists the commands", style="red"))
        else:
            try:
                handler(argument.strip())
            except EngramError as exc:
                self.console.print(Text.assemble(("error: ", "red"), clean(str(exc))), highlight=False)
        self.console.print()
        return True

    def help(self, _: str) -> None:
        for usage, what in COMMANDS.items():
            self.console.print(Text.assemble((f"  {usage:<15}", "bold"), what), highlight=False)
        self.console.print(Text("  anything else is a message to the agent", style="dim"))
        if self.log_path is not None:
            self.console.print(Text(f"  logs: {self.log_path}", style="dim"))

    def profile(self, _: str) -> None:
        facts = profile_facts(self.agent.memory, self.agent.profile_facts)
        if not facts:
            self.console.print(Text("  profile: nothing stored yet", style="dim"))
            return
        self.console.print(Text(f"  profile: {count(len(facts), 'core fact')} ({PROFILE_RULE})", style="dim"))
        for fact in facts:
            self.console.print(memory_line(fact), highlight=False)

    def memory(self, query: str) -> None:
        if not query:
            self.console.print(Text("  usage: /memory QUERY (what to look for)", style="red"))
            return
        agent = self.agent
        hits = recall(agent.memory, query, MEMORY_HITS, min_confidence=agent.min_confidence)
        self.console.print(Text(f"  {len(hits)} hits (best first, with their confidence)", style="dim"))
        show_hits(self.console, hits)

    def forget(self, memory_id: str) -> None:
        if not memory_id or " " in memory_id:
            self.console.print(
                Text("  usage: /forget ID (one id, as /profile or /memory show it)", style="red")
            )
            return
        text = search_text_of(self.agent.memory.get(memory_id))  # a forgotten row keeps no text
        stone = self.agent.memory.forget(memory_id)
        self.console.print(forgot_line(stone.id, text), highlight=False)

    def new(self, _: str) -> None:
        session = self.agent.new_session()
        self.console.print(
            Text(
                f"  new conversation ({session}): the agent no longer sees this chat's turns; memory stays",
                style="dim",
            )
        )
