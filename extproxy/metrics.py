"""Prometheus metrics: one registry per process, exposed at /metrics.

Hot-path metrics are updated where the call is answered (one histogram observation);
outcome counters are updated by the recorder's writer, which is where the outcome is judged.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

REGISTRY = CollectorRegistry(auto_describe=True)

REQUEST_DURATION = Histogram(
    "extproxy_request_duration_seconds",
    "Time from the scheduler's request to extproxy's answer, per backend and verb.",
    ["backend", "verb"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    registry=REGISTRY,
)
BACKEND_DURATION = Histogram(
    "extproxy_backend_duration_seconds",
    "Time a backend took to answer (or fail), per backend and verb.",
    ["backend", "verb"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    registry=REGISTRY,
)
CALLS = Counter(
    "extproxy_calls_total",
    "Recorded calls by backend, verb and outcome (ok, error, timeout).",
    ["backend", "verb", "outcome"],
    registry=REGISTRY,
)
REJECTED = Counter(
    "extproxy_rejected_requests_total",
    "Requests refused before reaching a backend (unknown backend or verb, too large, bad method).",
    ["reason"],
    registry=REGISTRY,
)
REPLIES_TRUNCATED = Counter(
    "extproxy_replies_truncated_total",
    "Backend replies larger than EXTPROXY_MAX_REPLY_BYTES (streamed through, or failed in the combined form).",
    ["backend"],
    registry=REGISTRY,
)
RECORDER_QUEUE_DEPTH = Gauge(
    "extproxy_recorder_queue_depth", "Calls waiting to be written.", registry=REGISTRY
)
RECORDER_QUEUE_BYTES = Gauge(
    "extproxy_recorder_queue_bytes", "Body bytes held by calls waiting to be written.", registry=REGISTRY
)
RECORDER_DROPPED = Counter(
    "extproxy_recorder_dropped_total",
    "Calls not recorded because the recorder queue was full (count or bytes bound).",
    registry=REGISTRY,
)
RECORDER_WRITTEN = Counter(
    "extproxy_recorder_written_total", "Calls written to the database.", registry=REGISTRY
)
RECORDER_WRITE_ERRORS = Counter(
    "extproxy_recorder_write_errors_total",
    "Failed batch writes (the batch is retried).",
    registry=REGISTRY,
)


def render() -> bytes:
    return generate_latest(REGISTRY)


# --- shadow backends (shadow.py) -------------------------------------------------------------
SHADOW_CALLS = Counter(
    "extproxy_shadow_calls_total",
    "Calls mirrored to a shadow backend, by whether its decisions differed from the primary's "
    "(same, different) or could not be compared (error).",
    ["shadow", "result"],
    registry=REGISTRY,
)
SHADOW_DROPPED = Counter(
    "extproxy_shadow_dropped_total",
    "Calls not mirrored to a shadow because the shadow queue was full (the shadows were behind).",
    ["shadow"],
    registry=REGISTRY,
)
