"""What counts as text that shows something, and the same rule as JSON Schema.

A turn, a fact, a query that shows nothing (zero-width spaces, a byte order mark, a lone variation
selector) would still be embedded and could outrank real memories, so every surface refuses it
(``engram.models.check_text``), and the REST and MCP schemas state the rule, generated from the same
predicate, so a schema and the server agree by construction.
"""

from __future__ import annotations

import functools
import unicodedata
from typing import Any

# Letters, digits, punctuation, symbols: what a reader sees. Marks alone (variation selectors),
# controls, format characters (zero-width spaces, BOM) and separators show nothing.
_VISIBLE_CATEGORIES = ("L", "N", "P", "S")
_BLANK_GLYPHS = frozenset("\u115f\u1160\u3164\uffa0\u2800")  # Hangul fillers, blank Braille
NUL_PATTERN = "\\u0000"  # JSON Schema for a NUL anywhere in a string: PostgreSQL cannot store one


def has_visible_character(text: str) -> bool:
    return any(ch not in _BLANK_GLYPHS and unicodedata.category(ch)[0] in _VISIBLE_CATEGORIES for ch in text)


@functools.cache
def invisible_class() -> str:
    """The characters ``has_visible_character`` counts as invisible, as the inside of a regex
    character class: generated from that predicate (about 0.6 s, once, when a schema first needs it),
    so a schema and the server agree by construction. Written with ``\\uXXXX`` escapes and, past the
    BMP, the characters themselves, which every JSON Schema regex dialect reads alike. Surrogates are
    left out: no characters (the server refuses them as invalid Unicode)."""
    ranges: list[tuple[int, int]] = []
    start = None
    for cp in range(0x110000):
        invisible = not 0xD800 <= cp <= 0xDFFF and not has_visible_character(chr(cp))
        if invisible and start is None:
            start = cp
        elif not invisible and start is not None:
            ranges.append((start, cp - 1))
            start = None
    if start is not None:
        ranges.append((start, 0x10FFFF))

    def char(cp: int) -> str:
        return f"\\u{cp:04x}" if cp <= 0xFFFF else chr(cp)

    return "".join(char(a) if a == b else f"{char(a)}-{char(b)}" for a, b in ranges)


def refused_text(*, empty: bool = True) -> dict[str, Any]:
    """A JSON Schema that matches the text ``check_text`` refuses: text without a visible character
    (``empty``: the empty text too) or with a NUL anywhere; a field says ``"not": refused_text()``.
    Written as a negation, not as ``pattern: [^...]``: schema tools generate data for a long pattern
    beside a maxLength very slowly."""
    # "type": without it, null (an optional field left out) would count as refused too.
    blank = f"^[{invisible_class()}]{'*' if empty else '+'}$"
    return {"type": "string", "anyOf": [{"pattern": blank}, {"pattern": NUL_PATTERN}]}


def visible_schema(schema: dict[str, Any]) -> None:
    """A text field's ``json_schema_extra``: it must show something (``check_text``'s rule)."""
    schema["not"] = refused_text()


def empty_or_visible_schema(schema: dict[str, Any]) -> None:
    """An optional text field's ``json_schema_extra``: empty, or showing something."""
    schema["not"] = refused_text(empty=False)


def for_a_model(schema: Any) -> Any:
    """A copy of a JSON Schema without the text rule (every ``"not"``: ``refused_text`` is the only
    negation our schemas hold), for the tool schemas a model reads (MCP, the agent). The rule's
    character class is ~13 KB, which a playbook's steps carried twice into every call (~9k tokens); the
    server refuses such text anyway, with a message."""
    if isinstance(schema, dict):
        return {k: for_a_model(v) for k, v in schema.items() if k != "not"}
    if isinstance(schema, list):
        return [for_a_model(v) for v in schema]
    return schema
