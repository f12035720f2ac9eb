"""The CLI reference, docs/cli.md: ``python -m engram.interfaces.cli.reference > docs/cli.md``.

Everything in it comes from click's own objects for the Typer app (command names, usage, help texts,
and each parameter's help record with its default and env var), so it says what the code does;
tests/test_vocabulary.py fails when docs/cli.md is not what this prints.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterator
from typing import Any

import typer

from engram.interfaces.cli.common import app

REGENERATE = "python -m engram.interfaces.cli.reference > docs/cli.md"


def _walk(command: Any, ctx: Any, path: str) -> Iterator[tuple[str, Any, Any]]:
    """(command path, command, its context) for this command and everything under it, in the order
    `engram --help` lists them."""
    yield path, command, ctx
    for name in getattr(command, "list_commands", lambda _: [])(ctx):
        sub = command.get_command(ctx, name)
        yield from _walk(sub, sub.context_class(sub, info_name=name, parent=ctx), f"{path} {name}")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _help(command: Any) -> str:
    return inspect.cleandoc(command.help or "")


# Every command has --help; the shell completion options are Typer's, not Engram's.
_LEFT_OUT = {"--help", "--install-completion", "--show-completion"}


def _options_table(command: Any, ctx: Any) -> list[str]:
    records = [
        record
        for param in command.get_params(ctx)
        if not _LEFT_OUT.intersection(getattr(param, "opts", ()))
        and (record := param.get_help_record(ctx)) is not None
    ]
    lines: list[str] = []
    if records:
        lines += ["| argument / option | meaning |", "|---|---|"]
        lines += [f"| `{_cell(names)}` | {_cell(meaning)} |" for names, meaning in records]
        lines.append("")
    return lines


def _section(path: str, command: Any, ctx: Any) -> list[str]:
    usage = " ".join([path, *command.collect_usage_pieces(ctx)])
    return [f"## `{path}`", "", _help(command), "", f"Usage: `{usage}`", "", *_options_table(command, ctx)]


def render() -> str:
    """docs/cli.md as it should be."""
    root = typer.main.get_command(app)
    ctx = root.context_class(root, info_name="engram")
    out = [
        "# CLI reference",
        "",
        f"Generated from the code by `{REGENERATE}`; do not edit by hand. Every command also takes "
        "`--help`. Which facade operation each command is: `src/engram/interfaces/vocabulary.py`.",
        "",
        _help(root),
        "",
        *_options_table(root, ctx),
    ]
    aliases: list[str] = []
    for path, command, sub in _walk(root, ctx, "engram"):
        if command is root:
            continue
        if command.hidden:
            aliases.append(f"- `{path}`: {_cell(_help(command))}")
        elif getattr(command, "list_commands", None) is not None:  # a group: its help, then its commands
            out += [f"## `{path}`", "", _help(command), ""]
        else:
            out += _section(path, command, sub)
    if aliases:
        out += ["## Old names", "", "Hidden from `engram --help`, kept so that scripts keep working:", ""]
        out += [*aliases, ""]
    return "\n".join(out).rstrip("\n") + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
