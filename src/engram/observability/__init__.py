"""What Engram tells its operator: Prometheus metrics, optional OpenTelemetry traces, request logs.

A leaf: no engram import, so recall (engram.retrieval), the engine and the service all record into it.
"""

from engram.observability.metrics import EngineMetrics, HttpMetrics
from engram.observability.telemetry import Telemetry
from engram.observability.tracing import Tracing

__all__ = ["EngineMetrics", "HttpMetrics", "Telemetry", "Tracing"]
