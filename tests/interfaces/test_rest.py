"""The REST API through httpx against a running server."""

JSON = {"Content-Type": "application/json"}


def test_health_and_openapi(service):
    import httpx

    # httpx's 5 s default: a first request to a service just started on a loaded machine has taken longer
    assert httpx.get(f"{service.url}/healthz", timeout=30).json()["status"] == "ok"
    assert httpx.get(f"{service.url}/readyz", timeout=30).json() == {"status": "ok", "store": "ok"}
    spec = httpx.get(f"{service.url}/openapi.json", timeout=30).json()
    assert {
        "/v1/recall",
        "/v1/turns",
        "/v1/memories",
        "/v1/memories/{memory_id}",
        "/v1/keys",
        "/v1/catalog",
    } <= set(spec["paths"])


def test_docs_work_offline_and_root_leads_to_the_inspector(service):
    """Issue 24: /docs loaded Swagger UI from a CDN (blank without internet) and / answered a JSON 404.
    Every asset the page names is served here, and the page points at this server's OpenAPI document."""
    import re
    from urllib.parse import urljoin

    import httpx

    page = httpx.get(f"{service.url}/docs")
    assert page.status_code == 200 and "swagger" in page.text.lower()
    assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", page.text)
    assert len(assets) >= 3 and all(a.startswith("/") and not a.startswith("//") for a in assets), assets
    for asset in assets:
        answer = httpx.get(urljoin(service.url, asset))
        assert answer.status_code == 200 and len(answer.content) > 0, asset
    assert "url: '/openapi.json'" in page.text or 'url: "/openapi.json"' in page.text
    assert "http://" not in page.text.replace(service.url, "") and "https://" not in page.text
    home = httpx.get(f"{service.url}/", follow_redirects=False)
    assert home.status_code in (302, 303, 307) and home.headers["location"] == "/inspector"
    landed = httpx.get(f"{service.url}/", follow_redirects=True)
    assert landed.url.path == "/inspector/sign-in"
    # ... and the sign-in page says where keys come from
    assert "engram keys create --user NAME" in landed.text and "engram serve" in landed.text


def test_turn_write_recall_history_forget(service):
    sarah = service.client("sarah")
    turn = sarah.post(
        "/v1/turns", json={"text": "we moved to Edinburgh last week", "metadata": {"ch": "web"}}
    )
    assert turn.status_code == 201 and turn.json()["memory_type"] == "episodic"
    old = sarah.post("/v1/memories", json={"text": "Sarah lives in Bristol"}).json()
    new = sarah.post(
        "/v1/memories",
        json={"text": "Sarah lives in Edinburgh", "supersedes_id": old["id"], "contradiction": "natural"},
    ).json()
    assert new["supersedes"] == old["id"]
    hits = sarah.post(
        "/v1/recall", json={"query": "where does sarah live", "memory_types": ["semantic"]}
    ).json()["hits"]
    assert [h["memory"]["id"] for h in hits] == [new["id"]] and {"rrf", "rerank", "decay", "final"} <= set(
        hits[0]["explain"]
    )
    both = sarah.post(
        "/v1/recall", json={"query": "where does sarah live", "include_superseded": True}
    ).json()["hits"]
    assert {old["id"], new["id"]} <= {h["memory"]["id"] for h in both}
    history = sarah.get(f"/v1/memories/{new['id']}/history").json()["data"]
    assert [m["id"] for m in history] == [old["id"], new["id"]]
    assert sarah.get(f"/v1/memories/{old['id']}").json()["superseded_by"] == new["id"]
    playbook = sarah.post(
        "/v1/memories",
        json={
            "memory_type": "procedural",
            "name": "Re-pair a sensor",
            "steps": [{"order": 1, "instruction": "hold reset"}],
        },
    )
    assert playbook.status_code == 201 and playbook.json()["steps"][0]["instruction"] == "hold reset"
    listed = sarah.get(
        "/v1/memories", params={"type": "semantic", "include_superseded": True, "limit": 1}
    ).json()
    assert len(listed["data"]) == 1 and listed["limit"] == 1
    gone = sarah.delete(f"/v1/memories/{turn.json()['id']}")
    assert gone.status_code == 200 and gone.json()["forgotten"]["id"] == turn.json()["id"]
    assert sarah.get(f"/v1/memories/{turn.json()['id']}").status_code == 404


def test_import_goes_to_the_callers_tenant(service):
    bob = service.client("bob")
    r = bob.post("/v1/import", json={"episodic": [{"text": "bob's first turn", "days_ago": 3}]})
    assert r.status_code == 200 and r.json()["episodic"] == 1
    assert bob.get("/v1/memories", params={"type": "episodic"}).json()["data"][0]["user_id"] == "bob"
    r = bob.post("/v1/import", json={"user_id": "sarah", "episodic": [{"text": "sneaky"}]})
    assert r.status_code == 422
    assert service.client("sarah").get("/v1/memories", params={"type": "episodic"}).json()["data"] == []


def test_admin_manages_catalog_and_keys(service):
    admin = service.client()
    item = admin.post("/v1/catalog", json={"text": "Hub v2 speaks Zigbee 3.0", "title": "Hub radios"})
    assert item.status_code == 201
    hits = service.client("sarah").post("/v1/recall", json={"query": "zigbee hub"}).json()["hits"]
    assert hits[0]["memory"]["id"] == item.json()["id"]
    assert (
        admin.post("/v1/catalog/import", json=[{"title": "T", "text": "Thread is a mesh"}]).json()["catalog"]
        == 1
    )
    assert len(admin.get("/v1/catalog").json()["data"]) == 2
    got = admin.get(f"/v1/catalog/{item.json()['id']}")
    assert got.status_code == 200 and got.json() == item.json()
    turn = service.client("sarah").post("/v1/turns", json={"text": "a user's row, not the catalog's"})
    assert admin.get(f"/v1/catalog/{turn.json()['id']}").json()["error"] == "not_found"
    assert service.client("sarah").get(f"/v1/catalog/{item.json()['id']}").status_code == 403
    keys_before = admin.get("/v1/keys").json()
    for label in ("x\nfake  created 2026  live  key_FAKE", "a\u0000b", "x\u001b[31mRED"):  # a bug hunt
        refused = admin.post("/v1/keys", json={"user_id": "carol", "label": label})
        assert refused.status_code == 422 and refused.json()["error"] == "invalid_input", label
    assert admin.get("/v1/keys").json() == keys_before
    created = admin.post("/v1/keys", json={"user_id": "carol"})
    assert created.status_code == 201 and created.json()["key"].startswith("egk_")
    carol = service.client(key=created.json()["key"])
    assert carol.post("/v1/turns", json={"text": "hi"}).status_code == 201
    assert all("key" not in k for k in admin.get("/v1/keys").json())
    assert admin.delete(f"/v1/keys/{created.json()['id']}").status_code == 204
    assert carol.post("/v1/turns", json={"text": "hi again"}).status_code == 401
    again = admin.delete(f"/v1/keys/{created.json()['id']}")  # issue 24: not "not found"
    assert again.status_code == 409 and "is already revoked" in again.json()["message"]
    assert admin.delete(f"/v1/catalog/{item.json()['id']}").status_code == 200


def test_bad_input_gets_4xx_json_and_changes_nothing(service):
    sarah = service.client("sarah")
    cases = [
        ("post", "/v1/turns", {"json": {"text": ""}}, 422),
        ("post", "/v1/turns", {"json": {"text": "x" * 16_001}}, 422),
        ("post", "/v1/turns", {"json": {"txt": "typo"}}, 422),
        ("post", "/v1/turns", {"json": {"text": "hi", "metadata": {"speaker": 7}}}, 422),
        *(
            (
                "post",
                path,
                {"content": rb'{"text": "a\ud800b"}', "headers": {"Content-Type": "application/json"}},
                422,
            )
            for path in ("/v1/turns", "/v1/memories")
        ),
        ("post", "/v1/import", {"json": [{"title": "a user's list", "text": "is not the catalog"}]}, 422),
        (
            "post",
            "/v1/turns",
            {"content": b"{not json", "headers": {"Content-Type": "application/json"}},
            422,
        ),
        (
            "post",
            "/v1/turns",
            {"content": b"x" * (2 << 20), "headers": {"Content-Type": "application/json"}},
            413,
        ),
        ("post", "/v1/memories", {"json": {"text": "f", "memory_type": "episodic"}}, 422),
        ("post", "/v1/memories", {"json": {"text": "f", "memory_type": "dreams"}}, 422),
        ("post", "/v1/memories", {"json": {"text": "f", "confidence": 2}}, 422),
        ("post", "/v1/memories", {"json": {"text": "f", "contradiction": "harsh"}}, 422),
        ("post", "/v1/memories", {"json": {"text": "f", "supersedes_id": "sem_nope"}}, 404),
        ("post", "/v1/recall", {"json": {"query": ""}}, 422),
        ("post", "/v1/recall", {"json": {"query": "q", "k": 0}}, 422),
        ("post", "/v1/recall", {"json": {"query": "q", "memory_types": ["nope"]}}, 422),
        ("post", "/v1/recall", {"json": {"query": "q", "as_of": "0001-01-01T00:00:00+01:00"}}, 422),
        ("post", "/v1/turns", {"json": {"text": "t", "at": "0001-01-01T00:00:00+01:00"}}, 422),
        ("get", "/v1/memories", {"params": {"type": "nope"}}, 422),
        ("get", "/v1/memories/%27%20OR%201=1", {}, 404),
        ("delete", "/v1/memories/sem_AAAAAAAAAAAAAAAAAAAAAA", {}, 404),
        ("post", "/v1/import", {"json": {"episodic": [{"text": "ok"}, {"text": ""}]}}, 422),
        ("post", "/v1/catalog", {"json": {"text": "x"}}, 403),
        # huge or out-of-range import times (issue 12, item 10)
        *(
            ("post", "/v1/import", {"json": {"episodic": [{"text": "x", "days_ago": days}]}}, 422)
            for days in (800_000, 1e9, 1e308)
        ),
        ("post", "/v1/import", {"json": {"semantic": [{"text": "x", "days_ago": 800_000}]}}, 422),
        (
            "post",
            "/v1/import",
            {"json": {"episodic": [{"text": "x", "timestamp": "0001-01-01T00:00:00+01:00"}]}},
            422,
        ),
        # offsets past any backend's integers (item 11)
        ("get", "/v1/memories", {"params": {"offset": 2**63}}, 422),
        ("get", "/v1/memories", {"params": {"offset": 10**30}}, 422),
        # unknown routes, wrong methods, bodies that are not UTF-8 (item 13)
        ("get", "/v1/nothing-here", {}, 404),
        ("get", "/nothing-here", {}, 404),
        # a big integer in a filter: read as the float nearest it, it matched another stored integer
        (
            "post",
            "/v1/recall",
            {"json": {"query": "x", "metadata": {"n": 123456789012345678901234567891}}},
            422,
        ),
        ("post", "/v1/memories", {"json": {"text": "x", "created_at": "2999-01-01T00:00:00Z"}}, 422),
        ("put", "/v1/turns", {"json": {"text": "x"}}, 405),
        ("post", "/v1/turns", {"content": b'{"text": "\xff\xfe"}', "headers": JSON}, 422),
        ("post", "/v1/turns", {"content": b"[" * 100_000, "headers": JSON}, 422),
        # playbooks have limits (item 14)
        *(
            ("post", "/v1/memories", {"json": {"memory_type": "procedural", "name": "p", **fields}}, 422)
            for fields in (
                {"description": "x" * 900_000},
                {"trigger_text": "x" * 2_001},
                {"steps": [{"order": 1, "instruction": "x" * 2_001}]},
                {"steps": [{"order": 1, "instruction": "ok", "tool": "t" * 201}]},
                {"steps": [{"order": i, "instruction": "ok"} for i in range(1, 102)]},
                {"name": "n" * 201},
            )
        ),
        # text that shows nothing (item 15)
        *(
            ("post", "/v1/turns", {"json": {"text": text}}, 422)
            for text in ("\u0000", "\u200b\u200b", "\ufeff")
        ),
        ("post", "/v1/memories", {"json": {"text": "\u200b \u2060"}}, 422),
        ("post", "/v1/memories", {"json": {"memory_type": "procedural", "name": "\ufeff"}}, 422),
        (
            "post",
            "/v1/memories",
            {
                "json": {
                    "memory_type": "procedural",
                    "name": "p",
                    "steps": [{"order": 1, "instruction": "\u200b"}],
                }
            },
            422,
        ),
        (
            "post",
            "/v1/memories",
            {"json": {"memory_type": "procedural", "name": "p", "description": "\u00ad"}},
            422,
        ),
        ("post", "/v1/recall", {"json": {"query": "\ufeff\u200b"}}, 422),
        # loose typing (item 16)
        ("post", "/v1/recall", {"json": {"query": "q", "k": True}}, 422),
        ("post", "/v1/recall", {"json": {"query": "q", "k": "5"}}, 422),
        ("post", "/v1/recall", {"json": {"query": "q", "include_catalog": "yes"}}, 422),
        ("post", "/v1/memories", {"json": {"text": "f", "valid_to": 845}}, 422),
        ("post", "/v1/memories", {"json": {"text": "f", "valid_to": "845"}}, 422),
        ("post", "/v1/memories", {"json": {"text": "f", "confidence": "0.5"}}, 422),
        (
            "post",
            "/v1/memories",
            {"json": {"text": "f", "valid_from": "2024-02-01T00:00:00Z", "valid_to": "2024-01-01T00:00:00Z"}},
            422,
        ),
        (
            "post",
            "/v1/memories",
            {
                "json": {
                    "memory_type": "procedural",
                    "name": "p",
                    "steps": [{"order": "1", "instruction": "a"}],
                }
            },
            422,
        ),
        ("post", "/v1/turns", {"json": {"text": "t", "at": 845}}, 422),
        ("post", "/v1/import", {"json": {"semantic": [{"text": "x", "confidence": "0.9"}]}}, 422),
    ]
    for method, path, kwargs, status in cases:
        r = getattr(sarah, method)(path, **kwargs)
        assert r.status_code == status, (path, kwargs.get("json"), r.text)
        body = r.json()
        assert set(body) == {"error", "message"} and body["message"], body
    for memory_type in ("episodic", "semantic", "procedural"):
        assert sarah.get("/v1/memories", params={"type": memory_type}).json()["data"] == []
    # an id of any length gets its 404, its message clipped (a bug hunt: 500,000 characters echoed)
    huge = sarah.post("/v1/memories", json={"text": "f1", "supersedes_id": "a" * 5000})
    assert huge.status_code == 404 and len(huge.json()["message"]) < 200
    assert (
        "episodic[1].text"
        in sarah.post("/v1/import", json={"episodic": [{"text": "ok"}, {"text": ""}]}).json()["message"]
    )


def test_body_mistakes_say_what_to_fix(service):
    """A newcomer's curl without `-H "Content-Type: application/json"` got "body: Input should be a valid
    dictionary or object to extract fields from", and a cut body "[13]: JSON decode error"."""
    bob = service.client("bob")
    form = {"Content-Type": "application/x-www-form-urlencoded"}  # what curl -d sends by default
    as_form = bob.post("/v1/turns", content=b'{"text": "hi"}', headers=form)
    assert as_form.status_code == 422 and as_form.json()["error"] == "invalid_input"
    assert "send JSON with Content-Type: application/json" in as_form.json()["message"]
    assert "this request's is application/x-www-form-urlencoded" in as_form.json()["message"]
    untyped = bob.post("/v1/recall", content=b'{"query": "hi"}')
    assert untyped.status_code == 422 and "this request has none" in untyped.json()["message"]
    cut = bob.post("/v1/turns", content=b'{"text": "hi",', headers=JSON)
    assert cut.status_code == 422
    assert cut.json()["message"].startswith("body: malformed JSON at character 14 ("), cut.json()
    # an unknown field names those the body takes, as MCP names a tool's arguments (a newcomer's walk)
    typo = bob.post("/v1/turns", json={"text": "hi", "sesion_id": "s1"})
    assert typo.status_code == 422
    message = typo.json()["message"]
    assert message.startswith("sesion_id: unknown field; this body takes ") and "session_id" in message
    assert bob.get("/v1/memories", params={"type": "episodic"}).json()["data"] == []


def test_unknown_query_parameters_are_refused(service):
    """``?types=episodic`` (a typo of ``type``) listed facts, as if a filter had been applied."""
    bob = service.client("bob")
    bob.post("/v1/turns", json={"text": "my bike is a blue trek"}).raise_for_status()
    typo = bob.get("/v1/memories", params={"types": "episodic"})
    assert typo.status_code == 422 and typo.json()["error"] == "invalid_input"
    takes = "type, include_superseded, limit, offset"
    assert typo.json()["message"] == f"query.types: unknown; this route takes {takes}"
    listed = bob.get("/v1/memories", params={"type": "episodic", "limit": 5}).json()["data"]
    assert [row["text"] for row in listed] == ["my bike is a blue trek"]
    # a route with no query parameters says so
    history = bob.get(f"/v1/memories/{listed[0]['id']}/history", params={"x": "1"})
    assert history.json()["message"] == "query.x: unknown; this route takes no query parameters"
    admin = service.client()
    assert admin.get("/v1/keys", params={"user_id": "bob"}).status_code == 200
    assert admin.get("/v1/keys", params={"user": "bob"}).status_code == 422


def test_oversized_chunked_bodies_get_413_and_change_nothing(service):
    """A body without Content-Length is counted as it arrives; over the limit it is a 413 with the
    error body, on the REST routes and on /mcp alike (issue 12, item 12)."""
    sarah = service.client("sarah")

    def chunked():
        yield b'{"text": "'
        for _ in range(40):
            yield b"x" * 65_536  # 2.5 MiB in all
        yield b'"}'

    for path in ("/v1/turns", "/v1/memories", "/mcp"):
        r = sarah.post(
            path, content=chunked(), headers={**JSON, "Accept": "application/json, text/event-stream"}
        )
        assert "content-length" not in r.request.headers
        assert r.status_code == 413, (path, r.text)
        assert r.json() == {"error": "payload_too_large", "message": "request body over 1048576 bytes"}
    small = sarah.post("/v1/turns", content=iter([b'{"text": "chunked ', b'but small"}']), headers=JSON)
    assert small.status_code == 201 and small.json()["text"] == "chunked but small"
    assert [m["text"] for m in sarah.get("/v1/memories", params={"type": "episodic"}).json()["data"]] == [
        "chunked but small"
    ]


def test_the_openapi_document_states_what_the_server_does(service):
    """Every error response is documented with the one error body the server sends, and the request
    schemas refuse what the server refuses (issue 12, item 13)."""
    import httpx

    spec = httpx.get(f"{service.url}/openapi.json").json()
    schemas = spec["components"]["schemas"]
    assert "HTTPValidationError" not in schemas
    assert schemas["ErrorBody"]["required"] == ["error", "message"]
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            statuses = set(operation["responses"])
            if path not in ("/healthz", "/readyz"):
                assert {"401", "403", "422"} <= statuses, (method, path)
            for status, response in operation["responses"].items():
                if status >= "400":
                    schema = response["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (method, path, status)
    for model, field in [("TurnCreate", "text"), ("RecallRequest", "query"), ("CatalogCreate", "text")]:
        assert schemas[model]["properties"][field]["minLength"] == 1, model
        assert schemas[model]["properties"][field]["maxLength"] > 1, model
    assert schemas["KeyCreate"]["properties"]["user_id"]["pattern"]
    assert schemas["RecallRequest"]["properties"]["k"]["maximum"] == 100
    offset = next(p for p in spec["paths"]["/v1/memories"]["get"]["parameters"] if p["name"] == "offset")
    assert offset["schema"]["maximum"] < 2**63
    admin = service.client()
    for bad in ("", "has space", "x" * 129):
        assert admin.post("/v1/keys", json={"user_id": bad}).status_code == 422
    assert admin.get("/v1/catalog", params={"offset": 2**63}).status_code == 422
    assert admin.get("/v1/keys").json() and len(admin.get("/v1/keys").json()) == 3  # nothing was created


def test_a_store_failure_reaches_the_client_without_paths_or_driver_text(service, caplog):
    """The server's own failures are logged with their detail; the client reads a fixed sentence
    (issue 12, item 22)."""
    import apsw

    sarah = service.client("sarah")
    turn = sarah.post("/v1/turns", json={"text": "a turn to forget"}).json()
    with apsw.Connection(str(service.engram.store.path)) as conn:
        conn.execute("ALTER TABLE tombstones RENAME TO tombstones_gone")  # the store is broken now
    r = sarah.delete(f"/v1/memories/{turn['id']}")
    assert r.status_code == 503
    assert r.json() == {
        "error": "storage_error",
        "message": "the store failed; the server log has the details",
    }
    leaked = [str(service.engram.store.path.parent), "tombstones", "SQLite", "apsw"]
    assert not [word for word in leaked if word in r.text]
    assert "no such table: tombstones" in caplog.text and str(service.engram.store.path) in caplog.text
    assert sarah.get(f"/v1/memories/{turn['id']}").status_code == 200  # the failed forget changed nothing


def test_recall_takes_min_confidence_and_a_compact_view(service):
    sarah = service.client("sarah")
    sarah.post("/v1/memories", json={"text": "Sarah's router is a Fritzbox 7590"})
    full = sarah.post(
        "/v1/recall", json={"query": "which router does Sarah have?", "record_use": False}
    ).json()
    assert full["abstained"] is False and 0 <= full["hits"][0]["confidence"] <= 1
    assert full["nothing_confident"] is False
    assert full["hits"][0]["event_time"] and "explain" in full["hits"][0]
    compact = sarah.post(
        "/v1/recall", json={"query": "which router does Sarah have?", "view": "compact", "record_use": False}
    ).json()
    assert set(compact["hits"][0]) == {"id", "type", "text", "event_time", "confidence"}
    assert compact["hits"][0]["id"] == full["hits"][0]["memory"]["id"]
    import httpx

    schemas = httpx.get(f"{service.url}/openapi.json").json()["components"]["schemas"]
    assert {"id", "type", "text", "event_time", "confidence", "outdated_by", "steps"} <= set(
        schemas["CompactHit"]["properties"]
    )
    none = sarah.post(
        "/v1/recall", json={"query": "which router does Sarah have?", "min_confidence": 1}
    ).json()
    assert none == {"hits": [], "abstained": True, "nothing_confident": True, "shed": False}
    # without min_confidence the hits are listed, and the response says whether any is likely relevant
    # (a newcomer's walk: "abstained": false beside eight hits at 0.02-0.05 for a car never mentioned)
    unknown = sarah.post("/v1/recall", json={"query": "what colour is my car?", "view": "compact"}).json()
    assert unknown["hits"] and unknown["abstained"] is False and unknown["nothing_confident"] is True
    assert max(h["confidence"] for h in unknown["hits"]) < service.engram.settings.min_confidence
    for bad in ({"min_confidence": 2}, {"min_confidence": "high"}, {"view": "tiny"}):
        refused = sarah.post("/v1/recall", json={"query": "router", **bad})
        assert refused.status_code == 422 and refused.json()["error"] == "invalid_input", bad
    stale = sarah.post("/v1/recall", json={"query": "router", "as_of": "yesterday"}).json()
    assert stale["message"].startswith("as_of: expected an ISO 8601"), stale  # ours, not "Value error, "


def test_readiness_asks_the_store_and_liveness_does_not(make_service, tmp_path):
    """An operator's walk: with the store gone, /healthz said ok and every request failed with 503. A
    readiness probe must see it: /readyz reads the store."""
    import httpx

    with make_service("ready.db") as svc:
        assert httpx.get(f"{svc.url}/readyz", timeout=30).status_code == 200
        svc.engram.store.close()  # its connections go; the file under them is no database any more
        for extra in ("-wal", "-shm"):
            (tmp_path / f"ready.db{extra}").unlink(missing_ok=True)
        (tmp_path / "ready.db").write_bytes(b"not a database" * 1000)
        ready = httpx.get(f"{svc.url}/readyz", timeout=30)
        assert ready.status_code == 503 and ready.json()["error"] == "storage_error"
        assert httpx.get(f"{svc.url}/healthz", timeout=30).status_code == 200  # alive, not ready
