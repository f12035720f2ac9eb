"""The memory inspector over real HTTP (no browser): sign-in and cookie, who sees what (a user key only
its own memories, the admin key any user's and read only), stored markup rendered as text, paging and
search, and the per-user activity log behind the "this turn" view."""

from __future__ import annotations

import base64
import logging
import re
from datetime import timedelta

import httpx
import pytest

from engram.interfaces.inspector import activity
from engram.interfaces.inspector.activity import ActivityLog, RecallEvent
from engram.models import EpisodicMemory, Hit, utcnow

XSS = 'Sarah\'s note <script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">'
BOB_SECRETS = ("9931", "Harbour", "garage door sticks")


def shows(text: str, page: str) -> bool:
    """Whether ``page`` holds ``text`` as such: "9931" is Bob's code, not the end of a timestamp's
    microseconds ("18:22:42.999931") or of a longer number."""
    return re.search(rf"(?<![\d.]){re.escape(text)}(?!\d)", page) is not None


BOB_ROW_MARKERS = ("garage code is", "lives at 12", "Bob's reset", "Bob&#39;s reset")  # never queried


def seed_world(service) -> dict:
    """Two users and the catalog, written as an agent would: sarah's turns, facts (one superseded),
    a playbook with feedback counts, a fact with markup in it; bob's private rows; one catalog row.
    Returns the rows by name."""
    sarah, bob, admin = service.client("sarah"), service.client("bob"), service.client()
    rows: dict = {}
    admin.post(
        "/v1/catalog",
        json={"title": "Hub v2 radios", "text": "The Lumio Hub v2 supports Zigbee 3.0 and Thread"},
    ).raise_for_status()
    rows["bob_turn"] = bob.post("/v1/turns", json={"text": "Bob's garage code is 9931"}).json()
    rows["bob_fact"] = bob.post("/v1/memories", json={"text": "Bob lives at 12 Harbour Road"}).json()
    rows["bob_playbook"] = bob.post(
        "/v1/memories",
        json={"memory_type": "procedural", "name": "Bob's reset", "trigger_text": "garage door sticks"},
    ).json()
    sarah.post("/v1/turns", json={"text": "my hub shows error E42 after the firmware update"})
    rows["bristol"] = sarah.post("/v1/memories", json={"text": "Sarah lives in Bristol"}).json()
    sarah.post(
        "/v1/import",
        json={
            "user_id": "sarah",
            "procedural": [
                {
                    "name": "Re-pair a Zigbee sensor",
                    "trigger_text": "a sensor shows offline",
                    "steps": [
                        {"order": 1, "instruction": "hold the reset button for 10 seconds"},
                        {"order": 2, "instruction": "add the sensor again in the Lumio app", "tool": "app"},
                    ],
                    "success_count": 3,
                    "failure_count": 1,
                }
            ],
        },
    ).raise_for_status()
    rows["xss"] = sarah.post("/v1/memories", json={"text": XSS, "fact_type": "preference"}).json()
    rows["moved"] = sarah.post("/v1/turns", json={"text": "we moved to Edinburgh last week!"}).json()
    rows["edinburgh"] = sarah.post(
        "/v1/memories",
        json={
            "text": "Sarah lives in Edinburgh",
            "supersedes_id": rows["bristol"]["id"],
            "contradiction": "natural",
        },
    ).json()
    rows["question"] = sarah.post(
        "/v1/turns", json={"text": "is my Zigbee hub supported where I live?"}
    ).json()
    sarah.post(
        "/v1/recall", json={"query": "where does Sarah live and which hub radios", "k": 8}
    ).raise_for_status()
    return rows


def sign_in(service, key: str) -> httpx.Client:
    client = httpx.Client(base_url=service.url, timeout=30)
    service.clients.append(client)
    response = client.post("/inspector/sign-in", data={"key": key})
    assert response.status_code == 303, response.text
    return client


def bob_snapshot(service) -> list[dict]:
    mem = service.engram.for_user("bob")
    return [
        m.model_dump(mode="json")
        for t in ("episodic", "semantic", "procedural")
        for m in mem.list(t, include_superseded=True, limit=1000)
    ]


def test_sign_in_cookie_sign_out_and_revocation(service):
    key = service.user_keys["sarah"]
    anon = httpx.Client(base_url=service.url, timeout=30)
    service.clients.append(anon)
    first = anon.get("/inspector/semantic")
    assert first.status_code == 303 and first.headers["location"] == "/inspector/sign-in"
    # htmx (a poll, a boosted link) is told to go to the sign-in page instead of swapping it into a box
    polled = anon.get("/inspector/turn/live", headers={"HX-Request": "true"})
    assert polled.status_code == 200 and polled.headers["HX-Redirect"] == "/inspector/sign-in"
    assert "Sign in" in anon.get("/inspector/sign-in").text

    wrong = anon.post("/inspector/sign-in", data={"key": "egk_not-a-key"})
    assert wrong.status_code == 401 and "unknown or has been revoked" in wrong.text
    assert "egk_not-a-key" not in wrong.text  # a mistyped key is not echoed back
    assert anon.post("/inspector/sign-in", data={"key": service.admin_key[:-1]}).status_code == 401

    signed = anon.post("/inspector/sign-in", data={"key": key})
    assert signed.status_code == 303 and signed.headers["location"] == "/inspector/semantic"
    cookie = signed.headers["set-cookie"]
    assert re.search(r"(?i)httponly", cookie) and re.search(r"(?i)samesite=strict", cookie)
    assert "Path=/inspector" in cookie and key not in cookie and key not in signed.headers["location"]
    token = anon.cookies["engram_inspector"]  # a random session token; never the key, even encoded
    assert base64.urlsafe_b64encode(key.encode()).decode().rstrip("=") not in token
    assert "Max-Age=633600" in cookie  # 8 hours, and a week more to say the session expired
    forged = httpx.Client(base_url=service.url, timeout=30, cookies={"engram_inspector": token[:-2] + "xx"})
    service.clients.append(forged)
    assert forged.get("/inspector/semantic").status_code == 303  # a tampered token signs nobody in
    page = anon.get("/inspector/semantic")
    assert page.status_code == 200 and key not in page.text and ">sarah<" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["cache-control"] == "no-store"

    # another site's page cannot sign anyone in or out
    evil = {"Origin": "http://evil.example"}
    assert anon.post("/inspector/sign-out", headers=evil).status_code == 403
    assert anon.post("/inspector/sign-in", data={"key": key}, headers=evil).status_code == 403
    assert anon.get("/inspector/semantic").status_code == 200
    proxied = {"Origin": "https://memory.example.com", "X-Forwarded-Host": "memory.example.com"}
    assert anon.post("/inspector/sign-in", data={"key": key}, headers=proxied).status_code == 303

    out = anon.post("/inspector/sign-out")
    assert out.status_code == 303 and 'engram_inspector=""' in out.headers["set-cookie"]
    assert out.headers["location"] == "/inspector/sign-in?ended=signed-out"
    assert "You are signed out." in anon.get(out.headers["location"]).text
    assert anon.get("/inspector/semantic").status_code == 303

    # a key revoked while signed in stops working at the next request
    extra_key, record = service.keys.create("sarah", "to revoke")
    client = sign_in(service, extra_key)
    assert client.get("/inspector/episodic").status_code == 200
    service.keys.revoke(record.id)
    assert client.get("/inspector/episodic").headers["location"] == "/inspector/sign-in?ended=revoked"


def copy_of(service, client: httpx.Client) -> httpx.Client:
    """Another client holding the same session token (a copied cookie)."""
    copy = httpx.Client(
        base_url=service.url, timeout=30, cookies={"engram_inspector": client.cookies["engram_inspector"]}
    )
    service.clients.append(copy)
    return copy


def test_signing_out_ends_the_session_on_the_server(service):
    """Sign-out only deleted the browser's cookie: a copied token kept working for 8 hours."""
    sarah = sign_in(service, service.user_keys["sarah"])
    copied = copy_of(service, sarah)
    assert copied.get("/inspector/semantic").status_code == 200
    assert sarah.post("/inspector/sign-out").status_code == 303
    assert copied.get("/inspector/semantic").headers["location"] == "/inspector/sign-in?ended=ended"

    # Sign out everywhere: every session of the key (another browser, a copy), not another key's.
    first, second = (sign_in(service, service.user_keys["sarah"]) for _ in range(2))
    copied, bob = copy_of(service, first), sign_in(service, service.user_keys["bob"])
    page = first.get("/inspector/semantic")
    assert 'action="/inspector/sign-out-everywhere"' in page.text
    evil = {"Origin": "http://evil.example"}
    assert second.post("/inspector/sign-out-everywhere", headers=evil).status_code == 403
    assert first.get("/inspector/semantic").status_code == 200  # refused: nothing ended
    out = second.post("/inspector/sign-out-everywhere")
    assert out.status_code == 303 and 'engram_inspector=""' in out.headers["set-cookie"]
    assert out.headers["location"] == "/inspector/sign-in?ended=signed-out-everywhere"
    for client in (first, second, copied):
        assert client.get("/inspector/semantic").status_code == 303
    assert bob.get("/inspector/semantic").status_code == 200

    # Revoking the key through the API ends its sessions.
    extra_key, record = service.keys.create("sarah", "to revoke")
    client = sign_in(service, extra_key)
    assert service.client().delete(f"/v1/keys/{record.id}").status_code == 204
    assert client.get("/inspector/semantic").status_code == 303


def test_any_cookie_is_a_sign_in_page_never_a_500(service):
    """A signature with a non-ASCII character made hmac.compare_digest raise: every page answered 500,
    before any sign-in."""
    anon = httpx.Client(base_url=service.url, timeout=30)
    service.clients.append(anon)
    _, record = service.keys.create("sarah")
    for value in (f"{record.id}.9999999999.é".encode(), "egs_é".encode(), b"egs_\xff\xfe", b"x" * 3000):
        cookie = {"Cookie": b"engram_inspector=" + value}
        for path in ("/inspector/semantic", "/inspector/turn/live"):
            response = anon.get(path, headers=cookie)
            assert response.status_code == 303 and response.headers["location"] == "/inspector/sign-in"
        assert anon.post("/inspector/sign-out", headers=cookie).status_code == 303
        assert anon.post("/inspector/sign-out-everywhere", headers=cookie).status_code == 303


def test_the_key_stays_out_of_urls_and_the_access_log(service, caplog):
    access = logging.getLogger("uvicorn.access")
    caplog.set_level(logging.INFO, logger="uvicorn.access")  # engram serve logs no access; turn it on
    access.addHandler(caplog.handler)  # uvicorn's access logger does not propagate to the root
    try:
        for key in (service.user_keys["sarah"], service.admin_key):
            client = sign_in(service, key)  # a new connection: it logs access at the level set now
            for path in ("/inspector/", "/inspector/episodic", "/inspector/turn", "/inspector/recall"):
                assert client.get(path, follow_redirects=True).status_code == 200
            client.post("/inspector/sign-out")
    finally:
        access.removeHandler(caplog.handler)
    assert "POST /inspector/sign-in" in caplog.text and "GET /inspector/turn" in caplog.text
    assert service.user_keys["sarah"] not in caplog.text and service.admin_key not in caplog.text


def test_user_key_never_sees_another_users_memories(service):
    rows = seed_world(service)
    bob_ids = [rows[k]["id"] for k in ("bob_turn", "bob_fact", "bob_playbook")]
    before = bob_snapshot(service)
    sarah = sign_in(service, service.user_keys["sarah"])
    attempts: list[tuple[str, str, dict]] = []
    for i in bob_ids:
        attempts += [("get", f"/inspector/memory/{i}", {}), ("get", f"/inspector/memory/{i}?user=bob", {})]
    for tab in ("episodic", "semantic", "procedural", "catalog", "recall", "turn", "turn/live", ""):
        for user in ("bob", "Bob", "bob ", "sarah/../bob", "*"):
            attempts.append(("get", f"/inspector/{tab}", {"params": {"user": user}}))
    for secret in BOB_SECRETS:
        for tab in ("episodic", "semantic", "procedural", "catalog"):
            attempts.append(("get", f"/inspector/{tab}", {"params": {"q": secret}}))
        attempts.append(("post", "/inspector/recall", {"data": {"query": secret, "k": "100"}}))
        attempts.append(
            ("post", "/inspector/recall", {"data": {"query": secret, "k": "100", "include_superseded": "on"}})
        )
        attempts.append(("post", "/inspector/recall?user=bob", {"data": {"query": secret}}))
    attempts += [("get", "/inspector/turn", {}), ("get", "/inspector/turn/live", {})]
    statuses = set()
    for method, path, kwargs in attempts:
        r = getattr(sarah, method)(path, **kwargs)
        statuses.add(r.status_code)
        asked = kwargs.get("params", kwargs.get("data", {})).get("q") or kwargs.get("data", {}).get("query")
        # The search box shows what was asked, so a secret that was the query itself may appear; the
        # rest of bob's rows around it never may.
        markers = [t for t in BOB_SECRETS if t != asked] + [*BOB_ROW_MARKERS, *bob_ids]
        for text in markers:
            assert not shows(text, r.text), (path, kwargs, r.status_code, text)
        if "user" in kwargs.get("params", {}) or "user=bob" in path:
            assert r.status_code in (403, 404), (path, kwargs)
    assert {200, 403, 404} <= statuses
    # the same answer for another user's id and an id that does not exist
    assert sarah.get(f"/inspector/memory/{bob_ids[1]}").text == sarah.get(
        "/inspector/memory/sem_" + "B" * 22
    ).text.replace("sem_" + "B" * 22, bob_ids[1])
    # her own pages work, and bob's rows were neither changed nor used
    assert "Sarah lives in Edinburgh" in sarah.get("/inspector/semantic?user=sarah").text
    assert bob_snapshot(service) == before


def test_admin_reads_a_chosen_user_read_only(service):
    rows = seed_world(service)
    admin = sign_in(service, service.admin_key)
    home = admin.get("/inspector/catalog")
    assert "Hub v2 radios" in home.text and ">bob</option>" in home.text and ">sarah</option>" in home.text
    assert "Pick a user" in admin.get("/inspector/semantic").text  # no user chosen: nobody's memories
    before = bob_snapshot(service)
    sarah_before = service.engram.for_user("sarah").get(rows["edinburgh"]["id"]).use_count

    assert "12 Harbour Road" in admin.get("/inspector/semantic", params={"user": "bob"}).text
    playbooks = admin.get("/inspector/procedural", params={"user": "bob"}).text
    # the name opens the playbook, as a row's text does on the other tabs (a newcomer's walk)
    assert f'href="/inspector/memory/{rows["bob_playbook"]["id"]}?user=bob">Bob&#39;s reset</a>' in playbooks
    detail = admin.get(f"/inspector/memory/{rows['bob_fact']['id']}", params={"user": "bob"})
    assert detail.status_code == 200 and "12 Harbour Road" in detail.text
    hits = admin.post("/inspector/recall?user=bob", data={"query": "where does Bob live", "k": "5"})
    assert hits.status_code == 200 and "12 Harbour Road" in hits.text and "cross-encoder" in hits.text
    chain = admin.get(f"/inspector/memory/{rows['bristol']['id']}", params={"user": "sarah"})
    assert "Sarah lives in Bristol" in chain.text and "Sarah lives in Edinburgh" in chain.text
    admin.post("/inspector/recall?user=sarah", data={"query": "where does Sarah live"})
    # a row of one user is not found when looking at another
    assert (
        admin.get(f"/inspector/memory/{rows['bob_fact']['id']}", params={"user": "sarah"}).status_code == 404
    )
    assert admin.get("/inspector/turn", params={"user": "bob"}).status_code == 200

    # nothing changed: no row, no use count (an inspector recall records no use)
    assert bob_snapshot(service) == before
    assert service.engram.for_user("sarah").get(rows["edinburgh"]["id"]).use_count == sarah_before
    # and the admin key still reads no memories through the API
    assert service.client().get("/v1/memories", params={"type": "semantic"}).status_code == 403


def test_inspector_recall_by_a_user_records_no_use(service):
    rows = seed_world(service)
    sarah = sign_in(service, service.user_keys["sarah"])
    before = service.engram.for_user("sarah").get(rows["edinburgh"]["id"]).use_count
    page = sarah.post("/inspector/recall", data={"query": "where does Sarah live", "k": "5"})
    assert page.status_code == 200 and "Sarah lives in Edinburgh" in page.text
    assert service.engram.for_user("sarah").get(rows["edinburgh"]["id"]).use_count == before
    empty = sarah.post("/inspector/recall", data={"query": "\u200b"})
    assert empty.status_code == 422 and "visible character" in empty.text
    # a recall has an address: the form sends a GET, a link shows its results (catalog included by
    # default), and Back from a hit returns to them (a newcomer's walk: the page came back empty)
    form = sarah.get("/inspector/recall").text
    assert re.search(r'<form method="get" action="/inspector/recall"', form)
    linked = sarah.get("/inspector/recall", params={"query": "where does Sarah live"})
    assert linked.status_code == 200 and "Sarah lives in Edinburgh" in linked.text
    assert 'name="include_catalog" checked' in linked.text and 'value="0.1"' in linked.text
    sent = sarah.get("/inspector/recall", params={"query": "where does Sarah live", "k": "5", "sent": "1"})
    assert 'name="include_catalog" checked' not in sent.text  # the form sent it unticked
    assert service.engram.for_user("sarah").get(rows["edinburgh"]["id"]).use_count == before
    admin = sign_in(service, service.admin_key)
    chosen = admin.get("/inspector/recall", params={"user": "sarah"}).text
    assert '<input type="hidden" name="user" value="sarah">' in chosen
    as_sarah = admin.get("/inspector/recall", params={"user": "sarah", "query": "where does Sarah live"})
    assert "Sarah lives in Edinburgh" in as_sarah.text


def test_the_recall_form_refuses_bad_numbers_and_shows_what_an_agent_would_not_see(service):
    """An outside newcomer's walk: k=0 or "abc" was clamped or replaced in silence, and nothing said
    that hits below the agent's min_confidence are not what an agent gets."""
    seed_world(service)
    sarah = sign_in(service, service.user_keys["sarah"])
    form = sarah.get("/inspector/recall")
    assert 'name="min_confidence"' in form.text and 'value="0.1"' in form.text  # the agent's default
    for k, floor in (("0", "0.1"), ("abc", "0.1"), ("2.5", "0.1"), ("101", "0.1"), ("5", "1.5"), ("5", "x")):
        page = sarah.post(
            "/inspector/recall", data={"query": "where does Sarah live", "k": k, "min_confidence": floor}
        )
        assert page.status_code == 422 and "must be" in page.text and '<ol class="hits">' not in page.text
    both = sarah.get("/inspector/recall", params={"query": "where", "k": "0", "min_confidence": "2"}).text
    assert "k must be" in both and "min_confidence must be" in both  # every mistake at once
    page = sarah.post(
        "/inspector/recall",
        data={"query": "what is my favourite colour?", "k": "5", "min_confidence": "0.99"},
    )
    assert page.status_code == 200 and "nothing relevant is known" in page.text
    assert page.text.count('class="hit below"') == 5
    page = sarah.post(
        "/inspector/recall", data={"query": "where does Sarah live", "k": "5", "min_confidence": "0"}
    )
    assert "nothing relevant is known" not in page.text and 'class="hit below"' not in page.text


def test_a_recall_page_says_once_what_concerns_the_recall_and_what_each_hits_time_is(service):
    """A newcomer's walk in a browser: the rerank stage's note was repeated, orange, on every hit; a hit's
    time had no label; a superseded hit (with "superseded" ticked) did not say what replaced it."""
    seed_world(service)
    sarah = sign_in(service, service.user_keys["sarah"])
    data = {"query": "where does Sarah live", "k": "10", "min_confidence": "0", "include_superseded": "on"}
    page = sarah.post("/inspector/recall", data=data).text
    hits = page.split('<li class="hit')[1:]
    assert len(hits) >= 3 and all("rerank_contenders" not in h and "rerank:" not in h for h in hits)
    assert page.count("cross-encoder read:") + page.count("cross-encoder:") == 1  # once, above the hits
    assert all('<span class="muted">said</span>' in h for h in hits if "badge episodic" in h)
    assert all('<span class="muted">stored</span>' in h for h in hits if "badge catalog" in h)
    bristol = next(h for h in hits if "Sarah lives in Bristol" in h)
    assert "replaced" in bristol and "by" in bristol and "Sarah lives in Edinburgh" in bristol


def test_a_refused_inspector_request_gets_the_inspectors_page_not_json(service):
    seed_world(service)
    sarah = sign_in(service, service.user_keys["sarah"])
    for params in ({"q": "x" * 600}, {"page": "abc"}):
        page = sarah.get("/inspector/semantic", params=params)
        assert page.status_code == 422 and page.headers["content-type"].startswith("text/html")
        assert "Not a valid request" in page.text and '<nav class="tabs"' in page.text  # header and tabs
    api = service.client("sarah").get("/v1/memories", params={"type": "nonsense"})
    assert api.status_code == 422 and api.json()["error"] == "invalid_input"  # the API keeps its JSON


def test_stored_markup_is_rendered_as_text(service):
    rows = seed_world(service)
    sarah = sign_in(service, service.user_keys["sarah"])
    pages = [
        sarah.get("/inspector/semantic"),
        sarah.get("/inspector/semantic", params={"q": "note"}),
        sarah.get(f"/inspector/memory/{rows['xss']['id']}"),
        sarah.post("/inspector/recall", data={"query": "Sarah's note", "k": "20"}),
        sarah.get("/inspector/turn"),
    ]
    pages.append(sarah.get("/inspector/turn/live", params={"v": 0}))
    for page in pages:
        assert page.status_code == 200
        assert "&lt;script&gt;window.__xss = 1&lt;/script&gt;" in page.text, page.url
        assert "&lt;img src=x onerror=&#34;window.__xss = 2&#34;&gt;" in page.text, page.url
        assert "<script>window" not in page.text and "<img" not in page.text


def test_tabs_count_page_and_search(service):
    mem = service.engram.for_user("sarah")
    start = utcnow() - timedelta(days=30)
    for i in range(27):
        mem.remember_turn(f"turn number {i:02d} about the thermostat", at=start + timedelta(hours=i))
    mem.remember_turn("the porch light flickers at night", at=start + timedelta(days=2))
    sarah = sign_in(service, service.user_keys["sarah"])
    first = sarah.get("/inspector/episodic")
    assert re.search(r"Episodic<span class=\"count\">28</span>", first.text)
    assert first.text.count('<tr class="') == 20 and "older →" in first.text
    assert "turn number 26" in first.text  # newest first
    second = sarah.get("/inspector/episodic", params={"page": 2})
    assert second.text.count('<tr class="') == 8 and "← newer" in second.text and "older →" not in second.text
    found = sarah.get("/inspector/episodic", params={"q": "porch"})
    assert (
        "1 match for" in found.text
        and "porch light flickers" in found.text
        and "thermostat" not in found.text
    )
    assert "No episodic memory matches" in sarah.get("/inspector/episodic", params={"q": "zebra"}).text
    assert sarah.get("/inspector/nonsense").status_code == 404
    static = sarah.get("/inspector/static/htmx.min.js")
    assert (
        static.status_code == 200
        and static.text.startswith("/*! htmx 2.0.11")
        and "0BSD" in static.text[:300]
    )


def test_this_turn_view_follows_the_users_key(service):
    rows = seed_world(service)
    sarah = sign_in(service, service.user_keys["sarah"])
    page = sarah.get("/inspector/turn")
    version = int(re.search(r"/inspector/turn/live\?v=(\d+)", page.text).group(1))
    # the current turn: the question, then the recall and its hits; earlier turns below it
    current = page.text.split('<details class="turn">')[0]
    assert "is my Zigbee hub supported where I live?" in current and "recalled" in current
    assert "Sarah lives in Edinburgh" in current and "Hub v2 radios" in current
    assert "Turn 3" in current and "Turn 2" in page.text  # sarah's third turn: bob's turns are his own
    assert "superseded" in page.text and "Sarah lives in Bristol" in page.text
    for secret in BOB_SECRETS:
        assert secret not in page.text
    assert sarah.get("/inspector/turn/live", params={"v": version}).status_code == 204

    api = service.client("sarah")
    gone = api.delete(f"/v1/memories/{rows['edinburgh']['id']}").json()["forgotten"]
    live = sarah.get("/inspector/turn/live", params={"v": version})
    assert live.status_code == 200 and "forgot" in live.text and gone["id"] in live.text
    assert "Sarah lives in Edinburgh" not in live.text  # forgotten: its text leaves the log too
    api.post("/v1/turns", json={"text": "thanks, that helped"})
    latest = sarah.get("/inspector/turn").text.split('<details class="turn">')[0]
    assert "Turn 4" in latest and "thanks, that helped" in latest and "forgot" not in latest
    # the lists mark what the current turn touched
    api.post("/v1/recall", json={"query": "which hub radios", "k": 3})
    assert "recalled this turn" in sarah.get("/inspector/catalog").text


def _hit(i: int) -> Hit:
    row: EpisodicMemory = EpisodicMemory(
        id=f"epi_{i:022d}", text=f"row {i}", user_id="u", created_at=utcnow(), timestamp=utcnow()
    )
    return Hit(memory=row, score=1.0, rank=1, confidence=0.5, event_time=row.timestamp, explain={})


def test_activity_log_is_bounded_per_user_and_scrubs_forgotten_rows():
    log = ActivityLog()
    for n in range(activity.TURNS_KEPT + 3):
        log.start_turn("u", _hit(n).memory)
    for n in range(activity.EVENTS_PER_TURN + 7):
        log.add("u", RecallEvent(utcnow(), f"q{n}", [_hit(n)]))
    version, turns = log.snapshot("u")
    assert len(turns) == activity.TURNS_KEPT and turns[0].number == activity.TURNS_KEPT + 3
    assert len(turns[0].events) == activity.EVENTS_PER_TURN and turns[0].dropped_events == 7
    log.scrub("u", _hit(0).memory.id)
    _, turns = log.snapshot("u")
    first = turns[0].events[0]
    assert isinstance(first, RecallEvent) and first.hits == [] and first.dropped_hits == 1
    assert log.version("u") > version and log.snapshot("someone else") == (0, [])
    for n in range(activity.USERS_KEPT + 5):
        log.add(f"user{n}", RecallEvent(utcnow(), "q", []))
    assert log.snapshot("u") == (0, []) and log.snapshot(f"user{activity.USERS_KEPT + 4}")[0] > 0


@pytest.mark.parametrize("path", ["/inspector", "/inspector/"])
def test_home_sends_each_key_to_its_first_tab(service, path):
    user = sign_in(service, service.user_keys["bob"])
    admin = sign_in(service, service.admin_key)
    assert user.get(path).headers["location"] == "/inspector/semantic"
    assert admin.get(path).headers["location"] == "/inspector/catalog"
    assert admin.get(path, params={"user": "bob"}).headers["location"] == "/inspector/semantic?user=bob"


def test_an_agents_mcp_calls_show_in_this_turn(service):
    """An agent on MCP (not REST) is what the "this turn" view is for: its tool calls are recorded."""
    import anyio

    from tests.interfaces.conftest import mcp_session

    service.client("sarah").post("/v1/turns", json={"text": "which radios does my hub have?"})

    async def agent() -> None:
        async with mcp_session(service.url, service.user_keys["sarah"]) as session:
            await session.call_tool("write_memory", {"text": "Sarah's hub is a Lumio Hub v2"})
            await session.call_tool("recall_memory", {"query": "which hub does sarah have"})

    anyio.run(agent)
    current = sign_in(service, service.user_keys["sarah"]).get("/inspector/turn").text
    current = current.split('<details class="turn">')[0]
    assert "which radios does my hub have?" in current
    assert "Sarah&#39;s hub is a Lumio Hub v2" in current and "which hub does sarah have" in current


def test_the_turn_view_keeps_rows_slim_and_never_shows_a_row_forgotten_elsewhere(service):
    api = service.client("sarah")
    long_text = "my router logs say " + "E42 " * 2000
    turn = api.post("/v1/turns", json={"text": long_text, "metadata": {"blob": "z" * 15_000}}).json()
    fact = api.post("/v1/memories", json={"text": "Sarah's router is a Fritzbox 7590"}).json()
    api.post("/v1/recall", json={"query": "which router does sarah have"})
    sarah = sign_in(service, service.user_keys["sarah"])
    page = sarah.get("/inspector/turn").text
    assert "my router logs say E42" in page and long_text not in page and "z" * 1000 not in page
    assert "Fritzbox 7590" in page and "which router does sarah have" in page
    # forgotten through the Python API (or the CLI, or another worker): this log never saw it go
    service.engram.for_user("sarah").forget(fact["id"])
    service.engram.for_user("sarah").forget(turn["id"])
    page = sarah.get("/inspector/turn").text
    assert "Fritzbox 7590" not in page and "my router logs say" not in page
    # the turn's recalls go with it (an agent recalls the message's own words; an erased user's id
    # given to someone else must not show them)
    assert "which router does sarah have" not in page and "(the query of a forgotten turn)" in page
