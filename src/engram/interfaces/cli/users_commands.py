"""Data-rights commands on one user (admin, on the store directly): `engram users export USER` and
`engram users delete USER --yes` (as GET and DELETE /v1/admin/users/{user} over REST)."""

from __future__ import annotations

import getpass
import socket
import sys
from typing import Annotated

import typer

from engram.interfaces.cli.common import (
    JsonOpt,
    StoreOpt,
    _engram,
    _fail,
    _print_json,
    app,
    command_group,
    console,
    counted,
    err_console,
    written_whole,
)

users_app = command_group("Export or delete everything of one user (data-rights requests).")
app.add_typer(users_app, name="users")

UserArg = Annotated[str, typer.Argument(help="the user id")]


@users_app.command("export")
def users_export(
    user: UserArg,
    file: Annotated[str, typer.Option("--file", "-f", help="JSON Lines file to write; - for stdout")] = "-",
    store: StoreOpt = None,
) -> None:
    """Write everything of one user (memories of every type, tombstones, API keys as hashes) as JSON
    Lines in the format of `engram export` (`engram import --all` reads it back)."""
    from engram.transfer import export_user

    with _engram(store, existing=True, rerank=False, late_interaction=False) as eng:
        if file == "-":
            counts = export_user(eng, user, sys.stdout)
        else:
            with written_whole(file) as out:  # a user the store does not hold leaves FILE as it was
                counts = export_user(eng, user, out)
    summary = f"exported {counted(counts) or 'nothing'} of user {user}"
    err_console.print(summary, highlight=False, markup=False)


@users_app.command("delete")
def users_delete(
    user: UserArg,
    yes: Annotated[bool, typer.Option("--yes", help="really delete: without it nothing is deleted")] = False,
    as_json: JsonOpt = False,
    store: StoreOpt = None,
) -> None:
    """Delete everything of one user for good: memories of every type, tombstones, consolidation state,
    API keys and sign-in sessions, on every table and index of the store; their keys stop working at
    once. Run again, it deletes nothing. Audited, without content: the record is printed on stderr (and
    goes to the engram.audit log where logging is set up)."""
    from engram.data_rights import erase_user

    if not yes:
        raise _fail(f"this deletes everything of user {user!r} for good; add --yes to do it")
    with _engram(store, existing=True, rerank=False, late_interaction=False) as eng:
        by = f"the CLI ({getpass.getuser()}@{socket.gethostname()})"
        audit = err_console  # the engram.audit record, which no log of this process would keep
        deleted = erase_user(
            eng.store,
            user,
            by=by,
            said=lambda record: audit.print(
                f"audit: {record}", markup=False, highlight=False, soft_wrap=True
            ),
        )
    if as_json:
        _print_json({"user_id": user, "deleted": deleted})
        return
    summary = ", ".join(f"{n} {kind}" for kind, n in sorted(deleted.items())) or "nothing was left"
    console.print(f"deleted user {user}: {summary}", highlight=False, markup=False)
