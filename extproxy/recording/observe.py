"""What /metrics and /readyz show about recording, read from the spool directory.

Owns the spool's status (depth, bytes, oldest undrained age: read from the segment files and
cursors, so any process can compute it), the recorder process's counters file (recorder.json,
written by it after each batch and read by the serving process), the Prometheus collector that
puts both on /metrics, and the `recording` part of /readyz. Must not write call records.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .spool import (
    Frame, expected_seq, files_usage, read_cursor, read_frame, scan_segment, segment_name, segments, undrained_extents,
)


@dataclass
class SpoolStatus:
    depth: int = 0  # records not yet committed to the database
    bytes: int = 0  # bytes of those records (and of torn tails not yet skipped, but for the last segment's)
    oldest_age: float = 0.0  # seconds since the oldest of them was appended
    disk_bytes: int = 0  # every segment file, drained or not, and the free files kept for reuse


def spool_status(root: Path, known_last_seq: dict[str, int] | None = None,
                 known_end: dict[str, tuple[int, int]] | None = None) -> SpoolStatus:
    """Depth, bytes and age of what is not yet in the database, read from the disk.

    `known_last_seq` / `known_end`: what a writer in this process knows of its own directory
    (its last sequence number; its segment and the end of the data in it), so that its
    segment need not be read. Without them, the last segment of each directory is read
    through (its frames checked) for both: a recycled segment's size counts old bytes after
    its data, so the size alone does not say where the data ends. (With `known_last_seq`
    alone, `bytes` can count those old bytes: at most one segment's worth; depth and age
    are right either way.)
    """
    status = SpoolStatus()
    now = time.time()
    try:
        writers = sorted(p for p in root.iterdir() if p.is_dir())
    except FileNotFoundError:
        return status
    for directory in writers:
        cursor = read_cursor(directory)
        segs = segments(directory)
        last = (known_last_seq or {}).get(directory.name)
        data_end = (known_end or {}).get(directory.name)  # (segment, offset past its data)
        if last is None:
            last = cursor.seq
            if segs:
                try:
                    scan = scan_segment(directory / segment_name(segs[-1]), segs[-1])
                    last, data_end = max(last, scan.last), (segs[-1], scan.end)
                except FileNotFoundError:
                    pass
        status.depth += max(0, last - cursor.seq)
        oldest = None
        for first, path, start, end in undrained_extents(directory, cursor, data_end):
            status.bytes += end - start
            if oldest is None and end > start:
                try:
                    with open(path, "rb") as f:
                        found = read_frame(f, start, expected_seq(first, start, cursor.seq))
                except FileNotFoundError:  # stored and freed by the recorder since the listing
                    continue
                if isinstance(found, Frame):
                    oldest = found.at
        if oldest is not None:
            status.oldest_age = max(status.oldest_age, now - oldest)
        status.disk_bytes += files_usage(directory)[0]
    return status


def read_recorder_counters(root: Path) -> dict:
    """The recorder process's counters (written by it after each batch), or {}. Its times are
    checked here, for every reader (/metrics, /readyz, the pages, the next recorder): an
    `updated_at` that is not a time is left out (never reported), a `database` that is not
    one as the recorder writes it too, and a `failing_since` that is not a time is None."""
    try:
        counters = json.loads((root / "recorder.json").read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(counters, dict):
        return {}
    if _epoch(counters.get("updated_at")) is None:
        counters.pop("updated_at", None)
    database = counters.get("database")
    if not isinstance(database, dict) or database.get("ok") not in (True, False, None):
        counters.pop("database", None)
    else:
        database["failing_since"] = _epoch(database.get("failing_since"))
        database["error"] = str(database.get("error") or "")
    return counters


def _epoch(value: Any) -> float | None:
    """A time (epoch seconds), or None for anything else (NaN and infinities fail the range)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if 0 < value < 1e11 else None


def write_recorder_counters(root: Path, counters: dict) -> None:
    tmp = root / "recorder.json.tmp"
    tmp.write_text(json.dumps(counters))
    os.replace(tmp, root / "recorder.json")


class RecordingCollector:
    """Recording's metrics at scrape time: the hand-off and its drops (this process), the spool
    as on disk, and the recorder process's counters (its recorder.json). The recorder process
    does the writing, so its counters reach /metrics through the spool directory."""

    def __init__(self) -> None:
        self.source: Any = None  # the serving process's SpoolRecorder (the latest one made)

    def describe(self):
        return []  # nothing at registration time

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        recorder = self.source
        if recorder is None:
            return
        status = recorder.status()
        theirs = read_recorder_counters(recorder.spool.root)
        database = recorders_database(theirs)
        gauges = [
            ("extproxy_recorder_queue_depth", "Calls answered and not yet in the spool (put aside on the serving "
             "loop, in the hand-off, or being written).", recorder.unspooled),
            ("extproxy_recorder_queue_bytes", "Body bytes of the calls in the hand-off or being written.",
             recorder.queued_bytes),
            ("extproxy_spool_depth", "Calls in the spool not yet committed to the database.", status.depth),
            ("extproxy_spool_bytes", "Bytes of those calls in the spool.", status.bytes),
            ("extproxy_spool_oldest_age_seconds", "Age of the oldest call not yet in the database.", status.oldest_age),
            ("extproxy_spool_disk_bytes", "Bytes of every spool segment file on disk (and of those kept for reuse).",
             status.disk_bytes),
            ("extproxy_spool_full", "1 while calls are dropped at EXTPROXY_SPOOL_MAX_BYTES (alarm).", int(recorder.spool_full)),
            ("extproxy_recorder_heartbeat_age_seconds", "Seconds since the recorder process last reported (-1: never).",
             (time.time() - theirs["updated_at"]) if "updated_at" in theirs else -1),
            ("extproxy_recorder_database_up", "1 while the recorder process writes to (or, idle, reaches) the "
             "database, 0 while it fails (alarm: calls wait in the spool), -1 when unknown (no recorder report "
             "for 60 s, or it has not tried yet).",
             -1 if database.get("ok") is None else int(bool(database["ok"]))),
            ("extproxy_recorder_over_deadline", "Calls kept in the spool because alone they take longer than "
             "EXTPROXY_DB_STATEMENT_DEADLINE to store while the database answers (alarm: recording is held "
             "behind them), 0 otherwise.", theirs.get("over_deadline", 0)),
            ("extproxy_recorder_database_failing_seconds", "Seconds the database has failed the recorder process "
             "without a break (0 while it works).",
             (time.time() - database["failing_since"]) if database["ok"] is False and database.get("failing_since") else 0),
        ]
        for name, doc, value in gauges:
            yield GaugeMetricFamily(name, doc, value=value)
        dropped = CounterMetricFamily(
            "extproxy_recorder_dropped_total", "Calls answered but not recorded, by reason.", labels=["reason"]
        )
        for reason, n in sorted(all_drops(recorder, theirs).items()):
            dropped.add_metric([reason], n)
        yield dropped
        for name, doc, key in (
            ("extproxy_recorder_written_total", "Calls written to the database.", "written"),
            ("extproxy_recorder_raw_total", "Calls stored as raw records (undecodable).", "raw"),
            ("extproxy_recorder_write_errors_total", "Failed batch writes (the batch is retried).", "write_errors"),
            ("extproxy_recorder_batches_halved_total", "Batches split in two after taking longer than "
             "EXTPROXY_DB_STATEMENT_DEADLINE to store.", "halved"),
            ("extproxy_recorder_nodes_stored_again_total", "Node objects a retention pass deleted while "
             "the recorder still referred to them, stored again.", "nodes_stored_again"),
        ):
            yield CounterMetricFamily(name, doc, value=theirs.get(key, 0))
        held = CounterMetricFamily(
            "extproxy_recorder_held_total", "Failed tries to store calls that stay in the spool, by reason.",
            labels=["reason"],
        )
        for reason, n in sorted(theirs.get("held", {}).items()):
            held.add_metric([reason], n)
        yield held
        calls = CounterMetricFamily(
            "extproxy_calls_total", "Recorded calls by backend, verb and outcome (ok, error, timeout).",
            labels=["backend", "verb", "outcome"],
        )
        for key, n in sorted(theirs.get("calls", {}).items()):
            backend, verb, outcome = key.split(" ")
            calls.add_metric([backend, verb, outcome], n)
        yield calls


def all_drops(recorder: Any, theirs: dict) -> dict[str, int]:
    """Drops by reason: this process's (hand-off, spool) and the recorder process's (torn, ...)."""
    reasons = {"queue-full": 0, "spool-full": 0}
    for counts in (recorder.drops.counts, theirs.get("dropped", {})):
        for reason, n in counts.items():
            reasons[reason] = reasons.get(reason, 0) + n
    return reasons


def readiness(recorder: Any) -> dict[str, Any]:
    """The spool as on disk, for /readyz: reported, not judged (serving goes on whatever its state)."""
    status = recorder.status()
    theirs = read_recorder_counters(recorder.spool.root)
    return {
        "spool_depth": status.depth,
        "spool_bytes": status.bytes,
        "oldest_undrained_age_seconds": round(status.oldest_age, 3),
        "spool_full": recorder.spool_full,
        "handoff_depth": recorder.queued,
        "dropped": {k: v for k, v in all_drops(recorder, theirs).items() if v},
        "recorder_heartbeat_age_seconds": round(time.time() - theirs["updated_at"], 3) if "updated_at" in theirs else None,
        # As the recorder process last found it: serving does not depend on it (calls wait in the spool).
        "database": recorders_database(theirs),
    }


# A recorder that has not reported for this long is gone or stuck (it reports after each batch,
# and every 5 s while idle; a batch of large calls takes seconds): what it last said of the
# database is no longer told as the database's state.
RECORDER_SILENT_SECONDS = 60.0


def recorders_database(theirs: dict) -> dict[str, Any]:
    """The database as the recorder process last found it: ok True or False, or None (unknown:
    it has not tried yet, or has not reported for RECORDER_SILENT_SECONDS)."""
    database = dict(theirs.get("database") or {"ok": None, "failing_since": None, "error": ""})
    if "updated_at" not in theirs or time.time() - theirs["updated_at"] > RECORDER_SILENT_SECONDS:
        database["ok"] = None
    return database


COLLECTOR = RecordingCollector()
