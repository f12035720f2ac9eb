"""LangGraph's store filters (its InMemoryStore's semantics) over an item's value, for ``EngramStore``:
equality or ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``, nested objects field by field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engram.errors import InvalidInput


def matches(value: Mapping[str, Any], where: Mapping[str, Any] | None) -> bool:
    """LangGraph's filter semantics (its InMemoryStore's): every field equal, or every operator true."""
    return not where or all(_compare(value.get(field), wanted) for field, wanted in where.items())


def check_filter(where: object) -> None:
    """InvalidInput for an operator LangGraph's filters do not have, before anything is searched."""
    if isinstance(where, dict):
        for field, wanted in where.items():
            if str(field).startswith("$") and field not in _OPERATORS:
                raise InvalidInput(
                    f"unsupported filter operator {field!r}: use one of {', '.join(_OPERATORS)}"
                )
            check_filter(wanted)
    elif isinstance(where, list | tuple):
        for wanted in where:
            check_filter(wanted)


def _compare(found: Any, wanted: Any) -> bool:
    if isinstance(wanted, dict):
        if any(str(k).startswith("$") for k in wanted):
            return all(_operator(found, op, operand) for op, operand in wanted.items())
        return isinstance(found, dict) and all(_compare(found.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (
            isinstance(found, list | tuple)
            and len(found) == len(wanted)
            and all(_compare(f, w) for f, w in zip(found, wanted, strict=True))
        )
    return bool(found == wanted)


_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")
_ORDER = {
    "$gt": lambda a, b: a > b,
    "$gte": lambda a, b: a >= b,
    "$lt": lambda a, b: a < b,
    "$lte": lambda a, b: a <= b,
}


def _operator(found: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(found == operand)
    if op == "$ne":
        return bool(found != operand)
    order = _ORDER.get(op)
    if order is None:  # a field beside operators, {"$gt": 1, "x": 2}: LangGraph has no meaning for it
        raise InvalidInput(f"a filter mixes operators with the field {op!r}")
    try:
        return bool(order(float(found), float(operand)))
    except (TypeError, ValueError):  # a missing field or a text: not in the range
        return False
