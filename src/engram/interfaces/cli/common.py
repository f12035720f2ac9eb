"""What every command shares: the Typer apps, the console, the store and settings options, errors as
one line and exit code 1, and printing hits."""

from __future__ import annotations

import contextlib
import errno
import inspect
import json
import os
import stat
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TextIO

import typer
from pydantic_core import to_jsonable_python
from rich.console import Console
from rich.text import Text

from engram.errors import ConfigError, EngramError
from engram.memory import Engram, sqlite_path
from engram.models import Hit, MemoryType, search_text_of
from engram.settings import EngramSettings, load_settings
from engram.text import printable


def command_group(help: str) -> typer.Typer:
    """A command group with click's plain help: rich's option table cut option names at 80 columns
    ("--include-supe…" in a newcomer's `engram list --help`), and at any width when piped."""
    return typer.Typer(rich_markup_mode=None, help=help, short_help=help, no_args_is_help=True)  # uncut


app = command_group("Engram: persistent, multi-tenant memory for LLM agents.")
catalog_app = command_group("Manage the shared catalog (admin).")
app.add_typer(catalog_app, name="catalog")
console = Console()
# Notes and summaries on stderr: never wrapped (a script reads them a line each, terminal or not).
err_console = Console(stderr=True, soft_wrap=True)

StoreOpt = Annotated[
    str | None,
    typer.Option("--store", envvar="ENGRAM_STORE", help="store URL (default: $ENGRAM_HOME/engram.db)"),
]
UserOpt = Annotated[str, typer.Option("--user", "-u", help="the tenant (user id)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON instead of text")]


def _print_version(wanted: bool) -> None:
    if wanted:
        from engram import __version__

        sys.stdout.write(f"engram {__version__}\n")
        raise typer.Exit()


@app.callback()
def _every_command(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="print the version and exit"),
    ] = False,
) -> None:
    # Off a terminal (a pipe, a file) rich would hard-wrap at 80 columns and put an id alone on the
    # next line: grep and awk read one record a line, so lines are never wrapped there.
    console.soft_wrap = not console.is_terminal


def _fail(message: object) -> typer.Exit:
    """An error as one line (its text may quote stored or given text: never read as markup)."""
    console.print(
        Text.assemble(("error:", "red"), f" {printable(str(message))}"), highlight=False, soft_wrap=True
    )
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


def one_line_summaries(typer_app: typer.Typer) -> None:
    """`engram --help` lists each command by its docstring's first paragraph, rewrapped as one text
    (click would cut it at ~45 characters; Typer's rich mode kept its line breaks: "into the store
    `engram", then " serve` uses"). Its own --help is unchanged."""
    for info in typer_app.registered_commands:
        doc = info.help or inspect.getdoc(info.callback) or ""
        if info.short_help is None and doc:
            info.short_help = " ".join(doc.split("\n\n", 1)[0].split())
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            one_line_summaries(group.typer_instance)


def nothing_confident(threshold: float) -> str:
    """The CLI's words for a recall with no confident hit (a person reads them; MCP and the agent tell
    a model, ``models.no_confident_match``)."""
    return f"nothing reaches confidence {threshold:g}: probably nothing relevant is stored"


def counted(counts: Mapping[str, int]) -> str:
    """ "3 semantic, 1 key": a kind's count, its plural "s" cut for one ("1 keys" read oddly)."""
    return ", ".join(
        f"{n} {kind[:-1] if n == 1 and kind.endswith('s') else kind}" for kind, n in counts.items()
    )


def file_kind(file: Path) -> str:
    """ "export" when the file opens as an export does (its first line an object with ``engram_export``),
    "document" when it is one JSON object or array (what `engram import` takes without --all), else ""
    (unreadable, or neither): how a wrong `import` or `import --all` says which one the file wants."""
    try:
        with file.open(encoding="utf-8") as lines:
            first = json.loads(lines.readline(1 << 16))
        if isinstance(first, dict) and "engram_export" in first:
            return "export"
    except (ValueError, OSError):
        pass
    try:
        return "document" if isinstance(json.loads(file.read_text(encoding="utf-8")), dict | list) else ""
    except (ValueError, OSError):
        return ""


def _print_json(value: Any) -> None:
    """Times as REST writes them (ISO 8601, ``2026-12-01T21:11:07.5Z``): str() gave keys' and reports'
    ``2026-12-01 21:11:07.5+00:00`` beside the memories' ISO form."""
    sys.stdout.write(json.dumps(to_jsonable_python(value, fallback=str), indent=2) + "\n")


def print_hits(
    hits: list[Hit],
    explain: bool,
    min_confidence: float | None = None,
    floor: float = 0.0,
    notes: Console = err_console,
) -> None:
    """Hits, one a line (the id last), then a note on ``notes`` (stderr: a script reads the ids) when
    none reaches ``floor`` (the agent's and MCP's threshold) nor ``min_confidence`` kept any. Stored
    text is data: never read as rich markup (a "[/b]" in a turn raised MarkupError, other tags
    restyled the output), its control characters dropped (engram.text)."""
    if not hits:
        closest = "; --min-confidence 0 shows the closest"
        notes.print(f"  ({nothing_confident(min_confidence) + closest if min_confidence else 'no hits'})")
    for hit in hits:
        m = hit.memory
        line = Text.assemble(
            f"  {hit.rank}. ",
            (f"{m.memory_type:<10}", "cyan"),
            f" {hit.event_time:%Y-%m-%d} confidence={hit.confidence:.2f} score={hit.score:.3g}  ",
            printable(search_text_of(m).replace("\n", " | ")),
        )
        if getattr(m, "superseded_by", None):
            line.append(" (superseded)", "yellow")
        if outdated := hit.explain.get("outdated_by"):
            line.append(f" (outdated by {printable(str(outdated))})", "yellow")
        line.append("  ").append(m.id, "dim")
        console.print(line, highlight=False)
        if explain:
            console.print(Text(f"     {printable(format_explain(hit.explain))}", "dim"), highlight=False)
    if hits and min_confidence is None and floor and all(h.confidence < floor for h in hits):
        notes.print(f"  ({nothing_confident(floor)}; the closest are listed above)", style="dim")


def format_explain(explain: dict[str, Any]) -> str:
    parts = []
    for key, value in explain.items():
        if value is None:
            continue
        parts.append(f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}")
    return " ".join(parts)


keys_app = command_group("Manage API keys (one per user; only hashes are stored).")
app.add_typer(keys_app, name="keys")


OWN_TYPES: tuple[MemoryType, ...] = ("episodic", "semantic", "procedural")  # a user's rows (no catalog)


def note_unknown_user(eng: Engram, user: str) -> None:
    """A dim note on stderr when ``user`` has no memories at all: a typo answered with nothing found."""
    if not any(eng.store.count_memories(user, t, include_superseded=True, limit=1) for t in OWN_TYPES):
        note = f"note: user {user!r} has no memories in this store (a typo?)"
        err_console.print(note, style="dim", highlight=False, markup=False, soft_wrap=True)


@contextmanager
def written_whole(path: str) -> Iterator[TextIO]:
    """``path`` written whole or not at all: into a temporary file beside it, renamed over it once
    complete and on disk, so a failure or a kill midway leaves an earlier export as it was (an outside
    review: a killed nightly export emptied the last good one). A symlink is written through (its
    target replaced); a device, a pipe, or a file in a folder this user cannot create files in, in
    place. A path that cannot be written is a one-line error."""
    try:
        if path.endswith(os.sep) or Path(path).is_dir():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        target = Path(os.path.realpath(path))
        fd, partial = -1, ""
        if not target.exists() or target.is_file():  # a device or a pipe is written in place
            with contextlib.suppress(PermissionError):  # so is a file in a folder we cannot add to
                fd, partial = tempfile.mkstemp(
                    prefix=f".{target.name}.", suffix=".partial", dir=target.parent
                )
        if fd < 0:
            with _private_file(path) as out:
                yield out
            return
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:  # mkstemp: 0600, as the store is
                yield out
                out.flush()
                os.fsync(out.fileno())
            os.replace(partial, target)
        finally:
            Path(partial).unlink(missing_ok=True)
    except OSError as exc:
        raise _fail(f"cannot write {path}: {exc.strerror or exc}") from None


def _private_file(path: str) -> TextIO:
    """``path`` opened for writing (created or emptied), readable by its owner only (0600), as the
    store itself is: an export holds every memory it covers, and API key hashes with --keys."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    found = os.fstat(fd)
    # An existing file keeps its mode through O_TRUNC: ours is made private; a device, a pipe or
    # someone else's file is left as it is (root once made /dev/null 0600 here).
    if stat.S_ISREG(found.st_mode) and found.st_uid == os.getuid():
        os.fchmod(fd, 0o600)
    return os.fdopen(fd, "w", encoding="utf-8")
