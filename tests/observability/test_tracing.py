"""OpenTelemetry traces (the otel extra): off by default; on, a span per request holding the recall's
stage spans, seen through the SDK's in-memory exporter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from engram.observability import Tracing
from tests.polling import until


def test_a_request_span_holds_the_recall_stage_spans(make_service):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with make_service(otel=True) as svc:
        svc.engram.telemetry.tracing = Tracing.start(provider)  # this test's provider, not the global one
        sarah = svc.client("sarah")
        assert sarah.post("/v1/turns", json={"text": "my Lumio hub is offline"}).status_code == 201
        # the turn's request span ends after its response is sent: let it end before clearing, or a
        # loaded machine records it among the recall's spans
        assert until(lambda: any(s.name == "POST /v1/turns" for s in exporter.get_finished_spans()))
        exporter.clear()
        recalled = sarah.post(
            "/v1/recall", json={"query": "is my hub offline?"}, headers={"X-Request-ID": "r-1"}
        )
        assert recalled.status_code == 200
    provider.shutdown()
    spans = exporter.get_finished_spans()
    by_name = {s.name: s for s in spans}
    request = by_name["POST /v1/recall"]
    assert request.parent is None
    assert request.attributes["http.route"] == "/v1/recall"
    assert request.attributes["http.response.status_code"] == 200
    assert request.attributes["engram.request_id"] == "r-1"
    recall = by_name["engram.recall"]
    assert recall.parent.span_id == request.context.span_id
    stages = {s.name for s in spans if s.parent is not None and s.parent.span_id == recall.context.span_id}
    assert {"recall.queue", "recall.legs", "recall.fetch", "recall.late_interaction"} <= stages, stages
    strays = [s.name for s in spans if s.context.trace_id != request.context.trace_id]
    assert not strays, strays
    # Nothing of the tenant in any span.
    assert "sarah" not in json.dumps([dict(s.attributes or {}) for s in spans] + [s.name for s in spans])


# Run in a fresh interpreter: the global tracer provider can be set once per process.
TRACED = textwrap.dedent(
    """
    import json, sys
    from fastapi.testclient import TestClient
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from engram import Engram
    from engram.auth import ApiKeys
    from engram.interfaces.rest import create_app

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    seen = {}
    for otel in (False, True):
        with Engram.open(rerank=False, otel=otel) as eng:
            keys = ApiKeys(eng.store)
            key, _ = keys.create("sarah")
            with TestClient(create_app(eng, keys)) as client:
                auth = {"Authorization": f"Bearer {key}"}
                client.post("/v1/turns", json={"text": "my hub is offline"}, headers=auth)
                client.post("/v1/recall", json={"query": "hub offline?"}, headers=auth)
        seen[str(otel)] = sorted(s.name for s in exporter.get_finished_spans())
        exporter.clear()
    print(json.dumps(seen))
    """
)


def test_tracing_is_off_by_default_and_uses_the_global_provider_when_on(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")} | {
        "ENGRAM_HOME": str(tmp_path)
    }
    out = subprocess.run([sys.executable, "-c", TRACED], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["False"] == []  # off: not one span of ours
    assert {"POST /v1/recall", "POST /v1/turns", "engram.recall", "recall.legs"} <= set(seen["True"])
    assert seen["True"].count("POST /v1/recall") == 1  # ours; FastAPI's own request span stays off


INSTALL = textwrap.dedent(
    """
    import sys
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from engram.observability.tracing import install_provider

    if sys.argv[1] == "configured":
        mine = TracerProvider()
        trace.set_tracer_provider(mine)
    install_provider()
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider), provider
    assert sys.argv[1] != "configured" or provider is mine  # a provider already set is kept
    print(provider.resource.attributes["service.name"])
    """
)


def test_serve_sets_an_sdk_provider_unless_one_is_configured():
    """What `engram serve` does with ENGRAM_OTEL: the SDK's provider named "engram" when the process has
    none (exporting by OTLP where its exporter is installed), the one configured otherwise."""
    fresh = subprocess.run(
        [sys.executable, "-c", INSTALL, "fresh"], capture_output=True, text=True, timeout=60
    )
    assert fresh.returncode == 0 and fresh.stdout.strip() == "engram", fresh.stderr
    kept = subprocess.run(
        [sys.executable, "-c", INSTALL, "configured"], capture_output=True, text=True, timeout=60
    )
    assert kept.returncode == 0 and kept.stdout.strip() != "engram", kept.stderr
