"""The shadow backends' figures, as the shadow process keeps them on disk and everyone reads them.

Owns the state file `<spool root>/shadow.json` (the shadow process's read positions in the
spool and its counters, written together in one atomic replace, so a restart resumes where
the counted work ended: nothing counted twice, nothing lost but the work since the last
save, which is done again), its reading for the dashboard and the API (`current_stats`), and
the Prometheus collector that puts it on the serving process's /metrics.

The figures are those of this spool (one per serving process, i.e. per replica: the pod's
shadow container beside its server); Prometheus adds the replicas up.
May import: recording/spool.py (the Cursor), recording/observe.py (the serving process's spool
root), metrics' registry. Must not mirror calls (shadow.py does).
"""
from __future__ import annotations

import json
import os
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import metrics
from .recording.observe import COLLECTOR as RECORDING
from .recording.spool import Cursor

STATE_FILE = "shadow.json"
EXAMPLES = 20  # latest differing calls kept per shadow
VERSION = 1


@dataclass
class ShadowStats:
    shadow: str
    primary: str
    calls: int = 0  # compared
    different: int = 0
    errors: int = 0  # no comparison possible (the shadow lacks the verb, the request could not be converted)
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> calls not sent to the shadow
    kinds: dict[str, int] = field(default_factory=dict)
    examples: deque = field(default_factory=lambda: deque(maxlen=EXAMPLES))

    def to_json(self) -> dict[str, Any]:
        return {
            "shadow": self.shadow, "primary": self.primary, "calls": self.calls, "different": self.different,
            "errors": self.errors, "dropped": dict(sorted(self.dropped.items())),
            "dropped_total": sum(self.dropped.values()),
            "different_rate": round(self.different / self.calls, 4) if self.calls else 0.0,
            "kinds": dict(sorted(self.kinds.items())), "examples": list(self.examples),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ShadowStats":
        return cls(
            data["shadow"], data["primary"], data.get("calls", 0), data.get("different", 0), data.get("errors", 0),
            dict(data.get("dropped", {})), dict(data.get("kinds", {})),
            deque(data.get("examples", []), maxlen=EXAMPLES),
        )


@dataclass
class ShadowState:
    """What the shadow process saves after each step: positions and figures, together."""

    positions: dict[str, Cursor] = field(default_factory=dict)  # spool writer -> where the shadow stands
    shadows: dict[str, ShadowStats] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> spool records never looked at
    lag_seconds: float = 0.0  # age of the last record taken, when it was taken

    def stats(self, shadow: str, primary: str) -> ShadowStats:
        found = self.shadows.get(shadow)
        if found is None or found.primary != primary:  # new, or now the shadow of another backend
            found = self.shadows[shadow] = ShadowStats(shadow, primary)
        return found

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION, "pid": os.getpid(), "updated_at": time.time(),
            "positions": {w: [c.seq, c.segment, c.offset] for w, c in sorted(self.positions.items())},
            "shadows": {name: s.to_json() for name, s in sorted(self.shadows.items())},
            "skipped": dict(sorted(self.skipped.items())), "lag_seconds": round(self.lag_seconds, 3),
        }


def load_state(root: Path) -> ShadowState:
    """The saved state, or a fresh one (no file, or one this version cannot read)."""
    data = read_state_file(root)
    if data.get("version") != VERSION:
        return ShadowState()
    return ShadowState(
        positions={w: Cursor(*c) for w, c in data.get("positions", {}).items()},
        shadows={name: ShadowStats.from_json(s) for name, s in data.get("shadows", {}).items()},
        skipped=dict(data.get("skipped", {})), lag_seconds=data.get("lag_seconds", 0.0),
    )


def save_state(root: Path, state: ShadowState) -> None:
    tmp = root / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(state.to_json()))
    os.replace(tmp, root / STATE_FILE)  # positions and figures change together or not at all


def read_state_file(root: Path) -> dict[str, Any]:
    try:
        return json.loads((root / STATE_FILE).read_text())
    except (FileNotFoundError, ValueError):
        return {}


def serving_root() -> Path:
    """The spool of this serving process (the one its SpoolRecorder writes), else the setting."""
    if RECORDING.source is not None:
        return Path(RECORDING.source.spool.root)
    from django.conf import settings

    return Path(settings.EXTPROXY_SPOOL_DIR)


def current_stats(root: Path, configured: list[tuple[str, str]]) -> dict[str, Any]:
    """The figures for the dashboard and the API: one row per configured (shadow, primary),
    zeros for one the shadow process has not reported yet; and the process's own status."""
    data = read_state_file(root)
    saved = data.get("shadows", {}) if data.get("version") == VERSION else {}
    rows = []
    for shadow, primary in configured:
        found = saved.get(shadow)
        row = found if found and found.get("primary") == primary else ShadowStats(shadow, primary).to_json()
        row["percent"] = f"{row['different_rate'] * 100:.1f}%"
        for example in row["examples"]:
            example["at_text"] = datetime.fromtimestamp(example["at"], timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        rows.append(row)
    updated = data.get("updated_at")
    process = {
        "reported": updated is not None,
        "age_seconds": round(time.time() - updated, 1) if updated is not None else None,
        "skipped": data.get("skipped", {}),
        "skipped_total": sum(data.get("skipped", {}).values()),
        "lag_seconds": data.get("lag_seconds"),
    }
    return {"results": rows, "process": process}


class ShadowCollector:
    """The shadow process's figures on the serving process's /metrics, read at scrape time."""

    def describe(self):
        return []

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        data = read_state_file(serving_root())
        if data.get("version") != VERSION:
            return
        calls = CounterMetricFamily(
            "extproxy_shadow_calls", "Calls mirrored to a shadow backend, by whether its decisions differed from the "
            "primary's (same, different) or could not be compared (error).", labels=["shadow", "result"])
        dropped = CounterMetricFamily(
            "extproxy_shadow_dropped", "Calls of a primary not sent to its shadow, by reason (stale: older than the "
            "shadow process's --max-lag when it got to them).", labels=["shadow", "reason"])
        for name, s in sorted(data.get("shadows", {}).items()):
            calls.add_metric([name, "same"], s["calls"] - s["different"])
            calls.add_metric([name, "different"], s["different"])
            calls.add_metric([name, "error"], s["errors"])
            for reason, n in sorted(s.get("dropped", {}).items()):
                dropped.add_metric([name, reason], n)
        yield calls
        yield dropped
        skipped = CounterMetricFamily(
            "extproxy_shadow_skipped_records", "Spool records the shadow process never looked at, by reason (deleted: "
            "the recorder removed their segment first).", labels=["reason"])
        for reason, n in sorted(data.get("skipped", {}).items()):
            skipped.add_metric([reason], n)
        yield skipped
        yield GaugeMetricFamily("extproxy_shadow_heartbeat_age_seconds", "Seconds since the shadow process last saved.",
                                value=time.time() - data.get("updated_at", 0))
        yield GaugeMetricFamily("extproxy_shadow_lag_seconds", "Age of the last call the shadow process took up.",
                                value=data.get("lag_seconds", 0.0))


COLLECTOR = ShadowCollector()
metrics.REGISTRY.register(COLLECTOR)
