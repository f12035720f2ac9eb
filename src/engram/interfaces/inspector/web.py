"""What every inspector page shares: the templates, who is looking (``viewer``), the page frame (header,
tabs with counts), error pages that keep that frame, the session-ended reasons and the form token.

A session that stops resolving sends the browser to the sign-in page with the reason (``?ended=``):
the key was revoked, the session expired, or it was ended (signed out here or everywhere). The cookies
outlive their session by COOKIE_GRACE_S for that: a token is worthless once its session is over, and
the key id cookie (``engram_inspector_key``, public, never the key) tells a revoked key from the rest.

Forms that change a memory carry a token (``form_token``): an HMAC of the session token, which only
this browser holds (the cookie is HttpOnly, SameSite=Strict), so no other page can know it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qs, urlencode, urlsplit

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader

from engram.auth import SESSION_PREFIX, ApiKeys, Principal, hash_key
from engram.errors import InvalidInput
from engram.interfaces.inspector.explain import (
    LEGEND,
    event_counts,
    explain_parts,
    num,
    recall_notes,
    time_label,
    when,
)
from engram.memory import Engram, MemoryReader, validate_user_id
from engram.models import Memory, is_superseded
from engram.storage.base import CATALOG

ROOT = "/inspector"
COOKIE = "engram_inspector"
KEY_COOKIE = "engram_inspector_key"  # the key's id (public): tells "revoked" from "signed out"
COOKIE_MAX_AGE_S = 8 * 3600  # a working day: a forgotten browser session does not keep the key for good
COOKIE_GRACE_S = 7 * 24 * 3600  # cookies outlive the session a week: the next visit says it expired
PAGE_SIZE = 20
COUNT_CAP = 1_000  # a tab counts at most this many rows ("1000+"): a count stops there, reading no row
HERE = Path(__file__).parent
ENDED = {  # ?ended= on the sign-in page: why the last session stopped working
    "revoked": "Your session ended: the key it was opened with has been revoked. Sign in with another key.",
    "expired": "Your session expired (sessions last 8 hours). Sign in again.",
    "ended": "Your session has ended: it was signed out (here, or everywhere from another browser), "
    "or it expired. Sign in again.",
    "signed-out": "You are signed out.",
    "signed-out-everywhere": "You are signed out, in every browser that used this key.",
}

# Autoescape everything, whatever the file name: stored text is data, never markup.
templates = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=True)
templates.filters["num"] = num
templates.filters["when"] = when
# JSON for reading: tojson's HTML escapes showed as text ("Sarah\u0027s"); autoescape makes this safe.
templates.filters["json"] = lambda value: json.dumps(value, ensure_ascii=False)
templates.globals["is_superseded"] = is_superseded
templates.globals["explain"] = explain_parts
templates.globals["recall_notes"] = recall_notes
templates.globals["time_label"] = time_label
templates.globals["event_counts"] = event_counts
templates.globals["legend"] = LEGEND

# The pages need only their own script and stylesheet; the policy stops anything injected from running.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # no-referrer would make Chromium send "Origin: null" on our forms
    "Cache-Control": "no-store",  # memories stay out of the browser's disk cache
}


class Stop(Exception):
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
        """Whether forms may change what this key sees: the user's own key, unless read-only (the admin
        looks at users' memories read only). The same rule as REST and MCP (``Principal.require_write``)."""
        return self.principal.may_write and not self.is_admin

    def may_change(self, row: Memory) -> bool:
        """Whether this page offers forget and correct for ``row``: the user's own writing key on the
        user's own row. The admin key reads users' memories and never changes them (as on the REST API)."""
        return self.may_write and row.user_id is not None and row.user_id == self.user_id

    def link(self, path: str = "", **params: Any) -> str:
        """An inspector URL that keeps the admin's chosen user; empty parameters are left out."""
        if self.is_admin and self.user_id:
            params = {"user": self.user_id, **params}
        kept = {k: v for k, v in params.items() if v is not None and v is not False and v != ""}
        return ROOT + path + ("?" + urlencode(kept) if kept else "")


def engram_of(request: Request) -> Engram:
    return cast(Engram, request.app.state.engram)  # app.state is untyped: create_app sets it


def keys_of(request: Request) -> ApiKeys:
    return cast(ApiKeys, request.app.state.keys)


# -- rendering --------------------------------------------------------------------------------------
def render(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    html = templates.get_template(template).render(root=ROOT, **context)
    return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)


def redirect(url: str, request: Request) -> Response:
    if request.headers.get("hx-request"):  # htmx would follow a redirect and swap the page into a box
        return Response(status_code=200, headers={"HX-Redirect": url})
    return RedirectResponse(url, status_code=303)


def page(request: Request, viewer: Viewer, tab: str, live: bool = False, **context: Any) -> dict[str, Any]:
    """What every signed-in page shows: who is looking, the tabs with counts (of live rows only when
    ``live``, as the list below them), the admin's user picker."""
    engram = engram_of(request)
    counts: dict[str, str] = {"catalog": _count(engram.catalog.count(limit=COUNT_CAP + 1))}
    if viewer.reader is not None:
        for t in ("episodic", "semantic", "procedural"):
            counts[t] = _count(viewer.reader.count(t, include_superseded=not live, limit=COUNT_CAP + 1))
    users = known_users(request) if viewer.is_admin else []
    return {"viewer": viewer, "tab": tab, "counts": counts, "users": users, "live": live, **context}


def known_users(request: Request) -> list[str]:
    """Users with a key or with rows: the ones the admin can pick."""
    keyed = {k.user_id for k in keys_of(request).list() if k.user_id}
    return sorted(keyed | set(getattr(engram_of(request).store, "tenants", list)()))


def _count(n: int) -> str:
    return f"{COUNT_CAP}+" if n > COUNT_CAP else str(n)


def error_page(request: Request, status: int, title: str, message: str) -> HTMLResponse:
    """An error page in the inspector's frame: with the header and tabs of whoever is signed in (their
    own view), so a refused link never strands them on a bare page."""
    principal = keys_of(request).resolve_session(request.cookies.get(COOKIE))
    if principal is None:
        return render("error.html", status, viewer=None, title=title, message=message)
    own = principal.user_id
    frame = Viewer(principal, own, engram_of(request).reader(own) if own else None)
    return render("error.html", status, **page(request, frame, ""), title=title, message=message)


# -- who is looking ---------------------------------------------------------------------------------
def viewer(request: Request, user: str | None) -> Viewer:
    """The signed-in key from the cookie, and whose memory it looks at; else a response that stops here."""
    keys, engram = keys_of(request), engram_of(request)
    principal = keys.resolve_session(request.cookies.get(COOKIE))
    if principal is None:
        raise Stop(_signed_out_to(request, ended_reason(request)))
    chosen = user or principal.user_id  # a user key looks at its own memory unless it asks otherwise
    if chosen is None:
        return Viewer(principal, None, None)  # the admin, no user picked yet
    if not principal.may_inspect(chosen):
        raise Stop(error_page(request, 403, "Not yours", "This key can only see its own memories."))
    try:
        validate_user_id(chosen)
    except InvalidInput as exc:
        raise Stop(error_page(request, 422, "No such user", str(exc))) from None
    if principal.is_admin and chosen not in known_users(request):
        message = f"No user {chosen!r}: nobody by that name has a key or any memory. Pick one above."
        raise Stop(error_page(request, 404, "No such user", message))
    return Viewer(principal, chosen, engram.reader(chosen))


def ended_reason(request: Request) -> str | None:
    """Why the browser's session no longer resolves (a key of ENDED), or None when it holds no token we
    could have issued (never signed in, or junk)."""
    token = request.cookies.get(COOKIE)
    if not token or not token.isascii() or not token.startswith(SESSION_PREFIX) or len(token) > 200:
        return None
    key_id = request.cookies.get(KEY_COOKIE)
    if key_id and any(k.id == key_id and k.revoked_at is not None for k in keys_of(request).list()):
        return "revoked"
    found = engram_of(request).store.find_session(hash_key(token))
    return "expired" if found is not None else "ended"


def _signed_out_to(request: Request, reason: str | None) -> Response:
    response = redirect(f"{ROOT}/sign-in" + (f"?ended={reason}" if reason else ""), request)
    if reason:  # said once: the next visit is a plain sign-in page
        forget_cookies(response)
    return response


def forget_cookies(response: Response) -> None:
    for name in (COOKIE, KEY_COOKIE):
        response.delete_cookie(name, path=ROOT, httponly=True, samesite="strict")


def same_origin(request: Request) -> None:
    """Refuse a form posted from another site's page (a browser always sends Origin on a POST). Behind
    a reverse proxy the public host may come as X-Forwarded-Host: a page cannot set that header."""
    origin = request.headers.get("origin")
    hosts = {request.headers.get("host"), request.headers.get("x-forwarded-host")} - {None}
    if origin is not None and urlsplit(origin).netloc not in hosts:
        message = "cross-site request: this form was sent from another site's page, and nothing was done."
        raise Stop(error_page(request, 403, "Refused", message))


def form_token(request: Request) -> str:
    """The token the forms that change a memory carry: bound to this browser's session."""
    session = (request.cookies.get(COOKIE) or "").encode("ascii", "replace")
    return hmac.new(session, b"engram-inspector-form", hashlib.sha256).hexdigest()


def check_form_token(request: Request, form: dict[str, list[str]]) -> None:
    """Refuse (403, nothing changed) a changing form without this session's token."""
    sent = (form.get("token") or [""])[0]
    if not hmac.compare_digest(sent.encode("ascii", "replace"), form_token(request).encode()):
        message = (
            "This form did not come from your inspector page (its token is missing or wrong). "
            "Nothing was changed: reload the page and try again."
        )
        raise Stop(error_page(request, 403, "Refused", message))


async def read_form(request: Request) -> dict[str, list[str]]:
    """The posted urlencoded form (parsed here: no multipart dependency for a few fields); {} when it
    is not one. Bytes or escapes that are not UTF-8 are refused (422, nothing done), as the API
    refuses them, rather than written as U+FFFD."""
    try:
        body = (await request.body()).decode("utf-8")
        return parse_qs(body, max_num_fields=10, encoding="utf-8", errors="strict")
    except UnicodeDecodeError:
        raise Stop(error_page(request, 422, "Not UTF-8", "The form held text that is not UTF-8.")) from None
    except ValueError:
        return {}


def query_form(request: Request) -> dict[str, list[str]]:
    """A GET form's fields, read as ``read_form`` reads a posted one (not UTF-8: 422, nothing done)."""
    try:
        return parse_qs(request.url.query, max_num_fields=10, encoding="utf-8", errors="strict")
    except UnicodeDecodeError:
        raise Stop(error_page(request, 422, "Not UTF-8", "The link held text that is not UTF-8.")) from None
    except ValueError:
        return {}


def first(form: Mapping[str, list[str]], name: str, default: str = "") -> str:
    return (form.get(name) or [default])[0]


def rows_by_id(request: Request, viewer: Viewer, ids: Iterable[str | None]) -> dict[str, Memory]:
    """The rows these ids name that the viewer can read (its user's and the catalog's), by id: the
    text shown for a "replaced by" or a supporting episode instead of a bare id."""
    wanted = sorted({i for i in ids if i})
    if not wanted:
        return {}
    rows = engram_of(request).store.fetch(viewer.user_id or CATALOG, wanted, include_catalog=True)
    return {m.id: m for m in rows}
