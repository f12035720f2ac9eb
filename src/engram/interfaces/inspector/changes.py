"""Forget or correct a memory from its inspector page: the two changes a person reading their memory
needs when a row is wrong.

- Only a user's own key changes that user's rows. The admin key reads users' memories through
  ``Engram.reader`` and has no write path here, as on the REST API (its key reads no user's memory
  there at all): its pages offer no change, and its posts are refused (403).
- Each change goes through the same calls as REST (the user's handle that records into the activity
  log): forget = ``forget`` (a tombstone), correct = ``write`` of a new fact with ``supersedes_id``
  (the old one stays in the history, marked replaced; "never true" retracts it).
- Each is confirmed: forgetting opens a page that asks first; a correction shows the old and the new
  text and asks before writing.
- Each post is checked three ways: the session (signed in), the Origin (same site) and the form's
  token (``web.form_token``, bound to the session). Without all three nothing changes (403).
"""

from __future__ import annotations

from typing import Annotated

import anyio
from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from engram.auth import READ_ONLY
from engram.errors import Conflict, InvalidInput, NotFound, PermissionDenied
from engram.interfaces.inspector.activity import RecordingMemory
from engram.interfaces.inspector.web import (
    ROOT,
    Stop,
    Viewer,
    check_form_token,
    engram_of,
    error_page,
    first,
    form_token,
    page,
    read_form,
    render,
    same_origin,
    viewer,
)
from engram.models import Contradiction, Memory, SemanticMemory, is_superseded

router = APIRouter(include_in_schema=False)
UserQuery = Annotated[str | None, Query(max_length=128)]
CONTRADICTIONS: dict[str, Contradiction] = {"natural": "natural", "harsh": "harsh"}


def _own_row(request: Request, user: str | None, memory_id: str) -> tuple[Viewer, Memory]:
    """The viewer and the row, if this key may change it; else a page that says why (nothing changed)."""
    v = viewer(request, user)
    if v.is_admin:
        message = "The admin key reads users' memories and never changes them: sign in with the user's key."
        raise Stop(error_page(request, 403, "Read only", message))
    if not v.may_write:
        raise Stop(error_page(request, 403, "Read only", READ_ONLY))
    assert v.reader is not None  # a user key always looks at its own memory
    try:
        row = v.reader.get(memory_id)
    except NotFound:
        raise Stop(error_page(request, 404, "Not found", "No such memory in this view.")) from None
    if not v.may_change(row):
        message = "Catalog rows are shared: only the admin changes them, through the API."
        raise Stop(error_page(request, 403, "Read only", message))
    return v, row


def _confirm(request: Request, v: Viewer, row: Memory, action: str, **context: object) -> HTMLResponse:
    frame = page(request, v, row.memory_type)
    frame.update(row=row, action=action, token=form_token(request), **context)
    return render("confirm.html", **frame)


@router.get(f"{ROOT}/memory/{{memory_id}}/forget")
def forget_form(request: Request, memory_id: str, user: UserQuery = None) -> HTMLResponse:
    """Ask before forgetting: what will go, and that it cannot be undone."""
    v, row = _own_row(request, user, memory_id)
    return _confirm(request, v, row, "forget", citing=_facts_citing(v, row))


CITING_SCAN = 2_000  # a user's live facts read for the ones a turn supports (a confirm page, not a recall)


def _facts_citing(v: Viewer, row: Memory) -> list[Memory]:
    """The live facts that name this turn as their source, to say so before it goes (a newcomer's walk:
    forgetting "we moved to Edinburgh" said nothing of "Sarah lives in Edinburgh", built on it)."""
    if v.reader is None or row.memory_type != "episodic":
        return []
    facts = v.reader.list("semantic", limit=CITING_SCAN)
    return [f for f in facts if isinstance(f, SemanticMemory) and row.id in f.supporting_episode_ids]


@router.post(f"{ROOT}/memory/{{memory_id}}/forget")
async def forget(request: Request, memory_id: str, user: UserQuery = None) -> Response:
    same_origin(request)
    form = await read_form(request)
    return await anyio.to_thread.run_sync(_forget, request, memory_id, user, form)


def _forget(request: Request, memory_id: str, user: str | None, form: dict[str, list[str]]) -> Response:
    v, row = _own_row(request, user, memory_id)
    check_form_token(request, form)
    assert v.user_id is not None
    mem = RecordingMemory(engram_of(request), v.user_id, request.app.state.activity)
    try:
        mem.forget(row.id, revive_retracted=form.get("revive_retracted") == ["yes"])
    except (NotFound, PermissionDenied) as exc:
        return error_page(request, 404, "Not found", str(exc))
    return RedirectResponse(v.link(f"/{row.memory_type}", done="forgotten"), status_code=303)


@router.post(f"{ROOT}/memory/{{memory_id}}/correct")
async def correct(request: Request, memory_id: str, user: UserQuery = None) -> Response:
    """Replace a wrong fact: first shows the old and new text and asks (``confirm`` absent), then
    writes the new fact superseding the old one."""
    same_origin(request)
    form = await read_form(request)
    return await anyio.to_thread.run_sync(_correct, request, memory_id, user, form)


def _correct(request: Request, memory_id: str, user: str | None, form: dict[str, list[str]]) -> Response:
    v, row = _own_row(request, user, memory_id)
    check_form_token(request, form)
    if not isinstance(row, SemanticMemory):
        return error_page(request, 422, "Not a fact", "Only facts are corrected here; forget the rest.")
    if is_superseded(row):
        message = "This fact has already been replaced: correct the newest one in its history."
        return error_page(request, 409, "Already replaced", message)
    text = first(form, "text").strip()
    kind = CONTRADICTIONS.get(first(form, "contradiction", "natural"))
    if kind is None:
        return error_page(request, 422, "Not written", "Say whether it changed or was never true.")
    if not text:
        return error_page(request, 422, "Nothing to write", "Write the correct fact in the box.")
    if " ".join(text.split()) == " ".join(row.text.split()):  # a replacement saying the same thing
        message = "The new text is the old one: edit it first (or forget the fact if it is wrong)."
        return error_page(request, 422, "Nothing changed", message)
    if first(form, "confirm") != "yes":
        return _confirm(request, v, row, "correct", text=text, contradiction=kind)
    assert v.user_id is not None
    mem = RecordingMemory(engram_of(request), v.user_id, request.app.state.activity)
    try:
        new = mem.write(text, fact_type=row.fact_type, supersedes_id=row.id, contradiction=kind)
    except InvalidInput as exc:
        return error_page(request, 422, "Not written", str(exc))
    except Conflict as exc:
        return error_page(request, 409, "Not written", str(exc))
    return RedirectResponse(v.link(f"/memory/{new.id}"), status_code=303)
