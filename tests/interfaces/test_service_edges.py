"""The service's edges against a real server (issue 26, items 5-9, 22 and 23): bodies read only after
the key is checked, no exception text in answers, one owner for every limit (the OpenAPI and MCP schemas
state what the server enforces), MCP argument errors in our words, a shed recall said at the top, 405s
that name every method, malformed requests and non-UTF-8 bodies answered in the error shape, metadata
bounded like text."""

from __future__ import annotations

import json
import socket
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
import httpx2
import jsonschema_rs
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from engram import Client
from engram.errors import InvalidInput
from engram.limits import MAX_SERVICE_RECALL_K, MAX_SESSION_ID_CHARS
from engram.models import was_shed


def raw_request(url: str, request: bytes, timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    """Send bytes as they are and read one response: status, headers, body. A server that waits for
    more of the request than was sent fails this with a timeout."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed after {data!r}"
            data += chunk
        head, body = data.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
        while len(body) < int(headers.get("content-length", "0")):
            chunk = sock.recv(65536)
            assert chunk
            body += chunk
    return int(lines[0].split()[1]), headers, body


def mcp(url: str, key: str, calls: list[tuple[str, dict[str, Any]]]) -> tuple[dict[str, Any], list[Any]]:
    """The tools' input schemas, and the result of each call, through the official client."""

    async def main() -> tuple[dict[str, Any], list[Any]]:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http,
            streamable_http_client(f"{url}/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            tools = {t.name: t.input_schema for t in (await session.list_tools()).tools}
            return tools, [await session.call_tool(name, args) for name, args in calls]

    return anyio.run(main)


def bound(schema: Any, key: str) -> Any:
    """The value of ``key`` wherever it sits in ``schema`` (``str | None`` nests it in anyOf)."""
    if isinstance(schema, dict):
        if key in schema:
            return schema[key]
        schema = list(schema.values())
    if isinstance(schema, list):
        for value in schema:
            found = bound(value, key)
            if found is not None:
                return found
    return None


# -- item 5: the key first, then the body ------------------------------------------------------------
def test_an_import_body_is_read_only_after_the_key_is_checked(service):
    """32 MiB announced, one byte sent: the answer comes at once, without waiting for the body."""
    announced = b"Content-Type: application/json\r\nContent-Length: 33554432\r\n"
    status, _, body = raw_request(
        service.url, b"POST /v1/import HTTP/1.1\r\nHost: x\r\n" + announced + b"\r\n{"
    )
    assert status == 401 and json.loads(body)["error"] == "unauthorized"
    user = f"Authorization: Bearer {service.user_keys['sarah']}\r\n".encode()
    status, _, body = raw_request(
        service.url, b"POST /v1/catalog/import HTTP/1.1\r\nHost: x\r\n" + user + announced + b"\r\n["
    )
    assert status == 403 and json.loads(body)["error"] == "forbidden"
    # Any other path ending in /import is an ordinary route (or none): 1 MiB, like every body.
    for path in ("/mcp/import", "/v1/nope/import", "/v1/memories/import"):
        answer = httpx.post(f"{service.url}{path}", content=b"x" * (2 << 20), timeout=30)
        assert answer.status_code == 413 and answer.json()["error"] == "payload_too_large", path
    # The import itself still works with its key.
    done = service.client("sarah").post("/v1/import", json={"semantic": [{"text": "Sarah owns a Hub"}]})
    assert done.status_code == 200, done.text


# -- item 6: no exception text in an answer ----------------------------------------------------------
class LeakyReranker:
    name = "leaky"

    def score(self, query: str, passages: list[str]) -> list[float]:
        raise RuntimeError("psycopg: could not open /srv/engram/private/store.db")


def test_a_failing_stage_is_named_in_explain_without_its_exception_text(service):
    service.engram.for_user("sarah").write("Sarah owns a Lumio Hub v2")
    service.engram.reranker = LeakyReranker()
    answer = service.client("sarah").post("/v1/recall", json={"query": "which hub does Sarah own?"})
    assert answer.status_code == 200
    assert "/srv/engram" not in answer.text and "psycopg" not in answer.text
    explain = answer.json()["hits"][0]["explain"]
    assert explain["rerank_error"] == "the reranker failed; the server log has the details"


# -- item 7: one owner for every limit ---------------------------------------------------------------
def test_the_rest_and_mcp_schemas_state_the_limits_the_server_enforces(make_service):
    with make_service(max_text_chars=300) as svc:
        components = httpx.get(f"{svc.url}/openapi.json", timeout=60).json()["components"]["schemas"]
        for model, field in [
            ("TurnCreate", "text"),
            ("RecallRequest", "query"),
            ("MemoryCreate", "text"),
            ("CatalogCreate", "text"),
        ]:
            assert components[model]["properties"][field]["maxLength"] == 300, (model, field)
        for record in ("EpisodeRecord", "FactRecord", "PlaybookRecord", "CatalogRecord"):
            assert components[record]["properties"]["text"]["maxLength"] == 300, record
        assert (
            bound(components["TurnCreate"]["properties"]["session_id"], "maxLength") == MAX_SESSION_ID_CHARS
        )
        assert components["RecallRequest"]["properties"]["k"]["maximum"] == MAX_SERVICE_RECALL_K
        client = svc.client("sarah")
        for route, field in [("/v1/turns", "text"), ("/v1/recall", "query"), ("/v1/memories", "text")]:
            assert client.post(route, json={field: "a" * 300}).status_code in (200, 201), route
            assert client.post(route, json={field: "a" * 301}).status_code == 422, route
        assert (
            client.post("/v1/recall", json={"query": "a", "k": MAX_SERVICE_RECALL_K + 1}).status_code == 422
        )
        long_id = "s" * (MAX_SESSION_ID_CHARS + 1)
        assert client.post("/v1/turns", json={"text": "hi", "session_id": long_id[:-1]}).status_code == 201
        assert client.post("/v1/turns", json={"text": "hi", "session_id": long_id}).status_code == 422
        imported = client.post("/v1/import", json={"episodic": [{"text": "hi", "session_id": long_id}]})
        assert imported.status_code == 422 and "session_id" in imported.json()["message"]
        nul = client.post("/v1/turns", json={"text": "hi", "session_id": "a\u0000b"})  # not the regex
        assert nul.status_code == 422 and nul.json()["message"] == "session_id: contains a control character"
        with pytest.raises(InvalidInput, match="session_id"):
            svc.engram.for_user("sarah").remember_turn("hi", session_id=long_id)

        tools, results = mcp(
            svc.url,
            svc.user_keys["sarah"],
            [
                ("remember_turn", {"text": "a" * 301}),
                ("remember_turn", {"text": "hi", "session_id": long_id}),
                ("recall_memory", {"query": "a" * 301}),
                ("recall_memory", {"query": "a" * 300}),
            ],
        )
        assert tools["remember_turn"]["properties"]["text"]["maxLength"] == 300
        assert bound(tools["remember_turn"]["properties"]["session_id"], "maxLength") == MAX_SESSION_ID_CHARS
        assert tools["recall_memory"]["properties"]["query"]["maxLength"] == 300
        assert tools["recall_memory"]["properties"]["k"]["maximum"] == MAX_SERVICE_RECALL_K
        assert bound(tools["write_memory"]["properties"]["text"], "maxLength") == 300
        assert [r.is_error for r in results] == [True, True, True, False]


# -- item 8: MCP argument errors in our words --------------------------------------------------------
def test_mcp_argument_errors_say_what_is_wrong_without_pydantic_boilerplate(service):
    _, results = mcp(
        service.url,
        service.user_keys["sarah"],
        [("recall_memory", {"query": "hub", "k": 101}), ("remember_turn", {"text": 5})],
    )
    texts = [r.content[0].text for r in results]
    assert all(r.is_error for r in results)
    assert texts[0] == "invalid_input: k: Input should be less than or equal to 100"
    assert texts[1] == "invalid_input: text: Input should be a valid string"
    assert not any("validation error" in t or "pydantic" in t or "Arguments" in t for t in texts)


# -- item 9: a shed recall says so at the top --------------------------------------------------------
def test_a_shed_recall_says_so_in_a_field_and_a_header(make_service):
    with make_service(recall_gate=True, recall_concurrency=0, rerank_queue=1) as svc:
        svc.engram.for_user("sarah").write("Sarah's garage sensor runs on a CR2032 coin cell")
        client = svc.client("sarah")
        query = {"query": "which battery does the garage sensor take?"}
        with svc.engram.rerank_admission.slot() as admitted:  # another recall holds the cross-encoder
            assert admitted
            shed = client.post("/v1/recall", json=query)
            compact = client.post("/v1/recall", json={**query, "view": "compact"})
            _, (over_mcp,) = mcp(svc.url, svc.user_keys["sarah"], [("recall_memory", query)])
            with Client(svc.url, svc.user_keys["sarah"]) as remote:
                assert was_shed(remote.recall(query["query"]))  # the Client says it as the handle does
        calm = client.post("/v1/recall", json=query)
    for answer in (shed, compact):
        assert answer.json()["shed"] is True and answer.headers["Engram-Recall-Shed"] == "rerank"
    assert shed.json()["hits"][0]["explain"]["rerank"] == "skipped: load"
    assert "cross-encoder" in over_mcp.structured_content["shed"]
    assert calm.json()["shed"] is False and "Engram-Recall-Shed" not in calm.headers


def test_engram_serve_turns_the_recall_gate_on_unless_told_otherwise(monkeypatch, tmp_path):
    from engram.interfaces.cli.service_commands import serving_settings

    monkeypatch.setenv("ENGRAM_HOME", str(tmp_path))
    assert serving_settings().recall_gate is True
    monkeypatch.setenv("ENGRAM_RECALL_GATE", "false")
    assert serving_settings().recall_gate is False


# -- item 22: what the schema says is what the server does -------------------------------------------
def test_a_405_names_every_method_of_the_resource(service):
    client = service.client()
    for method, path, allow in [
        ("OPTIONS", "/v1/catalog/import", "POST"),
        ("OPTIONS", "/v1/catalog", "GET, POST"),
        ("PATCH", "/v1/memories/sem_x", "DELETE, GET"),
        ("PUT", "/v1/keys", "GET, POST"),
    ]:
        answer = client.request(method, path)
        assert answer.status_code == 405 and answer.headers["allow"] == allow, (method, path)


def test_the_schema_refuses_what_the_server_refuses(service):
    document = httpx.get(f"{service.url}/openapi.json", timeout=60).json()

    def valid(component: str, instance: object) -> bool:
        schema = {"$ref": f"#/components/schemas/{component}", "components": document["components"]}
        return jsonschema_rs.validator_for(schema).is_valid(instance)

    client = service.client("sarah")
    for text in ["\n", "\u0096", "\u200b\u200b", " \t", "\U000f19fb"]:  # controls, format, private use
        assert not valid("TurnCreate", {"text": text}), repr(text)
        assert client.post("/v1/turns", json={"text": text}).status_code == 422, repr(text)
    for text in ["a", " é\n", "\U0001f600"]:
        assert valid("TurnCreate", {"text": text}), repr(text)
    both = {"semantic": [{"text": "Sarah owns a Hub", "timestamp": "2024-01-01T00:00:00Z", "days_ago": 3}]}
    assert not valid("UserDocument", both)
    assert client.post("/v1/import", json=both).status_code == 422
    loose = {"text": "Sarah lives in Leith", "contradiction": "harsh"}
    assert not valid("MemoryCreate", loose)
    assert client.post("/v1/memories", json=loose).status_code == 422


# -- item 23: malformed requests, encodings, metadata ------------------------------------------------
def test_a_request_that_is_not_http_gets_the_error_shape(service):
    for request in [b"GET /v1/me HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n", b"GARBAGE\r\n\r\n"]:
        status, headers, body = raw_request(service.url, request)
        assert status == 400 and headers["content-type"] == "application/json"
        assert json.loads(body)["error"] == "bad_request"


def test_a_json_body_must_be_utf8_without_a_byte_order_mark(service):
    client = service.client("sarah")
    text = '{"text": "Sarah owns a Lumio Hub v2"}'
    headers = {"Content-Type": "application/json"}
    for body in [b"\xef\xbb\xbf" + text.encode(), text.encode("utf-16"), text.encode("utf-16-le")]:
        answer = client.post("/v1/turns", content=body, headers=headers)
        assert answer.status_code == 422 and "UTF-8" in answer.json()["message"], body[:4]
    assert service.engram.for_user("sarah").list("episodic") == []
    assert client.post("/v1/turns", content=text.encode(), headers=headers).status_code == 201


def test_metadata_is_bounded_like_text(service):
    huge = {"notes": "x" * 900_000}
    client = service.client("sarah")
    answer = client.post("/v1/turns", json={"text": "hi", "metadata": huge})
    assert answer.status_code == 422 and "metadata" in answer.json()["message"]
    assert client.post("/v1/memories", json={"text": "a fact", "metadata": huge}).status_code == 422
    catalog = service.client().post("/v1/catalog", json={"text": "an item", "metadata": huge})
    assert catalog.status_code == 422
    with pytest.raises(InvalidInput, match="metadata"):
        service.engram.for_user("sarah").remember_turn("hi", metadata=huge)
    document = {"episodic": [{"text": "a turn"}, {"text": "hi", "metadata": huge}]}
    imported = client.post("/v1/import", json=document)
    assert imported.status_code == 422 and "metadata" in imported.json()["message"]
    assert service.engram.for_user("sarah").list("episodic") == []  # nothing of the document written
    assert client.post("/v1/turns", json={"text": "hi", "metadata": {"notes": "x" * 1000}}).status_code == 201
    assert service.engram.for_user("sarah").list("episodic")[0].metadata == {"notes": "x" * 1000}
