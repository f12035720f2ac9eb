"""The Prometheus metrics, each family in a registry of its own owner (never the process-global one),
so two engines or two apps in one process (tests, an embedding program) count apart.

No label carries a tenant: a user id as a label value would publish who uses the service and grow the
series without bound. Labels are closed sets (a stage, a model role, a route template, a status).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

log = logging.getLogger(__name__)

# Recall stages and model calls take from ~0.1 ms (a fused list) to seconds (a queue under load).
STAGE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# A request: a healthz in ~1 ms, a recall in ~50-300 ms, an import up to the 20 s it may wait.
REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# A consolidation report's status word (engram.consolidation): "ok", "partial: ...", "error: ..."
OUTCOMES = ("ok", "partial", "stopped", "disabled", "error", "other")


class EngineMetrics:
    """What an engine records: recall's stages, shed recalls, model inference, consolidation runs."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.recall_stage = Histogram(
            "engram_recall_stage_seconds",
            "Time in each recall stage (queue: waiting for a recall slot)",
            ["stage"],
            buckets=STAGE_BUCKETS,
            registry=self.registry,
        )
        self.recalls = Counter("engram_recalls", "Recalls computed", registry=self.registry)
        self.recalls_shed = Counter(
            "engram_recalls_shed",
            "Recalls computed without the cross-encoder because of load (explain rerank: skipped: load)",
            registry=self.registry,
        )
        self.model_inference = Histogram(
            "engram_model_inference_seconds",
            "Time in one model call, by model role and call",
            ["model", "call"],
            buckets=STAGE_BUCKETS,
            registry=self.registry,
        )
        self.consolidation_runs = Counter(
            "engram_consolidation_runs",
            "Consolidation runs by outcome (ok, partial, stopped, disabled, error, other)",
            ["outcome"],
            registry=self.registry,
        )
        for outcome in OUTCOMES:  # each at 0 from the start, so rate() and alerts see the series
            self.consolidation_runs.labels(outcome)
        self.consolidation_failures = Counter(
            "engram_consolidation_failures",
            "Consolidation runs that failed (outcome error, or raised)",
            registry=self.registry,
        )
        self.recall_queue = Gauge(
            "engram_recall_queue_depth", "Recalls waiting for a recall slot now", registry=self.registry
        )

    def watch_queue(self, depth: Callable[[], float]) -> None:
        """Read the recall gate's queue depth at each scrape (nothing to update on the hot path)."""
        self.recall_queue.set_function(depth)

    def consolidated(self, status: str) -> None:
        """Count a run by its report's status ("error: ..." counts as a failure too)."""
        outcome = status.split(":", 1)[0].strip()
        if outcome not in OUTCOMES:
            outcome = "other"  # a closed label set, whatever a future status says
        self.consolidation_runs.labels(outcome).inc()
        if outcome == "error":
            self.consolidation_failures.inc()


class HttpMetrics:
    """Requests and their latency per method, route template and status, in the app's own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "engram_http_requests",
            "HTTP requests by method, route template and status",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "engram_http_request_duration_seconds",
            "HTTP request latency by method, route template and status",
            ["method", "route", "status"],
            buckets=REQUEST_BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "engram_http_requests_in_flight", "Requests being served", registry=self.registry
        )

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route, str(status)).observe(seconds)


class Forward:
    """A collector that yields another registry's families at each scrape: the app's registry shows the
    engine's metrics without registering them twice (several apps may serve one engine)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterable[Metric]:
        return self.registry.collect()


class StoreRows:
    """``engram_store_rows{type}`` read at each scrape by ``count`` (the store's count per type, as
    `engram info` shows it): one grouped count, no row read. A store that fails to answer leaves the
    family out of that scrape rather than failing the scrape."""

    def __init__(self, count: Callable[[], Mapping[str, int]]) -> None:
        self.count = count

    def collect(self) -> Iterable[Metric]:
        try:
            counts = self.count()
        except Exception:
            log.warning("/metrics: the store did not answer its row count", exc_info=True)
            return
        family = GaugeMetricFamily(
            "engram_store_rows",
            "Rows in the store per memory type (PostgreSQL and OpenSearch: the catalog only, as their "
            "service account sees no tenant's rows without acting as that tenant)",
            labels=["type"],
        )
        for memory_type, n in sorted(counts.items()):
            family.add_metric([str(memory_type)], float(n))
        yield family

    def describe(self) -> Iterable[Metric]:
        return []  # read at scrape time only: registering it must not query the store
