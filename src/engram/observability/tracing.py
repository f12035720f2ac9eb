"""OpenTelemetry traces, off by default: a span per request and per recall stage when ENGRAM_OTEL is on.

Off, nothing here imports opentelemetry (it is the optional ``otel`` extra) and a span costs one
``if``. On, spans go to the tracer provider given, else the process's global one: whatever the
program (or ``opentelemetry-instrument``) configured, or the one ``install_provider`` sets for
`engram serve`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from engram.errors import ConfigError

log = logging.getLogger(__name__)
TRACER_NAME = "engram"
NEEDS_EXTRA = "ENGRAM_OTEL is on but OpenTelemetry is not installed: pip install -e '.[otel]'"


class Tracing:
    """Opens spans through an OpenTelemetry tracer, or does nothing (``Tracing()``: off)."""

    def __init__(self, tracer: Any | None = None) -> None:
        self._tracer = tracer

    @property
    def on(self) -> bool:
        return self._tracer is not None

    @classmethod
    def start(cls, provider: Any | None = None) -> Tracing:
        """Tracing through ``provider`` (an SDK ``TracerProvider``), else the global provider."""
        try:
            from opentelemetry import trace
        except ImportError:
            raise ConfigError(NEEDS_EXTRA) from None
        return cls(trace.get_tracer(TRACER_NAME, tracer_provider=provider))

    @contextmanager
    def span(self, name: str, attributes: Mapping[str, str | int | float] | None = None) -> Iterator[Any]:
        """A child of the current span, current inside the block; None when tracing is off."""
        if self._tracer is None:
            yield None
            return
        with self._tracer.start_as_current_span(name, attributes=attributes) as span:
            yield span


def install_provider() -> None:
    """For `engram serve` with ENGRAM_OTEL: when nothing configured a tracer provider yet, set the SDK's,
    exporting by OTLP (OTEL_EXPORTER_OTLP_* variables) when ``opentelemetry-exporter-otlp`` is
    installed; without it spans are made but go nowhere, which is said once in the log."""
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        raise ConfigError(NEEDS_EXTRA) from None
    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return  # the program or opentelemetry-instrument configured one: use it
    provider = TracerProvider(resource=Resource.create({"service.name": "engram"}))
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        log.warning("ENGRAM_OTEL: no exporter (pip install opentelemetry-exporter-otlp-proto-http)")
    else:
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
