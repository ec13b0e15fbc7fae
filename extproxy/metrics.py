"""Prometheus metrics: one registry per process, exposed at /metrics.

Hot-path metrics are updated where the call is answered (one histogram observation).
Recording's metrics (the hand-off, the spool, and the recorder process's counters such as
outcomes, which it judges) are read at scrape time by `RecordingCollector`.
"""
from __future__ import annotations

import time
from typing import Any

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


class RecordingCollector:
    """Recording's metrics, read at scrape time: the hand-off and its drops (this process),
    the spool as on disk, and the recorder process's counters (its recorder.json).

    The recorder process does the writing, so its counters (written, raw, write errors,
    calls by outcome, drops it saw: torn, unreadable) reach /metrics through the spool
    directory instead of this process's registry.
    """

    def __init__(self) -> None:
        self.source: Any = None  # the serving process's SpoolRecorder, set when it starts

    def describe(self):
        return []  # nothing at registration: collect() imports the engine, which imports us

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        recorder = self.source
        if recorder is None:  # not started yet: the process's engine still has one
            from .engine import get_engine

            recorder = get_engine().recorder
        from .recording.spool import read_recorder_counters

        status = recorder.status()
        theirs = read_recorder_counters(recorder.spool.root)
        gauges = [
            ("extproxy_recorder_queue_depth", "Calls handed over and not yet in the spool.", recorder.queued),
            ("extproxy_recorder_queue_bytes", "Body bytes of those calls.", recorder.queued_bytes),
            ("extproxy_spool_depth", "Calls in the spool not yet committed to the database.", status.depth),
            ("extproxy_spool_bytes", "Bytes of those calls in the spool.", status.bytes),
            ("extproxy_spool_oldest_age_seconds", "Age of the oldest call not yet in the database.", status.oldest_age),
            ("extproxy_spool_disk_bytes", "Bytes of every spool segment file on disk.", status.disk_bytes),
            ("extproxy_spool_full", "1 while calls are dropped at EXTPROXY_SPOOL_MAX_BYTES (alarm).", int(recorder.spool_full)),
            ("extproxy_recorder_heartbeat_age_seconds", "Seconds since the recorder process last reported (-1: never).",
             (time.time() - theirs["updated_at"]) if "updated_at" in theirs else -1),
        ]
        for name, doc, value in gauges:
            yield GaugeMetricFamily(name, doc, value=value)
        dropped = CounterMetricFamily(
            "extproxy_recorder_dropped_total", "Calls answered but not recorded, by reason.", labels=["reason"]
        )
        reasons = dict(recorder.drops.counts)
        for reason, n in theirs.get("dropped", {}).items():
            reasons[reason] = reasons.get(reason, 0) + n
        for reason in ("queue-full", "spool-full"):
            reasons.setdefault(reason, 0)
        for reason, n in sorted(reasons.items()):
            dropped.add_metric([reason], n)
        yield dropped
        for name, doc, key in (
            ("extproxy_recorder_written_total", "Calls written to the database.", "written"),
            ("extproxy_recorder_raw_total", "Calls stored as raw records (undecodable).", "raw"),
            ("extproxy_recorder_write_errors_total", "Failed batch writes (the batch is retried).", "write_errors"),
        ):
            yield CounterMetricFamily(name, doc, value=theirs.get(key, 0))
        calls = CounterMetricFamily(
            "extproxy_calls_total", "Recorded calls by backend, verb and outcome (ok, error, timeout).",
            labels=["backend", "verb", "outcome"],
        )
        for key, n in sorted(theirs.get("calls", {}).items()):
            backend, verb, outcome = key.split(" ")
            calls.add_metric([backend, verb, outcome], n)
        yield calls


RECORDING = RecordingCollector()
REGISTRY.register(RECORDING)


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
