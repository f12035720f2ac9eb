"""The one human format of the CLI's data (``--json`` prints the same data as JSON instead).

A list is one record a line, the id last (as `engram recall` prints hits): ``awk '{print $NF}'`` takes
the ids, grep a line keeps its id. One record is ``field  value`` lines, id first, leaving out empty
fields. Stored text is data: never read as rich markup, control characters dropped (engram.text), and
never wrapped off a terminal (common._every_command)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel
from rich.text import Text

from engram.interfaces.cli.common import _print_json, console
from engram.models import Memory, Tombstone, event_time, search_text_of, utcnow
from engram.storage.base import ApiKeyRecord
from engram.text import printable


def memory_line(memory: Memory) -> Text:
    """A memory on one line: type, event date, text (newlines as " | "), what replaced it, its id."""
    line = Text.assemble(
        "  ",
        (f"{memory.memory_type:<10}", "cyan"),
        f" {event_time(memory):%Y-%m-%d}  ",
        printable(search_text_of(memory).replace("\n", " | ")),
    )
    if getattr(memory, "retracted", False):
        line.append(" (retracted)", "yellow")
    elif getattr(memory, "superseded_by", None):
        line.append(" (superseded)", "yellow")
    return line.append("  ").append(memory.id, "dim")


def print_memories(memories: Sequence[Memory], as_json: bool, none: str = "no memories") -> None:
    if as_json:
        _print_json([m.model_dump(mode="json") for m in memories])
        return
    if not memories:
        console.print(f"  ({none})", highlight=False)
    for memory in memories:
        console.print(memory_line(memory), highlight=False)


def _value(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, list | tuple):
        return ", ".join(_value(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={_value(v)}" for k, v in value.items())
    return str(value)


def _is_empty(value: Any) -> bool:
    return value is None or value is False or (isinstance(value, str | list | dict) and not value)


def print_fields(fields: Mapping[str, Any]) -> None:
    """``field  value`` lines, the names aligned, empty fields left out; steps one a line."""
    shown = {k: v for k, v in fields.items() if not _is_empty(v)}
    width = max((len(k) for k in shown), default=0)
    for name, value in shown.items():
        if name in ("steps", "refined_steps"):
            console.print(name, highlight=False)
            for step in value:
                tool = f" (tool {step.tool})" if step.tool else ""
                console.print(Text(f"  {step.order}. {printable(step.instruction)}{tool}"), highlight=False)
            continue
        console.print(Text(f"{name:<{width}}  {printable(_value(value))}"), highlight=False)


def print_record(record: BaseModel, as_json: bool) -> None:
    """One memory, catalog row or tombstone."""
    if as_json:
        _print_json(record.model_dump(mode="json"))
        return
    fields = dict(record)
    print_fields({"id": fields.pop("id"), "memory_type": fields.pop("memory_type"), **fields})


def print_forgotten(tombstone: Tombstone, as_json: bool) -> None:
    if as_json:
        _print_json(tombstone.model_dump(mode="json"))
    else:
        console.print(f"forgot {tombstone.memory_type} {tombstone.id}", highlight=False)


def print_keys(records: Iterable[ApiKeyRecord], as_json: bool) -> None:
    """Keys one a line: user ("(admin)" for the admin key), created, live or revoked, label, and the id
    last, as in every list (``awk '{print $NF}'``)."""
    records = list(records)
    if as_json:
        _print_json([r.__dict__ for r in records])
        return
    if not records:
        console.print("  (no keys)", highlight=False)
    rows = []
    for r in records:
        state = f"revoked {r.revoked_at:%Y-%m-%d}" if r.revoked_at else "live"
        if r.scope == "read" or not r.revoked_at:  # a live key says both (a newcomer's walk)
            state += " read-only" if r.scope == "read" else " read-write"
        if r.expires_at is not None and not r.revoked_at:
            state += f" {'expired' if r.expires_at <= utcnow() else 'expires'} {r.expires_at:%Y-%m-%d}"
        elif not r.revoked_at:
            state += " no expiry"
        rows.append((r.user_id or "(admin)", f"created {r.created_at:%Y-%m-%d}", state, r.label, r.id))
    widths = [max((len(row[i]) for row in rows), default=0) for i in range(4)]  # columns that line up
    for row in rows:
        line = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[4]
        console.print(Text(printable(line)), highlight=False)


def print_info(stats: Mapping[str, Any], as_json: bool) -> None:
    """The store's stats as ``name  value`` lines, nested names joined with dots."""
    if as_json:
        _print_json(stats)
        return
    flat: dict[str, Any] = {}
    for name, value in stats.items():
        if isinstance(value, Mapping):
            flat.update({f"{name}.{k}": v for k, v in value.items()})
        else:
            flat[name] = value
    print_fields(flat)


def print_consolidation(reports: Sequence[Mapping[str, Any]], as_json: bool) -> None:
    """One line per user: the user, how many of each, the status last (an error's text has spaces)."""
    if as_json:
        _print_json(list(reports))
        return
    for r in reports:
        counts = " ".join(
            f"{name}={len(v) if isinstance(v, list) else v}"
            for name, v in r.items()
            if name not in ("user_id", "status")
        )
        console.print(Text(printable(f"{r['user_id']}  {counts}  {r['status']}")), highlight=False)
