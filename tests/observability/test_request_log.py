"""One log line per request (text or JSON) with the request id that X-Request-ID returns; no user id,
key, path or memory id in it."""

from __future__ import annotations

import json
import logging
import re

from engram.observability.request_log import JsonFormatter


def test_each_request_logs_one_line_with_the_id_it_returns(make_service, caplog):
    caplog.set_level(logging.INFO, logger="engram.request")
    with make_service() as svc:
        sarah = svc.client("sarah")
        created = sarah.post("/v1/turns", json={"text": "my hub is offline"})
        memory_id = created.json()["id"]
        kept = sarah.get(f"/v1/memories/{memory_id}", headers={"X-Request-ID": "trace-42.a:b"})
        replaced = sarah.get("/healthz", headers={"X-Request-ID": "x" * 200})
        refused = svc.client(key="-").get("/v1/memories")
    generated = created.headers["X-Request-ID"]
    assert re.fullmatch(r"[0-9a-f]{32}", generated)
    assert kept.headers["X-Request-ID"] == "trace-42.a:b"  # a sane incoming id is kept
    assert re.fullmatch(r"[0-9a-f]{32}", replaced.headers["X-Request-ID"])  # an odd one is not
    assert refused.status_code == 401 and refused.headers["X-Request-ID"]
    lines = [r for r in caplog.records if r.name == "engram.request"]
    assert [r.getMessage().split(" ")[:3] for r in lines] == [
        ["POST", "/v1/turns", "201"],
        ["GET", "/v1/memories/{memory_id}", "200"],
        ["GET", "/healthz", "200"],
        ["GET", "/v1/memories", "401"],
    ]
    assert lines[1].getMessage().endswith("request_id=trace-42.a:b")
    as_json = [json.loads(JsonFormatter().format(r)) for r in lines]
    assert as_json[0]["event"] == "request" and as_json[0]["request_id"] == generated
    assert {k: as_json[1][k] for k in ("method", "route", "status")} == {
        "method": "GET",
        "route": "/v1/memories/{memory_id}",
        "status": 200,
    }
    assert all(isinstance(line["duration_ms"], float) and line["duration_ms"] >= 0 for line in as_json)
    everything = "\n".join(r.getMessage() for r in lines) + json.dumps(as_json)
    assert (
        "sarah" not in everything and memory_id not in everything and svc.user_keys["sarah"] not in everything
    )


class BrokenEmbedder:
    """A model that fails with an error of no known kind: the route answers 500."""

    name, dim = "broken", 384

    def embed_documents(self, texts):
        raise RuntimeError("the model failed")

    def embed_query(self, text):
        raise RuntimeError("the model failed")


def test_a_server_fault_is_logged_counted_and_answered_with_its_request_id(make_service, caplog):
    caplog.set_level(logging.INFO, logger="engram.request")
    with make_service(metrics="open") as svc:
        svc.engram.embedder = BrokenEmbedder()
        failed = svc.client("sarah").post(
            "/v1/turns", json={"text": "hello"}, headers={"X-Request-ID": "f-1"}
        )
        metrics = svc.client(key="-").get("/metrics").text
    assert failed.status_code == 500 and failed.json()["error"] == "internal_error"
    assert failed.headers["X-Request-ID"] == "f-1"
    assert 'engram_http_requests_total{method="POST",route="/v1/turns",status="500"} 1.0' in metrics
    line = next(r.getMessage() for r in caplog.records if r.name == "engram.request")
    assert line.startswith("POST /v1/turns 500 ") and line.endswith("request_id=f-1")
