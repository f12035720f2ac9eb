"""The inspector's pages over real HTTP (no browser), for what a person works with: the order and counts
a list claims, error pages that keep the header, why a session ended, readable scores, hits and
replacements that link to their memory, a memory's provenance, and forgetting or correcting a memory
(confirmed, and refused without the form's token)."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape

import httpx

from engram.interfaces.inspector.explain import explain_parts, num
from engram.models import utcnow
from tests.interfaces.test_inspector import seed_world, sign_in


def _token(page: httpx.Response) -> str:
    return re.search(r'name="token" value="([0-9a-f]+)"', page.text).group(1)


def test_lists_say_their_order_and_tabs_count_what_they_show(service):
    mem = service.engram.for_user("sarah")
    start = utcnow() - timedelta(days=30)
    for i, day in enumerate((5, 1, 9)):  # said out of order (an import): listed as stored
        mem.remember_turn(f"turn {i} said on day {day}", at=start + timedelta(days=day))
    seed_world(service)
    sarah = sign_in(service, service.user_keys["sarah"])
    page = sarah.get("/inspector/episodic").text
    assert "Most recently stored first" in page and "stored ↓" in page
    texts = re.findall(r"turn (\d) said on day", page)
    assert texts == ["2", "1", "0"]  # the newest stored first, whatever day each was said on
    stored = re.findall(r'<td class="when">([^<]+)</td>', page)
    assert stored == sorted(stored, reverse=True)
    assert "said " + (start + timedelta(days=9)).strftime("%Y-%m-%d") in page  # its own time, beside

    def count(html: str, tab: str) -> str:
        return re.search(rf'data-tab="{tab}">.*?<span class="count">([^<]+)<', html, re.S).group(1)

    every = sarah.get("/inspector/semantic").text
    live = sarah.get("/inspector/semantic", params={"live": "true"}).text
    assert (count(every, "semantic"), count(live, "semantic")) == ("3", "2")  # Bristol was replaced
    assert every.count('<tr class="') == 3 and live.count('<tr class="') == 2
    assert 'href="/inspector/semantic?live=true"' in live  # the tab keeps the filter it counts with
    # a 13,000-character turn filled the whole tab (a newcomer's walk): the list shows its start
    long = mem.remember_turn("pasted log line. " * 800)
    listed = sarah.get("/inspector/episodic").text
    assert "13,600 characters: open it to read all" in listed and listed.count("pasted log line.") < 40
    assert sarah.get(f"/inspector/memory/{long.id}").text.count("pasted log line.") >= 800


def test_error_pages_keep_the_header_and_name_the_problem(service):
    rows = seed_world(service)
    sarah = sign_in(service, service.user_keys["sarah"])
    admin = sign_in(service, service.admin_key)
    cases = [
        (sarah.get("/inspector/semantic", params={"user": "bob"}), 403, "can only see its own memories"),
        (sarah.get("/inspector/memory/sem_" + "B" * 22), 404, "No such memory in this view"),
        (sarah.get("/inspector/nonsense"), 404, "No such page in the inspector"),
        (admin.get("/inspector/semantic", params={"user": "ghost"}), 404, "No user &#39;ghost&#39;"),
        (admin.get("/inspector/semantic", params={"user": "no/such"}), 422, "user_id"),
        (sarah.post(f"/inspector/memory/{rows['edinburgh']['id']}/forget"), 403, "token is missing"),
        (sarah.get("/inspector/semantic/nonsense"), 404, "No such page in the inspector"),  # no route
        # a page number in a person's words, not pydantic's (a newcomer's walk)
        (sarah.get("/inspector/semantic", params={"page": -1}), 422, "page in the address must be 1 or more"),
        (sarah.get("/inspector/semantic", params={"page": 9999}), 200, "back to the first"),
        (admin.get(f"/inspector/memory/{rows['edinburgh']['id']}"), 404, "Pick a user above"),
    ]
    for response, status, message in cases:
        assert response.status_code == status and message in response.text, (status, response.text[-600:])
        assert '<nav class="tabs"' in response.text and 'id="sign-out"' in response.text
    assert ">sarah<" in cases[0][0].text and "Bob lives" not in cases[0][0].text
    assert '<select id="user-pick"' in cases[3][0].text  # the admin can pick a real user from there
    assert admin.get("/inspector/semantic", params={"user": "bob"}).status_code == 200


def test_a_session_that_stopped_working_says_why(service):
    sign_in_page = "/inspector/sign-in"
    extra, record = service.keys.create("sarah", "to revoke")
    revoked = sign_in(service, extra)
    service.keys.revoke(record.id)
    gone = revoked.get("/inspector/semantic")
    assert gone.headers["location"] == f"{sign_in_page}?ended=revoked"
    assert 'engram_inspector=""' in gone.headers["set-cookie"]  # said once, then a plain sign-in
    assert "key it was opened with has been revoked" in revoked.get(gone.headers["location"]).text

    principal = service.keys.resolve(service.user_keys["sarah"])
    expired = httpx.Client(
        base_url=service.url, cookies={"engram_inspector": service.keys.open_session(principal, -1)}
    )
    service.clients.append(expired)
    polled = expired.get("/inspector/turn/live", headers={"HX-Request": "true"})
    assert polled.headers["HX-Redirect"] == f"{sign_in_page}?ended=expired"
    assert "Your session expired" in expired.get(f"{sign_in_page}?ended=expired").text

    out = sign_in(service, service.user_keys["sarah"])
    copy = httpx.Client(base_url=service.url, cookies={"engram_inspector": out.cookies["engram_inspector"]})
    service.clients.append(copy)
    out.post("/inspector/sign-out")
    assert copy.get("/inspector/episodic").headers["location"] == f"{sign_in_page}?ended=ended"
    assert "it was signed out" in copy.get(f"{sign_in_page}?ended=ended").text
    assert "alert" not in copy.get(f"{sign_in_page}?ended=<script>").text  # only our own reasons


def test_scores_read_plainly_and_hits_link_to_their_memory(service):
    rows = seed_world(service)
    sarah = sign_in(service, service.user_keys["sarah"])
    page = sarah.post("/inspector/recall", data={"query": "where does Sarah live", "k": "10"}).text
    assert 'id="legend"' in page and "use_count_boost" in page and "calibrated chance" in page
    hits = re.findall(r'<li class="hit[^"]*" data-id="([^"]+)">(.*?)</li>', page, re.S)
    assert len(hits) >= 4
    for memory_id, html in hits:
        assert f'href="/inspector/memory/{memory_id}"' in html
        # no scientific notation (a number on its own, not a run of letters and digits in an id)
        assert not re.search(r"(?<![\w.])\d+(\.\d+)?[eE][-+]?\d+(?!\w)", html)
        assert not re.search(r"× \w+ 1<", html)  # a multiplier of 1 is not shown
        confidence = float(re.search(r"conf (\d\.\d\d)<", html).group(1))
        assert 0 <= confidence <= 1
    # the agent's own recall, in "this turn": the same hits, each with its explain
    turn = sarah.get("/inspector/turn").text.split('<details class="turn">')[0]
    assert turn.count('<details class="why">') >= 3 and "cross-encoder" in turn
    assert f'href="/inspector/memory/{rows["edinburgh"]["id"]}"' in turn
    assert num(1.2e-5) == "0.000012" and num(0.123456) == "0.123" and num(12.0) == "12"
    parts = explain_parts({"rrf": 0.03, "decay": 1.0, "source_prior": 0.85, "final": 2e-5})
    assert parts.multipliers == [("source_prior", 0.85)] and parts.neutral == 1


def test_replacements_show_their_text_and_a_memory_page_its_provenance(service):
    rows = seed_world(service)
    sarah_mem = service.engram.for_user("sarah")
    start = utcnow() - timedelta(days=3)
    fact = sarah_mem.write(
        "Sarah's hub runs firmware 4.2",
        supporting_episode_ids=[rows["question"]["id"]],
        valid_from=start,
        metadata={"source": "agent", "note": "Sarah's <b>hub</b>"},
    )
    sarah = sign_in(service, service.user_keys["sarah"])
    listed = sarah.get("/inspector/semantic").text
    bristol = listed.split(f'data-id="{rows["bristol"]["id"]}"')[1].split("</tr>")[0]
    assert re.search(r'class="replacement"[^>]*>Sarah lives in Edinburgh</a>', bristol)
    page = sarah.get(f"/inspector/memory/{fact.id}").text
    assert "“is my Zigbee hub supported where I live?”" in page  # the turn it came from, by its text
    assert "agent" in page.split('id="provenance"')[1]
    # metadata reads as written (tojson showed "Sarah\u0027s"), and stays text, never markup
    shown = page.split("<dt>metadata</dt>")[1].split("</dd>")[0]
    assert '"note": "Sarah\'s <b>hub</b>"' in unescape(shown) and "<b>" not in shown
    validity = page.split('id="validity"')[1]
    assert start.strftime("%Y-%m-%d %H:%M") in validity and "open-ended" in validity
    assert "0× by the agent" in validity and "live" in validity
    old = sarah.get(f"/inspector/memory/{rows['bristol']['id']}").text
    assert 'class="replaced-by"' in old and "Sarah lives in Edinburgh" in old.split('class="replaced-by"')[1]
    assert 'id="correct-form"' not in old  # a replaced fact is corrected at its newest version


def test_forget_and_correct_are_confirmed_and_need_the_forms_token(service):
    rows = seed_world(service)
    sarah = sign_in(service, service.user_keys["sarah"])
    mem = service.engram.for_user("sarah")
    edinburgh = rows["edinburgh"]["id"]
    token = _token(sarah.get(f"/inspector/memory/{edinburgh}"))
    correct = f"/inspector/memory/{edinburgh}/correct"
    change = {"text": "Sarah lives in Glasgow", "contradiction": "natural", "confirm": "yes"}
    refused = [
        sarah.post(correct, data=change),  # no token
        sarah.post(correct, data={**change, "token": "0" * 64}),  # a wrong one
        sarah.post(correct, data={**change, "token": token}, headers={"Origin": "http://evil.example"}),
        sarah.post(f"/inspector/memory/{edinburgh}/forget", data={"token": token[::-1]}),
        sign_in(service, service.admin_key).post(f"{correct}?user=sarah", data={**change, "token": token}),
    ]
    assert [r.status_code for r in refused] == [403] * 5
    assert mem.get(edinburgh).superseded_by is None and "Glasgow" not in str(mem.list("semantic"))
    bob = sarah.post(f"/inspector/memory/{rows['bob_fact']['id']}/forget", data={"token": token})
    assert bob.status_code == 404 and service.engram.for_user("bob").get(rows["bob_fact"]["id"])

    asked = sarah.post(correct, data={**change, "token": token, "confirm": ""})  # first: asks
    assert asked.status_code == 200 and "Replace this fact?" in asked.text
    assert "Sarah lives in Glasgow" in asked.text
    assert mem.get(edinburgh).superseded_by is None
    done = sarah.post(correct, data={**change, "token": token})
    assert done.status_code == 303
    new_id = done.headers["location"].rsplit("/", 1)[1]
    assert mem.get(new_id).text == "Sarah lives in Glasgow" and mem.get(edinburgh).superseded_by == new_id
    assert sarah.post(correct, data={**change, "token": token}).status_code == 409  # already replaced

    ask = sarah.get(f"/inspector/memory/{new_id}/forget")
    assert ask.status_code == 200 and "Forget this memory?" in ask.text and mem.get(new_id)
    gone = sarah.post(f"/inspector/memory/{new_id}/forget", data={"token": _token(ask)})
    assert gone.status_code == 303 and gone.headers["location"] == "/inspector/semantic?done=forgotten"
    assert new_id not in {m.id for m in mem.list("semantic", include_superseded=True)}
    assert "Forgotten" in sarah.get(gone.headers["location"]).text
    assert "forgot" in sarah.get("/inspector/turn").text  # recorded as the API's forget is
    # a newcomer's walk: its page said "Not found" as if the id were wrong; bob sees no such thing
    page = sarah.get(f"/inspector/memory/{new_id}")
    assert page.status_code == 404 and "was forgotten on" in page.text and "Glasgow" not in page.text
    assert (
        "was forgotten on"
        not in sign_in(service, service.user_keys["bob"]).get(f"/inspector/memory/{new_id}").text
    )
    # a correction that changes nothing is refused, and nothing is written
    unchanged = {
        "text": " Sarah lives in  Edinburgh",
        "contradiction": "natural",
        "confirm": "yes",
        "token": token,
    }
    live = mem.list("semantic")
    assert (
        sarah.post(
            f"/inspector/memory/{rows['xss']['id']}/correct", data={**unchanged, "text": rows["xss"]["text"]}
        ).status_code
        == 422
    )
    assert mem.list("semantic") == live
    # forgetting a turn a fact names as its source says so first
    mem.write("Sarah moved to Leith", supporting_episode_ids=[rows["moved"]["id"]])
    ask = sarah.get(f"/inspector/memory/{rows['moved']['id']}/forget").text
    assert 'id="citing"' in ask and "Sarah moved to Leith" in ask.split('id="citing"')[1]
    assert 'id="citing"' not in sarah.get(f"/inspector/memory/{rows['xss']['id']}/forget").text


def test_query_coverage_is_not_shown_as_a_multiplier_of_the_score():
    # final = relevance x the multipliers: coverage (a confidence feature) listed among them misled
    parts = explain_parts({"late_interaction": 0.9, "query_coverage": 0.41, "decay": 0.8, "final": 0.72})
    assert parts.multipliers == [("decay", 0.8)] and parts.neutral == 0


def test_forgetting_a_harsh_correction_keeps_the_retracted_fact_unless_asked(service):
    """A newcomer's walk: the forget page said "the fact it replaced becomes live again" after an "it
    was never true" correction, which keeps that fact retracted, and its list row then linked to the
    forgotten correction ("Not found"). The page says what happens and offers to revive it."""
    rows = seed_world(service)
    sarah = sign_in(service, service.user_keys["sarah"])
    mem = service.engram.for_user("sarah")
    edinburgh = rows["edinburgh"]["id"]
    token = _token(sarah.get(f"/inspector/memory/{edinburgh}"))
    wrong = {"text": "Sarah lives in Glasgow", "contradiction": "harsh", "confirm": "yes", "token": token}
    new_id = (
        sarah.post(f"/inspector/memory/{edinburgh}/correct", data=wrong).headers["location"].rsplit("/", 1)[1]
    )
    ask = sarah.get(f"/inspector/memory/{new_id}/forget")
    assert "becomes live again" not in ask.text and "stays retracted, unless you tick this" in ask.text
    assert 'name="revive_retracted"' in ask.text
    assert sarah.post(f"/inspector/memory/{new_id}/forget", data={"token": _token(ask)}).status_code == 303
    assert mem.get(edinburgh).retracted and mem.get(edinburgh).superseded_by == new_id
    listed = sarah.get("/inspector/semantic?live=0").text
    assert "by a memory since forgotten" in listed and f"/inspector/memory/{new_id}" not in listed

    # Ticked: the retracted fact is live again.
    fact = next(m for m in mem.list("semantic") if m.text.startswith("Sarah"))
    redo = {**wrong, "token": _token(ask), "text": fact.text + " (no)"}
    again = (
        sarah.post(f"/inspector/memory/{fact.id}/correct", data=redo).headers["location"].rsplit("/", 1)[1]
    )
    ask = sarah.get(f"/inspector/memory/{again}/forget")
    revived = sarah.post(
        f"/inspector/memory/{again}/forget", data={"token": _token(ask), "revive_retracted": "yes"}
    )
    assert revived.status_code == 303
    assert mem.get(fact.id).superseded_by is None and not mem.get(fact.id).retracted


def test_a_correction_that_is_not_utf8_or_of_no_known_kind_changes_nothing(service):
    """An outside bug hunt: the correct form stored bytes that are not UTF-8 as U+FFFD, superseding the
    real fact (REST refuses them), and took an unknown kind of correction for "natural"."""
    rows = seed_world(service)
    sarah = sign_in(service, service.user_keys["sarah"])
    edinburgh = rows["edinburgh"]["id"]
    token = _token(sarah.get(f"/inspector/memory/{edinburgh}"))
    correct = f"/inspector/memory/{edinburgh}/correct"
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    escaped = sarah.post(correct, content=f"token={token}&text=%ED%A0%80&confirm=yes", headers=headers)
    raw = sarah.post(
        correct, content=f"token={token}&confirm=yes&text=".encode() + b"\xed\xa0\x80", headers=headers
    )
    bogus = sarah.post(
        correct,
        data={"token": token, "text": "Sarah lives in Perth", "contradiction": "bogus", "confirm": "yes"},
    )
    assert [r.status_code for r in (escaped, raw, bogus)] == [422, 422, 422]
    assert "not UTF-8" in escaped.text and "changed or was never true" in bogus.text
    assert service.engram.for_user("sarah").get(edinburgh).superseded_by is None
