"""What the backends page reads: per backend and verb, calls, rates, errors, timeouts and
latency percentiles from the roll-up (LatencyCell), and each backend's contract findings with
example calls.

Read-only, and bounded whatever the number of recorded calls: the roll-up's rows are grouped in
SQL, and findings come from the newest calls only.
"""
from __future__ import annotations

import math
from collections import OrderedDict, defaultdict
from datetime import datetime

from django.db.models import ExpressionWrapper, F, Q
from django.utils import timezone

from extproxy.models import BackendCall, Call


def histogram_percentile(counts: dict[int, int], p: float, slowest: dict[int, float] | None = None) -> float | None:
    """A bound on the p-th percentile (ms), "p99 ≤ x": the upper edge of the latency bucket that
    holds it, or the slowest call counted in that bucket where that is lower. Calls cut
    off at a backend's httpTimeout of 1.8 s fill the bucket up to 3,162 ms: its edge alone said
    158 % of the timeout."""
    from .rollup import UPPER_EDGES_MS

    total = sum(counts.values())
    if not total:
        return None
    rank = max(1, math.ceil(p / 100 * total))
    seen = 0
    for bucket in sorted(counts):
        seen += counts[bucket]
        if seen >= rank:
            return round(min(UPPER_EDGES_MS[bucket], (slowest or {}).get(bucket, UPPER_EDGES_MS[bucket])), 3)
    return None


def backend_series(minutes: int, slots: int = 30, now: datetime | None = None) -> list[dict]:
    """Per backend and verb over the last `minutes`: calls, calls/s, errors, timeouts, p50/p90/p99
    (ms, from the roll-up's log buckets), and per time slot the same plus the latency heatmap.

    Reads LatencyCell rows grouped in SQL: at most slots × buckets rows per backend and verb,
    whatever the number of recorded calls.
    """
    from django.db.models import IntegerField, Max, Sum

    from . import rollup
    from .models import LatencyCell

    rollup.catch_up(max_rows=5000)  # bounded: the roll-up thread does the rest
    now = now or timezone.now()
    last = rollup.epoch_minute(now)
    first = last - minutes + 1
    width = max(1, math.ceil(minutes / slots))  # minutes per slot
    count = math.ceil(minutes / width)
    slot = ExpressionWrapper((F("minute") - first) / width, output_field=IntegerField())
    rows = (
        LatencyCell.objects.filter(minute__gte=first).annotate(slot=slot)
        .values("backend", "verb", "slot", "bucket")
        .annotate(n=Sum("calls"), e=Sum("errors"), t=Sum("timeouts"), slow=Max("slowest_ms")).order_by()
    )
    grouped: dict[tuple[str, str], dict] = {}
    for row in rows:
        entry = grouped.setdefault((row["backend"], row["verb"]), {"slots": defaultdict(lambda: defaultdict(int)),
                                                                    "slowest": defaultdict(dict),
                                                                    "errors": defaultdict(int),
                                                                    "timeouts": defaultdict(int)})
        entry["slots"][row["slot"]][row["bucket"]] += row["n"]
        entry["slowest"][row["slot"]][row["bucket"]] = row["slow"]
        entry["errors"][row["slot"]] += row["e"]
        entry["timeouts"][row["slot"]] += row["t"]
    series = []
    for (backend, verb), entry in sorted(grouped.items()):
        points: list[dict] = []
        heat: list[list[int]] = []
        overall: dict[int, int] = defaultdict(int)
        overall_slowest: dict[int, float] = {}
        for i in range(count):
            hist = entry["slots"].get(i, {})
            slowest = entry["slowest"].get(i, {})
            n = sum(hist.values())
            for bucket, c in hist.items():
                overall_slowest[bucket] = max(overall_slowest.get(bucket, 0.0), slowest[bucket])
                overall[bucket] += c
                heat.append([i, bucket, c])
            points.append({
                "t": rollup.minute_start(first + (i + 1) * width).timestamp(),
                "rate": round(n / (width * 60), 4),
                "error_rate": round(entry["errors"][i] / n, 4) if n else None,
                "timeout_rate": round(entry["timeouts"][i] / n, 4) if n else None,
                "p50": histogram_percentile(hist, 50, slowest), "p90": histogram_percentile(hist, 90, slowest),
                "p99": histogram_percentile(hist, 99, slowest),
            })
        total = sum(overall.values())
        series.append({
            "backend": backend, "verb": verb, "calls": total, "rate": round(total / (minutes * 60), 3),
            "errors": sum(entry["errors"].values()), "timeouts": sum(entry["timeouts"].values()),
            "p50": histogram_percentile(overall, 50, overall_slowest),
            "p90": histogram_percentile(overall, 90, overall_slowest),
            "p99": histogram_percentile(overall, 99, overall_slowest), "points": points, "heat": heat,
            "slot_seconds": width * 60,
        })
    return series


# What the page shows of an example call (templates/dashboard/backends.html).
EXAMPLE_FIELDS = ("id", "verb", "pod_namespace", "pod_name", "attempt")


def backend_findings(scan: int = 1000, examples: int = 3) -> dict[str, list[dict]]:
    """Per backend: each kind of contract finding with its count and a few example calls.

    Besides the recorder's findings, non-200 answers (with their bodies, kept in `error`) and
    `Error` texts under a 200 count as findings here.
    """
    fields = ("id", "verb", "backend", "pod_namespace", "pod_name", "attempt", "started_at", "outcome",
              "http_status", "error", "findings")
    # Failed calls come from the (outcome, started_at) index; findings on calls that still
    # counted as ok only from the newest `scan` calls: both bounded whatever the table's size.
    failed = list(Call.objects.filter(outcome="error", is_replay=False).order_by("-started_at", "-id").only(*fields)[:scan])
    # The newest calls as a time range and a list of ids, not a subquery of their ids: PostgreSQL,
    # taking calls with findings for rare, read the whole table for them and then kept those among
    # the newest (every one of 250,000 rows). A range of the newest-first index it reads as such.
    recent = list(Call.objects.filter(is_replay=False).order_by("-started_at", "-id")
                  .values_list("id", "started_at")[:scan * 4])
    since = {"started_at__gte": recent[-1][1]} if len(recent) == scan * 4 else {}
    noted = list(Call.objects.filter(is_replay=False, **since).exclude(outcome="error").exclude(findings=[])
                 .only(*fields))
    calls = sorted(failed + noted, key=lambda c: (c.started_at, c.id), reverse=True)
    found: dict[str, OrderedDict[str, dict]] = defaultdict(OrderedDict)
    for call in calls:
        _note(found, call.backend, call, call, examples)
    # The combined form's backends answer in parts of `combined` calls: their findings are each
    # backend's own, under its name (the example links to the call the part belongs to).
    # Only what _note and the examples read: a full-object part and its call hold bodies of
    # ~100 kB each, and up to `scan` of both were loaded for nothing.
    parts = (BackendCall.objects.filter(call_id__in=[i for i, _ in recent]).filter(Q(outcome="error") | ~Q(findings=[]))
             .select_related("call").only("backend", "started_at", "outcome", "http_status", "error", "findings",
                                          *(f"call__{f}" for f in EXAMPLE_FIELDS))
             .order_by("-started_at", "-id")[:scan])
    for part in parts:
        _note(found, part.backend, part, part.call, examples)
    return {backend: list(kinds.values()) for backend, kinds in found.items()}


def _note(found: dict, backend: str, record, call: Call, examples: int) -> None:
    """Count `record`'s findings (a call, or a combined call's part) under `backend`."""
    kinds = [(f.get("kind", "?"), f.get("detail", "")) for f in record.findings or []]
    if record.http_status not in (None, 200):
        # The body of a non-200 answer is kept in `error`: show it with the finding.
        kinds = [(k, f"{d}: {record.error}" if k == "non-200" else d) for k, d in kinds]
        if not any(k == "non-200" for k, _ in kinds):
            kinds.append(("non-200", record.error))
    elif record.http_status == 200 and record.outcome == "error" and not kinds:
        kinds.append(("error-under-200", record.error))
    for kind, detail in kinds:
        entry = found[backend].setdefault(kind, {"kind": kind, "count": 0, "examples": []})
        entry["count"] += 1
        if len(entry["examples"]) < examples:
            entry["examples"].append({"call": call, "detail": detail})
