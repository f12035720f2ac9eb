"""/metrics: Prometheus text that prometheus-client's own parser reads, moving under a short load, with
no tenant among its label values; who may read it (settings.metrics); rows and consolidation runs."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from engram.retrieval.admission import Admission
from tests.consolidation.conftest import ok, raw
from tests.consolidation.test_consolidation import llm_for


def scrape(client: httpx.Client) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Every sample of /metrics, parsed: sample name -> its labels (sorted pairs) -> value."""
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=")
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def value(samples, name, **labels) -> float:
    return samples.get(name, {}).get(tuple(sorted(labels.items())), 0.0)


def test_metrics_parse_and_move_under_a_short_load(make_service):
    with make_service() as svc:
        admin, sarah, bob = svc.client(), svc.client("sarah"), svc.client("bob")
        before = scrape(admin)
        for i in range(6):
            turn = sarah.post("/v1/turns", json={"text": f"my hub number {i} is offline"})
            assert turn.status_code == 201
        assert bob.post("/v1/memories", json={"text": "Bob uses a Lumio Hub v2"}).status_code == 201
        for _ in range(10):
            assert sarah.post("/v1/recall", json={"query": "why is my hub offline?"}).status_code == 200
        memory_id = turn.json()["id"]
        assert sarah.get(f"/v1/memories/{memory_id}").status_code == 200
        assert sarah.get("/v1/sarah/secret-path").status_code == 404  # a path naming the user
        assert bob.get("/v1/memories/sarah").status_code == 404
        assert svc.client(key="-").post("/mcp/sarah", json={}).status_code == 401
        assert sarah.put("/v1/recall").status_code == 405
        assert svc.client(key="-").get("/inspector/static/favicon.svg").status_code == 200
        after = scrape(admin)

    requests = "engram_http_requests_total"
    recall = {"method": "POST", "route": "/v1/recall", "status": "200"}
    assert value(after, requests, **recall) - value(before, requests, **recall) == 10
    assert value(after, requests, method="POST", route="/v1/turns", status="201") == 6
    assert value(after, requests, method="GET", route="/v1/memories/{memory_id}", status="200") == 1
    assert value(after, requests, method="GET", route="/v1/memories/{memory_id}", status="404") == 1
    assert value(after, requests, method="GET", route="unmatched", status="404") == 1
    assert value(after, requests, method="POST", route="/mcp/{user_id}", status="401") == 1
    assert value(after, requests, method="PUT", route="/v1/recall", status="405") == 1
    assert value(after, requests, method="GET", route="/inspector/static/{path}", status="200") == 1
    assert value(after, "engram_http_request_duration_seconds_count", **recall) == 10
    # The first scrape is counted by the second: the scraper's own requests show too.
    assert value(after, requests, method="GET", route="/metrics", status="200") == 1
    # Recall's stages and models: 10 recalls through each stage, the models timed per call.
    assert value(after, "engram_recalls_total") == 10 and value(after, "engram_recalls_shed_total") == 0
    for stage in ("queue", "legs", "fetch", "late_interaction"):
        assert value(after, "engram_recall_stage_seconds_count", stage=stage) == 10, stage
    assert value(after, "engram_recall_stage_seconds_sum", stage="legs") > 0
    assert value(after, "engram_model_inference_seconds_count", model="embedder", call="query") == 10
    assert value(after, "engram_model_inference_seconds_count", model="embedder", call="documents") == 7
    assert value(after, "engram_model_inference_seconds_count", model="token_encoder", call="query") == 10
    assert value(after, "engram_recall_queue_depth") == 0
    assert value(after, "engram_store_rows", type="episodic") == 6
    assert value(after, "engram_store_rows", type="semantic") == 1
    assert value(after, "engram_http_requests_in_flight") == 1  # the scrape itself
    # No tenant, key or memory id in any label value.
    label_values = {v for samples in after.values() for labels in samples for _, v in labels}
    assert not {v for v in label_values if "sarah" in v or "bob" in v or memory_id in v}, label_values


def test_metrics_need_the_admin_key_unless_opened(make_service):
    with make_service(name="admin.db") as svc:
        assert svc.client(key="-").get("/metrics").status_code == 401
        refused = svc.client("sarah").get("/metrics")
        assert refused.status_code == 403 and "admin key" in refused.json()["message"]
    with make_service(name="open.db", metrics="open") as svc:
        assert "engram_http_requests_total" in svc.client(key="-").get("/metrics").text
    with make_service(name="off.db", metrics="off") as svc:
        assert svc.client().get("/metrics").status_code == 404


def test_a_method_of_the_callers_own_is_one_label_not_a_series_each(make_service):
    with make_service(name="methods.db", metrics="open") as svc:
        anyone = svc.client(key="-")
        for i in range(3):
            anyone.request(f"SARAH{i}", "/healthz")
        methods = {dict(labels)["method"] for labels in scrape(anyone)["engram_http_requests_total"]}
        assert not any(m.startswith("SARAH") for m in methods) and "OTHER" in methods


def test_two_apps_in_one_process_count_apart(make_service):
    with make_service(name="a.db", metrics="open") as a, make_service(name="b.db", metrics="open") as b:
        for _ in range(3):
            a.client(key="-").get("/healthz")
        healthz = {"method": "GET", "route": "/healthz", "status": "200"}
        assert value(scrape(a.client()), "engram_http_requests_total", **healthz) == 3
        assert value(scrape(b.client()), "engram_http_requests_total", **healthz) == 0


def test_consolidation_runs_and_failures_are_counted(make_engram, fake_llm):
    eng = make_engram()
    eng.for_user("sarah").remember_turn("I just adopted a greyhound")
    fake_llm.script(ok(lambda p: {}))
    assert eng.consolidate("sarah", llm=llm_for(fake_llm)).status == "ok"
    eng.for_user("sarah").remember_turn("my hub is offline again")
    fake_llm.script(raw(400, "bad request"))
    assert eng.consolidate("sarah", llm=llm_for(fake_llm)).status.startswith("error")
    assert eng.consolidate("sarah").status.startswith("disabled")
    registry = eng.telemetry.metrics.registry
    runs = {
        outcome: registry.get_sample_value("engram_consolidation_runs_total", {"outcome": outcome})
        for outcome in ("ok", "error", "disabled")
    }
    assert runs == {"ok": 1, "error": 1, "disabled": 1}
    assert registry.get_sample_value("engram_consolidation_failures_total") == 1


def test_a_shed_recall_is_counted_and_its_skipped_rerank_is_not_timed(make_engram):
    eng = make_engram()
    mem = eng.for_user("sarah")
    mem.write("Sarah's hub is a Lumio Hub v2")  # a fact in the window: the cross-encoder would score it
    mem.remember_turn("my hub keeps dropping off the wifi")
    registry = eng.telemetry.metrics.registry
    mem.recall("which hub does Sarah have?")
    assert registry.get_sample_value("engram_recall_stage_seconds_count", {"stage": "rerank"}) == 1
    eng.rerank_admission = Admission.closed()  # the cross-encoder stage is full: every recall is shed
    hits = mem.recall("which hub does Sarah have?")
    assert hits and all(h.explain["rerank"] == "skipped: load" for h in hits)
    assert registry.get_sample_value("engram_recalls_shed_total") == 1
    assert registry.get_sample_value("engram_recalls_total") == 2
    assert registry.get_sample_value("engram_recall_stage_seconds_count", {"stage": "rerank"}) == 1
