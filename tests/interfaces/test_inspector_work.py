"""Working in the inspector in a real browser (Chromium, as test_inspector_browser): from a recall hit to
its memory's page, correcting and forgetting it there (confirmed; refused without the form's token),
the loading bar, the message when a session ends, and a phone's width without sideways scrolling."""

from __future__ import annotations

from urllib.parse import urlsplit

from tests.interfaces.test_inspector import seed_world

PHONE = {"width": 390, "height": 844}
# Set by a MutationObserver (run through the DevTools protocol: the page's CSP allows no inline script).
WATCH_LOADING = """() => {
  window.__loading = false;
  new MutationObserver(() => {
    const bar = document.getElementById('loading');
    if (bar && bar.classList.contains('htmx-request') && getComputedStyle(bar).visibility === 'visible')
      window.__loading = true;
  }).observe(document.body, {attributes: true, subtree: true, attributeFilter: ['class']});
}"""


def _post_status(page, url_part: str, click: str) -> int:
    with page.expect_response(lambda r: url_part in r.url and r.request.method == "POST") as answer:
        page.click(click)
    page.wait_for_load_state()
    return int(answer.value.status)


def test_from_a_hit_to_its_page_then_correct_and_forget_it(tab, service):
    rows = seed_world(service)
    mem = service.engram.for_user("sarah")
    edinburgh = rows["edinburgh"]["id"]
    tab.sign_in(service.user_keys["sarah"], "semantic")
    page = tab.page
    tab.open_tab("recall")
    page.evaluate(WATCH_LOADING)
    page.fill("input[name=query]", "where does Sarah live")
    page.click("form.recall-form button")
    page.wait_for_selector("ol.hits li.hit")
    assert page.evaluate("window.__loading") is True  # the bar showed while the answer was on its way
    assert page.locator("#legend summary").inner_text() == "What the numbers mean"

    page.click(f"li.hit[data-id={edinburgh}] a.open")  # the hit is a link to its memory's page
    page.wait_for_url(f"**/inspector/memory/{edinburgh}")
    assert page.inner_text("h1") == "Sarah lives in Edinburgh"
    assert "Sarah lives in Bristol" in page.inner_text("#history")

    # A form without this session's token changes nothing: a wrong token, then none at all.
    page.fill("#correct-text", "Sarah lives in Glasgow")
    page.evaluate("document.querySelector('#correct-form [name=token]').value = '0'.repeat(64)")
    assert _post_status(page, "/correct", "#correct-form button") == 403
    assert "Nothing was changed" in tab.text() and page.locator("nav.tabs").count() == 1
    page.goto(f"{tab.url}/inspector/memory/{edinburgh}")
    page.fill("#correct-text", "Sarah lives in Glasgow")
    page.evaluate("document.querySelector('#correct-form [name=token]').remove()")
    assert _post_status(page, "/correct", "#correct-form button") == 403
    assert mem.get(edinburgh).superseded_by is None
    assert "Glasgow" not in str(mem.list("semantic", include_superseded=True))

    # Correct it: the form, then a page that shows old and new and asks.
    page.goto(f"{tab.url}/inspector/memory/{edinburgh}")
    page.fill("#correct-text", "Sarah lives in Glasgow")
    page.click("#correct-form button")
    page.wait_for_selector("#confirm")
    assert "Replace this fact?" in tab.text() and mem.get(edinburgh).superseded_by is None
    page.click("#confirm-button")
    page.wait_for_selector("h1:has-text('Sarah lives in Glasgow')")
    glasgow = page.url.rsplit("/", 1)[1]
    assert mem.get(edinburgh).superseded_by == glasgow
    chain = page.locator("#history ol.chain li").all_inner_texts()
    assert [c.split("\n")[0] for c in chain] == [
        "Sarah lives in Bristol",
        "Sarah lives in Edinburgh",
        "Sarah lives in Glasgow",
    ]

    # Forget it: a page that asks, then the list says it is gone (and Edinburgh is live again).
    page.click("#forget-link")
    page.wait_for_selector("#confirm")
    assert "Forget this memory?" in tab.text() and mem.get(glasgow)
    page.click("#confirm-button")
    page.wait_for_url("**/inspector/semantic?done=forgotten")
    assert "Forgotten" in page.inner_text("p.notice") and "Glasgow" not in tab.text()
    assert glasgow not in {m.id for m in mem.list("semantic", include_superseded=True)}
    assert mem.get(edinburgh).superseded_by is None
    assert not tab.dialogs and not tab.errors


def test_an_ended_session_says_why(tab, service):
    extra, record = service.keys.create("sarah", "to revoke")
    tab.sign_in(extra, "semantic")
    page = tab.page
    assert service.client().delete(f"/v1/keys/{record.id}").status_code == 204  # revoked elsewhere
    page.click("nav.tabs a[data-tab=episodic]")
    page.wait_for_url("**/inspector/sign-in?ended=revoked")
    assert "has been revoked" in page.inner_text("#session-ended")
    assert not [c for c in page.context.cookies() if c["name"] == "engram_inspector"]

    principal = service.keys.resolve(service.user_keys["sarah"])
    expired = service.keys.open_session(principal, -1)  # a session past its 8 hours
    host = urlsplit(tab.url).hostname
    cookie = {"name": "engram_inspector", "value": expired, "domain": host, "path": "/inspector"}
    page.context.add_cookies([cookie])  # as the sign-in set it, hours ago
    page.goto(f"{tab.url}/inspector/turn")
    page.wait_for_url("**/inspector/sign-in?ended=expired")
    assert "Your session expired" in page.inner_text("#session-ended")
    page.goto(f"{tab.url}/inspector/turn")  # said once: then a plain sign-in page
    page.wait_for_url("**/inspector/sign-in")
    assert page.locator("#session-ended").count() == 0
    assert not tab.errors


def test_at_a_phones_width_nothing_runs_off_the_side(browser, service):
    rows = seed_world(service)
    long_url = "Sarah's router page is https://192.168.1.1/cgi-bin/" + "a" * 300 + "?token=" + "f" * 64
    unbroken = service.client("sarah").post("/v1/memories", json={"text": long_url}).json()
    context = browser.new_context(viewport=PHONE)
    context.set_default_timeout(10_000)
    page = context.new_page()
    try:
        page.goto(f"{service.url}/inspector/sign-in")
        page.fill("#key", service.user_keys["sarah"])
        page.click("form button[type=submit]")
        page.wait_for_url("**/inspector/semantic")
        paths = [
            "semantic",
            "episodic",
            "procedural",
            "catalog",
            "turn",
            f"memory/{rows['edinburgh']['id']}",
            f"memory/{rows['xss']['id']}",
            f"memory/{unbroken['id']}",  # a word wider than the screen, in the page's title
            f"memory/{rows['edinburgh']['id']}/forget",
            "semantic?user=bob",  # an error page
            "recall",
        ]
        for path in paths:
            page.goto(f"{service.url}/inspector/{path}")
            if path == "recall":
                page.fill("input[name=query]", "where does Sarah live, and which radios does her hub have?")
                page.click("form.recall-form button")
                page.wait_for_selector("ol.hits li.hit")
                page.click("#legend summary")
            if path == "turn":  # the agent's recall, with a hit's explain opened
                page.locator("details.why summary").first.click()
                page.click("#legend summary")
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= PHONE["width"], (path, width)
            tabs = page.locator("nav.tabs a")
            for i in range(tabs.count()):  # every tab on screen, none cut off
                box = tabs.nth(i).bounding_box()
                assert box and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], (path, i)
        page.click("#sign-out")
        page.wait_for_url("**/inspector/sign-in?ended=signed-out")  # the notice fits too
        assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    finally:
        context.close()
