"""The REST API through httpx against a running server."""


def test_health_and_openapi(service):
    import httpx

    assert httpx.get(f"{service.url}/healthz").json()["status"] == "ok"
    spec = httpx.get(f"{service.url}/openapi.json").json()
    assert {
        "/v1/recall",
        "/v1/turns",
        "/v1/memories",
        "/v1/memories/{memory_id}",
        "/v1/keys",
        "/v1/catalog",
    } <= set(spec["paths"])


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
    created = admin.post("/v1/keys", json={"user_id": "carol"})
    assert created.status_code == 201 and created.json()["key"].startswith("egk_")
    carol = service.client(key=created.json()["key"])
    assert carol.post("/v1/turns", json={"text": "hi"}).status_code == 201
    assert all("key" not in k for k in admin.get("/v1/keys").json())
    assert admin.delete(f"/v1/keys/{created.json()['id']}").status_code == 204
    assert carol.post("/v1/turns", json={"text": "hi again"}).status_code == 401
    assert admin.delete(f"/v1/catalog/{item.json()['id']}").status_code == 200


def test_bad_input_gets_4xx_json_and_changes_nothing(service):
    sarah = service.client("sarah")
    cases = [
        ("post", "/v1/turns", {"json": {"text": ""}}, 422),
        ("post", "/v1/turns", {"json": {"text": "x" * 16_001}}, 422),
        ("post", "/v1/turns", {"json": {"txt": "typo"}}, 422),
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
    ]
    for method, path, kwargs, status in cases:
        r = getattr(sarah, method)(path, **kwargs)
        assert r.status_code == status, (path, kwargs.get("json"), r.text)
        body = r.json()
        assert set(body) == {"error", "message"} and body["message"], body
    for memory_type in ("episodic", "semantic", "procedural"):
        assert sarah.get("/v1/memories", params={"type": memory_type}).json()["data"] == []
    assert (
        "episodic[1].text"
        in sarah.post("/v1/import", json={"episodic": [{"text": "ok"}, {"text": ""}]}).json()["message"]
    )
