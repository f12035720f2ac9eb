"""Telemetry: an engine's metrics and tracing together, and the two hooks recall and the models use."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from engram.observability.metrics import EngineMetrics
from engram.observability.tracing import Tracing


class Telemetry:
    """One per engine: ``stage`` times a recall stage (a histogram, and a span when tracing is on),
    ``model`` times one model call."""

    def __init__(self, tracing: Tracing | None = None) -> None:
        self.metrics = EngineMetrics()
        self.tracing = tracing or Tracing()

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            with self.tracing.span(f"recall.{name}"):
                yield
        finally:
            self.metrics.recall_stage.labels(name).observe(time.perf_counter() - start)

    @contextmanager
    def span(self, name: str, **attributes: str | int | float) -> Iterator[Any]:
        with self.tracing.span(name, attributes) as span:
            yield span

    @contextmanager
    def model(self, role: str, call: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.metrics.model_inference.labels(role, call).observe(time.perf_counter() - start)
