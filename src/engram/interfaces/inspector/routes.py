"""The memory inspector at ``/inspector``: server-rendered pages (Jinja2, always autoescaped) that htmx
makes quicker (boosted links, a polled "this turn" view). These pages only read; a user's own key
can forget or correct one of its memories from the memory's page (``changes``).

Who sees what:
- Sign in with an API key on the sign-in form (POST, so the key is never in a URL or an access log).
  The browser then holds a session token (``engram.auth``: random, stored by its hash, never the
  key) in a cookie that scripts cannot read (HttpOnly), that no other site's page can send
  (SameSite=Strict) and that only this path gets (Path=/inspector). Signing out ends the session in
  the store, so a copied token stops working too; "sign out everywhere" ends every session of the key.
  Every request resolves the session and its key again, so a revoked key stops working at once.
- A user key sees its own memories and the shared catalog, nothing else: any ``user`` parameter but
  its own is refused (403), and ids of other users' rows are not found (404), as on the REST API.
- The admin key picks any user (``?user=``) and sees that user's memories through
  ``Engram.reader``, a view without write methods whose recall records no use; without a user it
  sees the catalog. That is its one way to read users' memories, and it never changes them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.staticfiles import StaticFiles

from engram.auth import KEY_EXPIRED, ApiKeys
from engram.errors import InvalidInput, NotFound, Unauthenticated
from engram.interfaces.inspector.activity import ActivityLog, ids_in, without
from engram.interfaces.inspector.changes import router as changes_router
from engram.interfaces.inspector.web import (
    COOKIE,
    COOKIE_GRACE_S,
    COOKIE_MAX_AGE_S,
    ENDED,
    HERE,
    KEY_COOKIE,
    PAGE_SIZE,
    ROOT,
    Stop,
    Viewer,
    engram_of,
    error_page,
    first,
    forget_cookies,
    form_token,
    page,
    query_form,
    read_form,
    render,
    rows_by_id,
    same_origin,
    viewer,
)
from engram.limits import MAX_SERVICE_RECALL_K as MAX_FORM_K
from engram.memory import Engram
from engram.models import Hit, Memory, MemoryType
from engram.settings import DEFAULT_MIN_CONFIDENCE
from engram.storage.base import CATALOG, SearchFilter

__all__ = ["ROOT", "mount_inspector"]  # ROOT: where the inspector lives, for the pages around the API

SEARCH_CAP = 200  # best keyword matches a search shows
POLL_SECONDS = 2
LISTED: tuple[MemoryType, ...] = ("episodic", "semantic", "procedural", "catalog")
NOTICES = {"forgotten": "Forgotten: the memory is gone from recall, from these lists and from the turn log."}


def mount_inspector(app: FastAPI) -> None:
    """Serve the inspector on ``app`` (which has ``state.engram`` and ``state.keys``) and give it the
    activity log that the REST routes record into."""
    app.state.activity = ActivityLog()
    app.include_router(router)
    app.include_router(changes_router)
    app.mount(f"{ROOT}/static", StaticFiles(directory=HERE / "static"), name="inspector-static")
    app.add_exception_handler(Stop, _stop_handler)


async def _stop_handler(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, Stop)
    return exc.response


router = APIRouter(include_in_schema=False)  # a UI, not part of the documented API


# -- sign in and out --------------------------------------------------------------------------------
@router.get(f"{ROOT}/sign-in")
def sign_in_form(ended: Annotated[str, Query(max_length=20)] = "") -> HTMLResponse:
    """The sign-in form; after a session stopped working (``?ended=``), with the reason."""
    return render("sign_in.html", viewer=None, error=None, ended=ENDED.get(ended))


@router.post(f"{ROOT}/sign-in")
async def sign_in(request: Request) -> Response:
    same_origin(request)
    form = await read_form(request)
    key = first(form, "key").strip()
    try:
        principal = await anyio.to_thread.run_sync(request.app.state.keys.authenticate, key)
    except Unauthenticated as exc:
        expired = str(exc) == KEY_EXPIRED
        error = "That key has expired." if expired else "That key is unknown or has been revoked."
        return render("sign_in.html", 401, viewer=None, error=error, ended=None)
    token = await anyio.to_thread.run_sync(request.app.state.keys.open_session, principal, COOKIE_MAX_AGE_S)
    target = f"{ROOT}/semantic" if principal.user_id else f"{ROOT}/catalog"
    response = RedirectResponse(target, status_code=303)
    # a stored session's token (random, never the key), and the key's id (public): see web.ENDED
    for name, value in ((COOKIE, token), (KEY_COOKIE, principal.key_id)):
        response.set_cookie(
            name,
            value,
            path=ROOT,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            max_age=COOKIE_MAX_AGE_S + COOKIE_GRACE_S,
        )
    return response


@router.post(f"{ROOT}/sign-out")
def sign_out(request: Request) -> Response:
    """End this session: its token stops working for every process of the service, not only here."""
    same_origin(request)
    request.app.state.keys.end_session(request.cookies.get(COOKIE))
    return _signed_out("signed-out")


@router.post(f"{ROOT}/sign-out-everywhere")
def sign_out_everywhere(request: Request) -> Response:
    """End every session of the signed-in key (other browsers, a copied cookie), this one too."""
    same_origin(request)
    keys: ApiKeys = request.app.state.keys
    principal = keys.resolve_session(request.cookies.get(COOKIE))
    if principal is not None:
        keys.end_sessions(principal.key_id)
    return _signed_out("signed-out-everywhere")


def _signed_out(reason: str) -> Response:
    response = RedirectResponse(f"{ROOT}/sign-in?ended={reason}", status_code=303)
    forget_cookies(response)
    return response


# -- pages ------------------------------------------------------------------------------------------
@router.get(ROOT)
@router.get(f"{ROOT}/")
def home(request: Request, user: Annotated[str | None, Query(max_length=128)] = None) -> Response:
    v = viewer(request, user)
    return RedirectResponse(v.link("/semantic" if v.reader else "/catalog"), status_code=303)


@router.get(f"{ROOT}/recall")
def recall_form(request: Request, user: Annotated[str | None, Query(max_length=128)] = None) -> Response:
    """The form, or with ``query`` in the URL its results: a recall has an address (a link to share,
    and Back from a hit returns to it; an inspector recall records no use, so a GET changes nothing)."""
    if "query" in request.query_params:
        form = query_form(request)
        if "sent" not in form:  # a link typed or shared, not the form: its checkboxes' defaults
            form.setdefault("include_catalog", ["on"])
        return _recall_page(request, user, form)
    v = viewer(request, user)
    floor = engram_of(request).settings.min_confidence  # what the agent and MCP leave out by default
    context = page(request, v, "recall", form=_recall_defaults(floor), hits=None, error=None, replaced={})
    return render("recall.html", **context)


@router.post(f"{ROOT}/recall")
async def recall(request: Request, user: Annotated[str | None, Query(max_length=128)] = None) -> Response:
    same_origin(request)
    form = await read_form(request)
    return await anyio.to_thread.run_sync(_recall_page, request, user, form)


def _recall_defaults(min_confidence: float = DEFAULT_MIN_CONFIDENCE) -> dict[str, Any]:
    return {
        "query": "",
        "k": 10,
        "min_confidence": min_confidence,
        "include_superseded": False,
        "include_catalog": True,
    }


def _recall_page(request: Request, user: str | None, form: Mapping[str, list[str]]) -> Response:
    v = viewer(request, user)
    default_floor = str(engram_of(request).settings.min_confidence)
    k, floor = first(form, "k").strip() or "10", first(form, "min_confidence", default_floor).strip() or "0"
    values: dict[str, Any] = {
        "query": first(form, "query"),
        "k": k,
        "min_confidence": floor,
        "include_superseded": "include_superseded" in form,
        "include_catalog": "include_catalog" in form,
    }
    hits: list[Hit] | None = None
    wrong = [_bad_number(k, "k", 1, MAX_FORM_K, whole=True), _bad_number(floor, "min_confidence", 0, 1)]
    error = "; ".join(w for w in wrong if w) or None  # both at once (a newcomer's walk saw only k's)
    if v.reader is None:
        error = "Pick a user to recall as them."
    elif error is None:
        values["k"], values["min_confidence"] = int(k), float(floor)
        try:
            hits = v.reader.recall(
                values["query"],
                k=values["k"],
                include_catalog=values["include_catalog"],
                include_superseded=values["include_superseded"],
            )
        except InvalidInput as exc:
            error = str(exc)
    replaced = rows_by_id(request, v, _newer_ids(hits or []))
    context = page(request, v, "recall", form=values, hits=hits, error=error, replaced=replaced)
    return render("recall.html", 422 if error and v.reader else 200, **context)


def _newer_ids(hits: Sequence[Hit]) -> list[str | None]:
    """The rows whose text a hit names: what outdated it, and what replaced it when it is superseded."""
    outdated_by = [h.explain.get("outdated_by") for h in hits]
    return outdated_by + [getattr(h.memory, "superseded_by", None) for h in hits]


@router.get(f"{ROOT}/turn")
def turn_page(request: Request, user: Annotated[str | None, Query(max_length=128)] = None) -> HTMLResponse:
    v = viewer(request, user)
    return render("turn.html", **page(request, v, "turn", **_turn_context(request, v)))


@router.get(f"{ROOT}/turn/live")
def turn_live(
    request: Request,
    user: Annotated[str | None, Query(max_length=128)] = None,
    v: Annotated[int, Query(ge=0)] = 0,
) -> Response:
    """The "this turn" box again, for the poller; 204 (htmx keeps what it shows) when nothing changed."""
    who = viewer(request, user)
    if who.user_id is not None and request.app.state.activity.version(who.user_id) == v:
        return Response(status_code=204, headers={"Cache-Control": "no-store"})
    return render("_turn.html", viewer=who, **_turn_context(request, who))


def _turn_context(request: Request, v: Viewer) -> dict[str, Any]:
    if v.user_id is None:
        return {"version": 0, "turns": [], "poll": POLL_SECONDS, "replaced": {}}
    version, turns = request.app.state.activity.snapshot(v.user_id)
    assert v.reader is not None
    shown = ids_in(turns)
    # Forgotten through another process, the CLI or the Python API since it was logged: not shown.
    turns = without(turns, shown - v.reader.present(shown))
    hits = [h for t in turns for e in t.events for h in getattr(e, "hits", [])]
    replaced = rows_by_id(request, v, _newer_ids(hits))
    return {"version": version, "turns": turns, "poll": POLL_SECONDS, "replaced": replaced}


@router.get(f"{ROOT}/memory/{{memory_id}}")
def memory_page(
    request: Request, memory_id: str, user: Annotated[str | None, Query(max_length=128)] = None
) -> HTMLResponse:
    """One memory: its text, provenance, validity and use, its history, and (for the user's own key)
    forms to correct or forget it."""
    v = viewer(request, user)
    engram = engram_of(request)
    try:
        if v.reader is not None:
            row, chain = v.reader.get(memory_id), v.reader.history(memory_id)
        else:  # the admin without a user: catalog rows only
            row = engram.catalog.get(memory_id)
            chain = [row]
    except NotFound:
        gone = (
            next((t for t in engram.store.tombstones(v.user_id) if t.id == memory_id), None)
            if v.user_id
            else None
        )
        if gone is not None:  # a newcomer's walk: "Not found" for a row forgotten a minute before
            when = gone.forgotten_at.strftime("%Y-%m-%d %H:%M UTC")
            message = f"This {gone.memory_type} memory was forgotten on {when}: its text is gone for good."
            return error_page(request, 404, "Forgotten", message)
        admin = " Pick a user above to open their memories (an admin sees the catalog alone)."
        return error_page(
            request, 404, "Not found", "No such memory in this view." + (admin if v.reader is None else "")
        )
    episodes = rows_by_id(request, v, getattr(row, "supporting_episode_ids", []))
    context = page(request, v, row.memory_type, row=row, chain=chain, episodes=episodes)
    return render("memory.html", **context, replaced_by=_replacement(chain, row), token=form_token(request))


def _replacement(chain: list[Memory], row: Memory) -> Memory | None:
    """The row that replaced ``row`` (the next in its history), if any."""
    ids = [m.id for m in chain]
    at = ids.index(row.id) if row.id in ids else -1
    return chain[at + 1] if 0 <= at < len(chain) - 1 else None


@router.get(f"{ROOT}/{{memory_type}}")
def list_page(
    request: Request,
    memory_type: str,
    user: Annotated[str | None, Query(max_length=128)] = None,
    q: Annotated[str, Query(max_length=500)] = "",
    at: Annotated[int, Query(alias="page", ge=1, le=1_000_000)] = 1,
    live: bool = False,
    done: Annotated[str, Query(max_length=20)] = "",
) -> HTMLResponse:
    """One memory type, the most recently stored first (or best keyword matches first with ``q``),
    paged. The store lists rows in the order they were stored, so that is the order the page names
    and the time column shows; an episode's own time (when it was said) is shown beside it."""
    v = viewer(request, user)
    engram = engram_of(request)
    if memory_type not in LISTED:
        return error_page(request, 404, "Not found", "No such page in the inspector.")
    listed = memory_type
    notice = NOTICES.get(done)
    context = page(
        request, v, listed, live, q=q, page=at, rows=[], more=False, found=None, notice=notice, replaced={}
    )
    if memory_type != "catalog" and v.reader is None:
        return render("list.html", **context)
    offset = (at - 1) * PAGE_SIZE
    if q.strip():
        matches = _search(engram, v, listed, q, include_superseded=not live)
        context["found"] = f"{SEARCH_CAP}+" if len(matches) >= SEARCH_CAP else str(len(matches))
        context["rows"] = matches[offset : offset + PAGE_SIZE]
        context["more"] = len(matches) > offset + PAGE_SIZE
    else:
        if memory_type == "catalog":
            rows = engram.catalog.list(limit=PAGE_SIZE + 1, offset=offset)
        else:
            assert v.reader is not None
            rows = v.reader.list(listed, include_superseded=not live, limit=PAGE_SIZE + 1, offset=offset)
        context["rows"] = rows[:PAGE_SIZE]
        context["more"] = len(rows) > PAGE_SIZE
    context["replaced"] = rows_by_id(request, v, [getattr(m, "superseded_by", None) for m in context["rows"]])
    marks: dict[str, str] = {}
    if v.user_id is not None:  # rows the current turn recalled or wrote are marked in the lists
        _, turns = request.app.state.activity.snapshot(v.user_id)
        marks = turns[0].touched() if turns else {}
    return render("list.html", **context, marks=marks)


def _search(
    engram: Engram, v: Viewer, memory_type: MemoryType, q: str, *, include_superseded: bool
) -> list[Memory]:
    """Keyword matches (the store's BM25 index, best first) among the viewer's rows of one type. The
    tenant is the viewer's user, or the catalog's for the catalog tab: never another user's."""
    tenant = CATALOG if memory_type == "catalog" else v.user_id
    where = SearchFilter(memory_types=frozenset({memory_type}), include_superseded=include_superseded)
    ids = [h.id for h in engram.store.search_text(tenant, q, where, SEARCH_CAP)]
    rows = {m.id: m for m in engram.store.fetch(tenant, ids, include_catalog=memory_type == "catalog")}
    return [rows[i] for i in ids if i in rows and rows[i].memory_type == memory_type]


def _bad_number(text: str, name: str, low: float, high: float, whole: bool = False) -> str | None:
    """Why a form's number is refused (said, never clamped or replaced in silence), or None."""
    try:
        value = int(text) if whole else float(text)
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        kind = "a whole number" if whole else "a number"
        return f"{name} must be {kind} from {low:g} to {high:g}; got {text!r}"
    return None
