"""Two tenants through every entry point: other tenants' ids, forged, missing and revoked keys, the
admin key on tenant routes, the wrong path user. Every attempt is denied and nothing changes."""

import anyio
import httpx2
import pytest

from tests.interfaces.conftest import mcp_session


@pytest.fixture
def world(service):
    bob = service.client("bob")
    rows = {
        "ep": bob.post("/v1/turns", json={"text": "Bob's garage code is 9931"}).json(),
        "fact": bob.post("/v1/memories", json={"text": "Bob lives at 12 Harbour Road"}).json(),
        "playbook": bob.post(
            "/v1/memories",
            json={"memory_type": "procedural", "name": "Bob's reset", "trigger_text": "garage door sticks"},
        ).json(),
    }
    revoked_key, record = service.keys.create("sarah", "to revoke")
    service.keys.revoke(record.id)
    return service, rows, revoked_key


def snapshot(service):
    mem = service.engram.for_user("bob")
    return [
        m.model_dump(mode="json")
        for t in ("episodic", "semantic", "procedural")
        for m in mem.list(t, include_superseded=True, limit=1000)
    ]


def tenant_requests(ids):
    """Every tenant route, aimed at bob's rows."""
    reqs = []
    for i in ids:
        reqs += [
            ("get", f"/v1/memories/{i}", {}),
            ("get", f"/v1/memories/{i}/history", {}),
            ("delete", f"/v1/memories/{i}", {}),
            ("post", "/v1/memories", {"json": {"text": "bob moved", "supersedes_id": i}}),
            ("post", "/v1/memories", {"json": {"text": "x", "supporting_episode_ids": [i]}}),
        ]
    reqs += [
        (
            "post",
            "/v1/recall",
            {"json": {"query": "Bob's garage code is 9931", "k": 100, "include_superseded": True}},
        ),
        ("post", "/v1/recall", {"json": {"query": "12 Harbour Road", "k": 100}}),
        ("get", "/v1/memories", {"params": {"type": "episodic", "limit": 500}}),
        ("get", "/v1/memories", {"params": {"type": "semantic", "include_superseded": True}}),
        ("get", "/v1/memories", {"params": {"type": "procedural"}}),
        ("post", "/v1/import", {"json": {"user_id": "bob", "semantic": [{"text": "planted"}]}}),
        ("post", "/v1/turns", {"json": {"text": "hello"}}),
    ]
    return reqs


def test_other_tenants_ids_are_invisible_over_rest(world):
    service, rows, _ = world
    before = snapshot(service)
    sarah = service.client("sarah")
    ids = [r["id"] for r in rows.values()]
    seen = []
    for method, path, kwargs in tenant_requests(ids):
        r = getattr(sarah, method)(path, **kwargs)
        body = r.text
        for i in ids:  # an id may only come back as the echo in a not-found message
            assert i not in body or (r.status_code == 404 and f"memory '{i}' not found" in body), (path, body)
        # the text, not "9931" alone: a timestamp's microseconds ("...42.999931") may hold those digits
        assert "garage code" not in body and "Harbour" not in body, (path, body)
        seen.append(r.status_code)
    assert snapshot(service) == before
    # same answer for "not yours" and "does not exist"
    fake = "sem_" + "B" * 22
    assert sarah.get(f"/v1/memories/{rows['fact']['id']}").json()["message"].replace(
        rows["fact"]["id"], "X"
    ) == sarah.get(f"/v1/memories/{fake}").json()["message"].replace(fake, "X")
    assert 404 in seen


def test_a_request_with_two_keys_is_refused_on_every_surface(world):
    """The routes read the first Authorization header and the MCP SDK the last: a request naming two
    keys (a proxy adding its own) must not be one tenant here and another there."""
    service, _, _ = world
    client = service.client(key="-")
    two = [(b"Authorization", f"Bearer {service.user_keys[u]}".encode()) for u in ("sarah", "bob")]
    before = snapshot(service)
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    for method, path, kwargs in [
        ("get", "/v1/me", {}),
        ("post", "/v1/recall", {"json": {"query": "garage code"}}),
        ("post", "/v1/turns", {"json": {"text": "hello"}}),
        ("post", "/mcp", {"json": initialize}),
    ]:
        r = client.request(method.upper(), path, headers=two, **kwargs)
        assert r.status_code == 401 and r.json()["message"].startswith("more than one Authorization"), path
    assert snapshot(service) == before


@pytest.mark.parametrize("who", ["missing", "forged", "revoked", "admin"])
def test_bad_credentials_are_refused_everywhere(world, who):
    service, rows, revoked_key = world
    key = {"missing": "-", "forged": "egk_" + "A" * 43, "revoked": revoked_key, "admin": service.admin_key}[
        who
    ]
    client = service.client(key=key)
    before = snapshot(service)
    for method, path, kwargs in tenant_requests([r["id"] for r in rows.values()]):
        r = getattr(client, method)(path, **kwargs)
        assert r.status_code == (403 if who == "admin" else 401), (who, path, r.text)
        assert r.json()["error"] in ("unauthorized", "forbidden")
    if who != "admin":
        for method, path in [("get", "/v1/keys"), ("post", "/v1/catalog"), ("get", "/v1/catalog")]:
            assert (
                getattr(client, method)(
                    path, **({"json": {"text": "x"}} if method == "post" else {})
                ).status_code
                == 401
            )
    assert snapshot(service) == before


def test_tenant_keys_cannot_use_admin_routes(world):
    service, _, _ = world
    sarah = service.client("sarah")
    for method, path, kwargs in [
        ("get", "/v1/keys", {}),
        ("post", "/v1/keys", {"json": {"user_id": "bob"}}),
        ("delete", "/v1/keys/key_whatever", {}),
        ("post", "/v1/catalog", {"json": {"text": "x"}}),
        ("post", "/v1/catalog/import", {"json": [{"text": "x"}]}),
        ("get", "/v1/catalog", {}),
    ]:
        assert getattr(sarah, method)(path, **kwargs).status_code == 403


def test_mcp_tools_cannot_reach_other_tenants(world):
    service, rows, revoked_key = world
    before = snapshot(service)

    async def as_sarah():
        async with mcp_session(service.url, service.user_keys["sarah"]) as session:
            for row in rows.values():
                r = await session.call_tool("forget_memory", {"memory_id": row["id"]})
                assert r.is_error and "not_found" in r.content[0].text
                r = await session.call_tool("write_memory", {"text": "moved", "supersedes_id": row["id"]})
                assert r.is_error and "not_found" in r.content[0].text
            for q in ["Bob's garage code is 9931", "12 Harbour Road", "Bob's reset garage door sticks"]:
                r = await session.call_tool(
                    "recall_memory", {"query": q, "k": 100, "include_superseded": True}
                )
                assert all(h["memory"]["user_id"] in ("sarah", None) for h in r.structured_content["hits"])

    anyio.run(as_sarah)
    for key in ["egk_forged", revoked_key, "not-a-key"]:
        r = httpx2.post(
            f"{service.url}/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream"},
        )
        assert r.status_code == 401
    r = httpx2.post(
        f"{service.url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Accept": "application/json, text/event-stream"},
    )
    assert r.status_code == 401
    assert snapshot(service) == before
