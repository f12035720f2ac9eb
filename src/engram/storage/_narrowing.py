"""A recall filter (``engram.recall_filter``) as SQL conditions on the ``memories`` table, for SQLite
and PostgreSQL: each search leg ANDs them into its WHERE, so its LIMIT counts matching rows only."""

from __future__ import annotations

import json
from typing import Any, Literal

from engram.recall_filter import RecallFilter

Dialect = Literal["sqlite", "postgres"]


def narrowing_sql(narrow: RecallFilter, dialect: Dialect, alias: str = "") -> tuple[str, list[Any]]:
    """(`` AND ...`` conditions, their parameters) for the filter; ('', []) for none. ``alias``
    prefixes the columns ("m." where the table is joined). Parameters are positional ``?`` in SQLite
    and named ``%(narrow<i>)s`` in PostgreSQL (``named_params`` names them), in the order given."""
    mark = "?" if dialect == "sqlite" else "%s"  # PostgreSQL's are numbered below
    conditions: list[str] = []
    params: list[Any] = []
    if narrow.session_id is not None:
        session = (
            f"json_extract({alias}attrs, '$.session_id')"
            if dialect == "sqlite"
            else f"{alias}attrs->>'session_id'"
        )
        conditions.append(f"{alias}memory_type = 'episodic' AND {session} = {mark}")
        params.append(narrow.session_id)
    if narrow.time_from is not None or narrow.time_to is not None:
        # the row's event time (engram.models.event_time), compared as a time, not as text
        if dialect == "sqlite":
            valid_from = f"json_extract({alias}attrs, '$.valid_from')"
            event = f"julianday(coalesce({alias}event_at, {valid_from}, {alias}created_at))"
            bound = f"julianday({mark})"
        else:
            event = (
                f"coalesce({alias}event_at, ({alias}attrs->>'valid_from')::timestamptz, {alias}created_at)"
            )
            bound = mark
        for at, op in ((narrow.time_from, ">="), (narrow.time_to, "<")):
            if at is not None:
                conditions.append(f"{event} {op} {bound}")
                params.append(at.isoformat() if dialect == "sqlite" else at)
    for key, value in narrow.metadata:
        if dialect == "postgres":
            # containment compares numbers by value and never a boolean with a number, as below
            conditions.append(f"{alias}metadata @> jsonb_build_object({mark}::text, {mark}::jsonb)")
            params += [key, json.dumps(value)]
            continue
        compare: list[Any]
        if isinstance(value, bool):
            kind, compare = f"type = '{'true' if value else 'false'}'", []
        elif isinstance(value, str):
            kind, compare = "type = 'text' AND value = ?", [value]
        else:
            kind, compare = "type IN ('integer', 'real') AND value = ?", [value]
        conditions.append(f"EXISTS (SELECT 1 FROM json_each({alias}metadata) WHERE key = ? AND {kind})")
        params += [key, *compare]
    sql = "".join(f" AND ({c})" for c in conditions)
    if dialect == "postgres":
        parts = sql.split("%s")
        sql = parts[0] + "".join(f"%(narrow{i})s{part}" for i, part in enumerate(parts[1:]))
    return sql, params


def named_params(params: list[Any]) -> dict[str, Any]:
    """PostgreSQL's parameters of ``narrowing_sql`` by name."""
    return {f"narrow{i}": value for i, value in enumerate(params)}
