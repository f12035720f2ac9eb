"""The memory inspector in a real browser: Debian's headless Chromium driven by Playwright, against the
real service (uvicorn, SQLite, the packaged models). One browser for the module, a fresh context (no
cookies) per test: the ``browser`` and ``tab`` fixtures of tests/interfaces/conftest.py.
A screenshot of the recall page, showing all four memory types, is saved under the test's tmp dir and
copied to $ENGRAM_ARTIFACTS when that is set.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.interfaces.test_inspector import BOB_SECRETS, seed_world


def save_artifact(path: Path) -> None:
    target = os.environ.get("ENGRAM_ARTIFACTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(target) / path.name)


def test_sign_in_browse_the_tabs_and_recall_with_explain(tab, service, tmp_path):
    seed_world(service)
    key = service.user_keys["sarah"]
    tab.sign_in(key, "semantic")
    page = tab.page
    counts = {t: page.inner_text(f"nav.tabs a[data-tab={t}] .count") for t in ("episodic", "semantic")}
    assert counts == {"episodic": "3", "semantic": "3"}
    for name, badge, expect in [
        ("episodic", "episodic", "we moved to Edinburgh last week!"),
        ("procedural", "procedural", "Re-pair a Zigbee sensor"),
        ("catalog", "catalog", "The Lumio Hub v2 supports Zigbee 3.0 and Thread"),
        ("semantic", "semantic", "Sarah lives in Edinburgh"),
    ]:
        tab.open_tab(name)
        assert page.locator(f"main .badge.{badge}").count() >= 1 and expect in tab.text()
        assert page.locator(f"main .badge:not(.{badge})").count() == 0
    tab.open_tab("procedural")
    card = page.locator("article.playbook", has_text="Re-pair a Zigbee sensor")
    assert card.locator(".ok").inner_text() == "✓ 3" and card.locator(".bad").inner_text() == "✗ 1"
    assert card.locator("ol.steps li").all_inner_texts() == [
        "hold the reset button for 10 seconds",
        "add the sensor again in the Lumio app app",
    ]

    tab.open_tab("recall")
    page.fill("input[name=query]", "where does Sarah live, and which radios does her Zigbee hub have?")
    page.click("form.recall-form button")
    page.wait_for_selector("ol.hits li.hit")
    hits = page.locator("ol.hits li.hit")
    assert {hits.nth(i).locator(".badge").inner_text().lower() for i in range(hits.count())} == {
        "episodic",
        "semantic",
        "procedural",
        "catalog",
    }
    # The live fact is shown (the superseded Bristol one is not). The cross-encoder reads the question
    # and the fact in Sarah's own voice ("where do I live, and which radios ..." / "I live in
    # Edinburgh") and scores a two-part question low against either half, so its place is not pinned.
    assert any("Sarah lives in Edinburgh" in hits.nth(i).inner_text() for i in range(hits.count()))
    assert not any("Sarah lives in Bristol" in hits.nth(i).inner_text() for i in range(hits.count()))
    top = hits.filter(has_text="Sarah lives in Edinburgh").first
    stages = top.locator(".stage b").all_inner_texts()
    assert stages == ["BM25", "dense", "RRF", "late interaction", "cross-encoder"]
    assert top.locator(".stage.used b").inner_text() in {"late interaction", "cross-encoder"}
    # the cross-encoder always scores the leader of a window holding a fact (its contested places)
    assert hits.first.locator(".stage.used b").inner_text() == "cross-encoder"
    multipliers = top.locator(".mult").all_inner_texts()  # only those that changed the score
    assert multipliers and all(not m.endswith(" 1") for m in multipliers)
    assert "more at ×1" in top.locator(".neutral").inner_text()
    catalog_hit = page.locator("li.hit", has_text="Hub v2 radios")
    assert "source_prior 0.85" in catalog_hit.locator(".mult.down").inner_text()
    shot = tmp_path / "inspector-recall-four-types.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 20_000
    save_artifact(shot)

    # the key travelled in the sign-in form's body only, and scripts cannot read the cookie
    assert not [u for u in tab.requests if key in u]
    assert page.evaluate("document.cookie") == ""
    cookies = {c["name"]: c for c in page.context.cookies()}  # the session's token, the key's id
    assert set(cookies) == {"engram_inspector", "engram_inspector_key"}
    for cookie in cookies.values():
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/inspector"
        assert key not in cookie["value"]
    assert not tab.dialogs and not tab.errors


def test_superseded_fact_is_struck_through_with_its_chain(tab, service):
    seed_world(service)
    tab.sign_in(service.user_keys["sarah"], "semantic")
    page = tab.page
    # "live only" applies as it is ticked (it waited for Search: a newcomer's walk)
    page.check("input[name=live]")
    page.wait_for_url("**live=true**")
    page.wait_for_selector("tr:has-text('Sarah lives in Edinburgh')")
    assert page.locator("tr", has_text="Sarah lives in Bristol").count() == 0
    page.uncheck("input[name=live]")
    page.wait_for_selector("tr:has-text('Sarah lives in Bristol')")
    old = page.locator("tr", has_text="Sarah lives in Bristol")
    assert "superseded" in (old.get_attribute("class") or "")
    style = old.locator(".text").evaluate("e => getComputedStyle(e).textDecorationLine")
    assert style == "line-through"
    live = page.locator("tr:not(.superseded)", has_text="Sarah lives in Edinburgh")
    assert live.locator(".text").evaluate("e => getComputedStyle(e).textDecorationLine") == "none"
    old.locator("a.history").click()
    page.wait_for_selector("ol.chain")
    chain = page.locator("ol.chain li")
    assert chain.count() == 2
    assert "Sarah lives in Bristol" in chain.nth(0).inner_text()
    assert "Sarah lives in Edinburgh" in chain.nth(1).inner_text()
    assert "replaces an older fact: it changed" in chain.nth(1).inner_text()
    assert (
        chain.nth(0).locator(".text").evaluate("e => getComputedStyle(e).textDecorationLine")
        == "line-through"
    )
    assert not tab.errors


def test_stored_markup_is_shown_as_text_and_never_runs(tab, service):
    rows = seed_world(service)
    tab.sign_in(service.user_keys["sarah"], "semantic")
    page = tab.page
    literal = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">'

    def check() -> None:
        assert literal in tab.text()
        assert page.locator("main script, main img, main [onerror]").count() == 0
        assert page.evaluate("window.__xss") is None

    check()
    page.fill("input[name=q]", "note")
    page.press("input[name=q]", "Enter")
    page.wait_for_url("**q=note**")
    check()
    page.goto(f"{tab.url}/inspector/memory/{rows['xss']['id']}")
    check()
    tab.open_tab("recall")
    page.fill("input[name=query]", "Sarah's note")
    page.click("form.recall-form button")
    page.wait_for_selector("ol.hits li.hit")
    check()
    tab.open_tab("turn")
    check()
    assert not tab.dialogs and not tab.errors


def test_a_user_key_cannot_reach_another_users_memories(tab, service):
    rows = seed_world(service)
    tab.sign_in(service.user_keys["sarah"], "semantic")
    page = tab.page

    def nothing_of_bob() -> None:
        body = tab.text()
        for secret in (*BOB_SECRETS, rows["bob_fact"]["id"], "Bob's reset"):
            assert secret not in body

    page.goto(f"{tab.url}/inspector/memory/{rows['bob_fact']['id']}")
    assert "No such memory in this view." in tab.text()
    nothing_of_bob()
    for path in ("semantic", "episodic", "turn", "recall"):
        page.goto(f"{tab.url}/inspector/{path}?user=bob")
        assert "This key can only see its own memories." in tab.text()
        nothing_of_bob()
    page.goto(f"{tab.url}/inspector/procedural")
    page.fill("input[name=q]", "garage")
    page.press("input[name=q]", "Enter")
    page.wait_for_url("**q=garage**")
    assert "No procedural memory matches" in tab.text()
    tab.open_tab("recall")
    page.fill("input[name=query]", "Bob lives at 12 Harbour Road, garage code 9931")
    page.check("input[name=include_superseded]")
    page.fill("input[name=k]", "100")
    page.click("form.recall-form button")
    page.wait_for_selector("ol.hits li.hit")
    page.fill("input[name=query]", "")  # the box still shows what was asked
    nothing_of_bob()
    tab.open_tab("turn")
    nothing_of_bob()


def test_this_turn_view_updates_live(tab, service):
    seed_world(service)
    tab.sign_in(service.user_keys["sarah"], "semantic")
    page = tab.page
    tab.open_tab("turn")
    current = page.locator("article.turn.current")
    assert "is my Zigbee hub supported where I live?" in current.inner_text()
    assert "Turn 3" in current.inner_text()

    agent = service.client("sarah")  # the agent's next turn, through the API, while the page is open
    agent.post("/v1/turns", json={"text": "the hallway sensor went offline again"}).raise_for_status()
    agent.post("/v1/recall", json={"query": "sensor offline", "k": 3}).raise_for_status()
    agent.post("/v1/memories", json={"text": "Sarah has a hallway motion sensor"}).raise_for_status()
    page.wait_for_selector(
        "article.turn.current:has-text('Sarah has a hallway motion sensor')", timeout=8_000
    )
    now = current.inner_text()
    assert "Turn 4" in now and "the hallway sensor went offline again" in now
    assert "RECALLED" in now and "Re-pair a Zigbee sensor" in now and "WROTE" in now
    assert "Turn 3" in page.locator("details.turn").first.inner_text()
    assert page.url.endswith("/inspector/turn")  # no reload: the box was polled
    assert not tab.errors


def test_admin_picks_a_user_reads_and_signs_out(tab, service):
    seed_world(service)
    tab.sign_in(service.admin_key, "catalog")
    page = tab.page
    assert "The Lumio Hub v2 supports Zigbee 3.0 and Thread" in tab.text()
    page.select_option("#user-pick", "bob")  # from the catalog tab: the user's facts, not the catalog
    page.wait_for_url("**/inspector/semantic?user=bob")
    page.wait_for_selector("text=Bob lives at 12 Harbour Road")
    tab.settled()  # the new picker is wired while htmx settles (a CI run changed it before: no request)
    page.select_option("#user-pick", "")
    page.wait_for_url("**/inspector/semantic?user=")
    tab.settled()
    assert "Pick a user above" in tab.text()
    page.select_option("#user-pick", "bob")
    page.wait_for_url("**/inspector/semantic?user=bob")
    page.wait_for_selector("text=Bob lives at 12 Harbour Road")
    tab.open_tab("episodic")
    assert page.url.endswith("/inspector/episodic?user=bob") and "Bob's garage code is 9931" in tab.text()
    page.select_option("#user-pick", "sarah")
    page.wait_for_url("**/inspector/episodic?user=sarah")
    tab.settled()
    assert "we moved to Edinburgh last week!" in tab.text() and "garage code" not in tab.text()

    page.click("#sign-out")
    page.wait_for_url("**/inspector/sign-in?ended=signed-out")
    assert "You are signed out." in page.text_content("body")
    page.goto(f"{tab.url}/inspector/semantic?user=bob")
    page.wait_for_url("**/inspector/sign-in")
    assert "Bob" not in tab.text()
    assert not tab.errors
