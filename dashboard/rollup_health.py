"""The latency roll-up thread's health, for the serving process: its failed passes on /metrics and,
on the backends page, a warning when it has not completed a pass for a while.

The thread runs in the recorder process (rollup.py), which has no /metrics of its own; what it
reports goes through a file in the spool directory both processes share, as the recorder's own
counters do (extproxy/recording/observe.py). Before, its failures were only in the recorder's
log, and the backends page showed old latencies without saying so.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from extproxy import metrics

FILE = "rollup.json"
# A pass starts every second (rollup.py); one catching up on a large backlog takes a few. Ten
# seconds without one completed is no longer a slow pass: the page says its latencies lag.
STALE_AFTER = 10.0


def save(root: Path, started_at: float, failed_passes: int, last_pass_at: float | None) -> None:
    """The thread's figures, replaced atomically (a reader never sees half a file)."""
    tmp = root / (FILE + ".tmp")
    tmp.write_text(json.dumps({"started_at": started_at, "failed_passes": failed_passes,
                               "last_pass_at": last_pass_at, "updated_at": time.time()}))
    os.replace(tmp, root / FILE)


def read(root: Path) -> dict[str, Any]:
    """The figures as saved, or {} when no roll-up thread has saved any (no recorder yet)."""
    try:
        data = json.loads((root / FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def staleness(root: Path, now: float | None = None) -> float | None:
    """Seconds since the roll-up thread last completed a pass (since it started, when it never
    has), when that is more than STALE_AFTER; None while it keeps up, or when it never ran."""
    data = read(root)
    if not data:
        return None
    since = data.get("last_pass_at") or data.get("started_at")
    if not isinstance(since, (int, float)):
        return None
    age = (time.time() if now is None else now) - since
    return age if age > STALE_AFTER else None


def rollup_behind() -> int | None:
    """The backends page's warning: whole seconds since the roll-up thread of this serving
    process's recorder last completed a pass, when that is too long (staleness)."""
    from extproxy.shadowstats import serving_root

    age = staleness(serving_root())
    return None if age is None else int(age)


class RollupCollector:
    """`extproxy_rollup_failed_passes_total` and the age of the last completed pass, at scrape time."""

    def describe(self):
        return []

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        from extproxy.shadowstats import serving_root

        data = read(serving_root())
        if not data:
            return
        yield CounterMetricFamily(
            "extproxy_rollup_failed_passes", "Passes of the latency roll-up (the recorder process's thread) "
            "that failed: the database away or past EXTPROXY_DB_STATEMENT_DEADLINE, or a bug; each is retried.",
            value=data.get("failed_passes", 0))
        last = data.get("last_pass_at")
        yield GaugeMetricFamily(
            "extproxy_rollup_last_pass_age_seconds", "Seconds since the latency roll-up last completed a pass "
            "(-1: none since the recorder process started).",
            value=time.time() - last if isinstance(last, (int, float)) else -1)


COLLECTOR = RollupCollector()
metrics.REGISTRY.register(COLLECTOR)
