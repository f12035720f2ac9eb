"""The memory inspector at ``/inspector``: server-rendered pages (Jinja2, always autoescaped) that htmx
makes quicker (boosted links, a polled "this turn" view). It only reads: nothing here writes to a store.

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
  sees the catalog. That is its one way to read users' memories.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, cast
from urllib.parse import parse_qs, urlencode, urlsplit

import anyio
from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader
from starlette.staticfiles import StaticFiles

from engram.auth import KEY_EXPIRED, READ_ONLY, ApiKeys, Principal
from engram.errors import InvalidInput, NotFound, Unauthenticated
from engram.interfaces.inspector.activity import ActivityLog, ids_in, without
from engram.interfaces.inspector.explain import explain_parts, num, when
from engram.memory import Engram, MemoryReader, validate_user_id
from engram.models import Memory, MemoryType, is_superseded
from engram.storage.base import CATALOG, SearchFilter

ROOT = "/inspector"
COOKIE = "engram_inspector"
COOKIE_MAX_AGE_S = 8 * 3600  # a working day: a forgotten browser session does not keep the key for good
PAGE_SIZE = 20
COUNT_CAP = 1_000  # a tab counts at most this many rows ("1000+"): a count stops there, reading no row
SEARCH_CAP = 200  # best keyword matches a search shows
POLL_SECONDS = 2
HERE = Path(__file__).parent
LISTED: tuple[MemoryType, ...] = ("episodic", "semantic", "procedural", "catalog")

# Autoescape everything, whatever the file name: stored text is data, never markup.
_templates = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=True)

# The pages need only their own script and stylesheet; the policy stops anything injected from running.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # no-referrer would make Chromium send "Origin: null" on our forms
    "Cache-Control": "no-store",  # memories stay out of the browser's disk cache
}


class _Stop(Exception):
    """Not an error: a response to send instead of the page (sign in first, not yours)."""

    def __init__(self, response: Response) -> None:
        self.response = response


@dataclass(frozen=True)
class Viewer:
    """The signed-in key and whose memory it is looking at (None: the admin has picked no user)."""

    principal: Principal
    user_id: str | None
    reader: MemoryReader | None

    @property
    def is_admin(self) -> bool:
        return self.principal.is_admin

    @property
    def may_write(self) -> bool:
        """Whether a form may change what it shows: the user's own key, unless read-only (the admin
        looks at a user's memories read only)."""
        return self.principal.may_write and not self.is_admin

    def link(self, path: str = "", **params: Any) -> str:
        """An inspector URL that keeps the admin's chosen user; empty parameters are left out."""
        if self.is_admin and self.user_id:
            params = {"user": self.user_id, **params}
        kept = {k: v for k, v in params.items() if v is not None and v is not False and v != ""}
        return ROOT + path + ("?" + urlencode(kept) if kept else "")


def mount_inspector(app: FastAPI) -> None:
    """Serve the inspector on ``app`` (which has ``state.engram`` and ``state.keys``) and give it the
    activity log that the REST routes record into."""
    app.state.activity = ActivityLog()
    app.include_router(router)
    app.mount(f"{ROOT}/static", StaticFiles(directory=HERE / "static"), name="inspector-static")
    app.add_exception_handler(_Stop, _stop_handler)


async def _stop_handler(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, _Stop)
    return exc.response


router = APIRouter(include_in_schema=False)  # a UI, not part of the documented API


# -- rendering --------------------------------------------------------------------------------------
def render(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    html = _templates.get_template(template).render(root=ROOT, **context)
    return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)


def _redirect(url: str, request: Request) -> Response:
    if request.headers.get("hx-request"):  # htmx would follow a redirect and swap the page into a box
        return Response(status_code=200, headers={"HX-Redirect": url})
    return RedirectResponse(url, status_code=303)


def _page(request: Request, viewer: Viewer, tab: str, **context: Any) -> dict[str, Any]:
    """What every signed-in page shows: who is looking, the tabs with counts, the admin's user picker."""
    engram: Engram = request.app.state.engram
    counts: dict[str, str] = {"catalog": _count(engram.catalog.count(limit=COUNT_CAP + 1))}
    if viewer.reader is not None:
        for t in ("episodic", "semantic", "procedural"):
            counts[t] = _count(viewer.reader.count(t, include_superseded=True, limit=COUNT_CAP + 1))
    users: list[str] = []
    if viewer.is_admin:  # users with a key or with rows
        keyed = {k.user_id for k in request.app.state.keys.list() if k.user_id}
        users = sorted(keyed | set(getattr(engram.store, "tenants", list)()))
    return {"viewer": viewer, "tab": tab, "counts": counts, "users": users, **context}


def _count(n: int) -> str:
    return f"{COUNT_CAP}+" if n > COUNT_CAP else str(n)


# -- who is looking ---------------------------------------------------------------------------------
def viewer(request: Request, user: Annotated[str | None, Query(max_length=128)] = None) -> Viewer:
    """The signed-in key from the cookie, and whose memory it looks at; else a response that stops here."""
    keys: ApiKeys = request.app.state.keys
    engram: Engram = request.app.state.engram
    principal = keys.resolve_session(request.cookies.get(COOKIE))
    if principal is None:
        raise _Stop(_redirect(f"{ROOT}/sign-in", request))
    chosen = user or principal.user_id  # a user key looks at its own memory unless it asks otherwise
    if chosen is None:
        return Viewer(principal, None, None)  # the admin, no user picked yet
    if not principal.may_inspect(chosen):
        message = "This key can only see its own memories."
        raise _Stop(render("error.html", 403, title="Not yours", message=message, viewer=None))
    try:
        validate_user_id(chosen)
    except InvalidInput as exc:
        raise _Stop(render("error.html", 422, title="No such user", message=str(exc), viewer=None)) from None
    return Viewer(principal, chosen, engram.reader(chosen))


def writer(seen: Annotated[Viewer, Depends(viewer)]) -> Viewer:
    """The viewer of a route that writes (a form that forgets or corrects): a read-only key, or the
    admin looking at a user, gets 403 and nothing changes. The same rule as REST and MCP
    (``Principal.require_write``)."""
    if not seen.may_write:
        message = (
            READ_ONLY if not seen.principal.may_write else "The admin key looks at users' memories read only."
        )
        raise _Stop(render("error.html", 403, title="Read only", message=message, viewer=None))
    return seen


def _same_origin(request: Request) -> None:
    """Refuse a form posted from another site's page (a browser always sends Origin on a POST). Behind
    a reverse proxy the public host may come as X-Forwarded-Host: a page cannot set that header."""
    origin = request.headers.get("origin")
    hosts = {request.headers.get("host"), request.headers.get("x-forwarded-host")} - {None}
    if origin is not None and urlsplit(origin).netloc not in hosts:
        raise _Stop(render("error.html", 403, title="Refused", message="cross-site request", viewer=None))


async def _form(request: Request) -> dict[str, list[str]]:
    """The posted urlencoded form (parsed here: no multipart dependency for a few fields); {} when it
    is not one."""
    try:
        return parse_qs((await request.body()).decode("utf-8", "replace"), max_num_fields=10)
    except ValueError:
        return {}


def _engram(request: Request) -> Engram:
    return cast(Engram, request.app.state.engram)  # app.state is untyped: create_app sets it


# -- sign in and out --------------------------------------------------------------------------------
@router.get(f"{ROOT}/sign-in")
def sign_in_form() -> HTMLResponse:
    return render("sign_in.html", viewer=None, error=None)


@router.post(f"{ROOT}/sign-in")
async def sign_in(request: Request) -> Response:
    _same_origin(request)
    form = await _form(request)
    key = (form.get("key") or [""])[0].strip()
    try:
        principal = await anyio.to_thread.run_sync(request.app.state.keys.authenticate, key)
    except Unauthenticated as exc:
        error = (
            "That key has expired." if str(exc) == KEY_EXPIRED else "That key is unknown or has been revoked."
        )
        return render("sign_in.html", 401, viewer=None, error=error)
    token = await anyio.to_thread.run_sync(request.app.state.keys.open_session, principal, COOKIE_MAX_AGE_S)
    target = f"{ROOT}/semantic" if principal.user_id else f"{ROOT}/catalog"
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        COOKIE,
        token,  # a stored session's token: random, never the key
        path=ROOT,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        max_age=COOKIE_MAX_AGE_S,
    )
    return response


@router.post(f"{ROOT}/sign-out")
def sign_out(request: Request) -> Response:
    """End this session: its token stops working for every process of the service, not only here."""
    _same_origin(request)
    request.app.state.keys.end_session(request.cookies.get(COOKIE))
    return _signed_out()


@router.post(f"{ROOT}/sign-out-everywhere")
def sign_out_everywhere(request: Request) -> Response:
    """End every session of the signed-in key (other browsers, a copied cookie), this one too."""
    _same_origin(request)
    keys: ApiKeys = request.app.state.keys
    principal = keys.resolve_session(request.cookies.get(COOKIE))
    if principal is not None:
        keys.end_sessions(principal.key_id)
    return _signed_out()


def _signed_out() -> Response:
    response = RedirectResponse(f"{ROOT}/sign-in", status_code=303)
    response.delete_cookie(COOKIE, path=ROOT, httponly=True, samesite="strict")
    return response


# -- pages ------------------------------------------------------------------------------------------
@router.get(ROOT)
@router.get(f"{ROOT}/")
def home(request: Request, user: Annotated[str | None, Query(max_length=128)] = None) -> Response:
    v = viewer(request, user)
    return RedirectResponse(v.link("/semantic" if v.reader else "/catalog"), status_code=303)


@router.get(f"{ROOT}/recall")
def recall_form(request: Request, user: Annotated[str | None, Query(max_length=128)] = None) -> HTMLResponse:
    v = viewer(request, user)
    context = _page(request, v, "recall", form=_recall_defaults(), hits=None, error=None)
    return render("recall.html", **context, explain=explain_parts)


@router.post(f"{ROOT}/recall")
async def recall(request: Request, user: Annotated[str | None, Query(max_length=128)] = None) -> Response:
    _same_origin(request)
    form = await _form(request)
    return await anyio.to_thread.run_sync(_recall_page, request, user, form)


def _recall_defaults() -> dict[str, Any]:
    return {"query": "", "k": 10, "include_superseded": False, "include_catalog": True}


def _recall_page(request: Request, user: str | None, form: Mapping[str, list[str]]) -> Response:
    v = viewer(request, user)
    values: dict[str, Any] = {
        "query": (form.get("query") or [""])[0],
        "k": _int((form.get("k") or ["10"])[0], 10, 1, 100),
        "include_superseded": "include_superseded" in form,
        "include_catalog": "include_catalog" in form,
    }
    hits, error = None, None
    if v.reader is None:
        error = "Pick a user to recall as them."
    else:
        try:
            hits = v.reader.recall(
                values["query"],
                k=values["k"],
                include_catalog=values["include_catalog"],
                include_superseded=values["include_superseded"],
            )
        except InvalidInput as exc:
            error = str(exc)
    context = _page(request, v, "recall", form=values, hits=hits, error=error)
    return render("recall.html", 422 if error and v.reader else 200, **context, explain=explain_parts)


@router.get(f"{ROOT}/turn")
def turn_page(request: Request, user: Annotated[str | None, Query(max_length=128)] = None) -> HTMLResponse:
    v = viewer(request, user)
    return render("turn.html", **_page(request, v, "turn", **_turn_context(request, v)))


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
        return {"version": 0, "turns": [], "poll": POLL_SECONDS, "explain": explain_parts}
    version, turns = request.app.state.activity.snapshot(v.user_id)
    assert v.reader is not None
    shown = ids_in(turns)
    # Forgotten through another process, the CLI or the Python API since it was logged: not shown.
    turns = without(turns, shown - v.reader.present(shown))
    return {"version": version, "turns": turns, "poll": POLL_SECONDS, "explain": explain_parts}


@router.get(f"{ROOT}/memory/{{memory_id}}")
def memory_page(
    request: Request, memory_id: str, user: Annotated[str | None, Query(max_length=128)] = None
) -> HTMLResponse:
    v = viewer(request, user)
    engram = _engram(request)
    try:
        if v.reader is not None:
            row, chain = v.reader.get(memory_id), v.reader.history(memory_id)
        else:  # the admin without a user: catalog rows only
            row = engram.catalog.get(memory_id)
            chain = [row]
    except NotFound:
        context = _page(request, v, "", title="Not found", message="No such memory in this view.")
        return render("error.html", 404, **context)
    return render("memory.html", **_page(request, v, row.memory_type, row=row, chain=chain))


@router.get(f"{ROOT}/{{memory_type}}")
def list_page(
    request: Request,
    memory_type: str,
    user: Annotated[str | None, Query(max_length=128)] = None,
    q: Annotated[str, Query(max_length=500)] = "",
    page: Annotated[int, Query(ge=1, le=1_000_000)] = 1,
    live: bool = False,
) -> HTMLResponse:
    """One memory type, newest first (or best keyword matches first with ``q``), paged."""
    v = viewer(request, user)
    engram = _engram(request)
    if memory_type not in LISTED:
        context = _page(request, v, "", title="Not found", message="No such page in the inspector.")
        return render("error.html", 404, **context)
    listed = memory_type
    context = _page(request, v, listed, q=q, page=page, live=live, rows=[], more=False, found=None)
    if memory_type != "catalog" and v.reader is None:
        return render("list.html", **context)
    offset = (page - 1) * PAGE_SIZE
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


def _int(text: str, default: int, low: int, high: int) -> int:
    try:
        return min(high, max(low, int(text)))
    except ValueError:
        return default


_templates.filters["num"] = num
_templates.filters["when"] = when
_templates.globals["is_superseded"] = is_superseded
