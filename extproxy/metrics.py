"""Prometheus metrics: one registry per process, exposed at /metrics.

Hot-path metrics are updated where the call is answered (one histogram observation).
Recording's metrics (the hand-off, the spool, and the recorder process's counters such as
outcomes, which it judges) are read at scrape time by extproxy.recording.observe's collector,
registered here by the recording package.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

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


def render() -> bytes:
    return generate_latest(REGISTRY)
# The shadow backends' figures come from the shadow process, through shadowstats.py's collector.
