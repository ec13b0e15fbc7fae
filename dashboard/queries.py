"""What the dashboard pages read from the call records: feed filters, a pod's attempts, the
per-node and score tables, backend statistics and findings, pending pods.

Read-only: the recorder is the only writer. Decisions are one compressed blob per call, so
anything per node decodes the blobs of the few calls a page shows, never of a whole range.
Results are plain dicts and lists for the templates (autoescaped) and for JSON.
"""
from __future__ import annotations

import json
from collections import Counter, OrderedDict, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import DurationField, ExpressionWrapper, F, Q, QuerySet
from django.utils import timezone

from extproxy.api.filters import filter_calls
from extproxy.models import Call
from extproxy.recorder import restore_body

BODIES = ("request_body", "response_body", "decisions_blob")
NODE_SCAN_LIMIT = 20_000  # calls looked at to answer a node filter


class BadFilter(ValueError):
    pass


# --- the live feed's history -------------------------------------------------------------


def feed_queryset(params) -> QuerySet:
    """The API's filters plus what only the dashboard offers: latency above, error text, ids."""
    from rest_framework.exceptions import ValidationError

    try:
        queryset = filter_calls(Call.objects.all(), params)
    except ValidationError as exc:
        raise BadFilter(json.dumps(exc.detail)) from None
    if params.get("latency_above"):
        try:
            ms = float(params["latency_above"])
        except ValueError:
            raise BadFilter("latency_above: expected milliseconds, e.g. 250") from None
        duration = ExpressionWrapper(F("finished_at") - F("started_at"), output_field=DurationField())
        queryset = queryset.annotate(duration=duration).filter(duration__gt=timedelta(milliseconds=ms))
    if params.get("error"):
        queryset = queryset.filter(error__icontains=params["error"])
    if params.get("ids"):
        try:
            ids = [int(i) for i in params["ids"].split(",") if i][:1000]
        except ValueError:
            raise BadFilter("ids: expected a comma-separated list of call ids") from None
        queryset = queryset.filter(id__in=ids)
    return queryset.order_by("-started_at", "-id")


def feed_calls(params, limit: int) -> list[dict]:
    queryset = feed_queryset(params)
    node = params.get("node")
    if not node:
        return [c.to_json() for c in queryset.defer(*BODIES)[:limit]]
    found: list[dict] = []
    for call in queryset.defer("request_body", "response_body")[:NODE_SCAN_LIMIT].iterator(chunk_size=500):
        if any(d.get("node") == node for d in call.decisions()) or _bound_node(call) == node:
            found.append(call.to_json())
            if len(found) >= limit:
                break
    return found


def _bound_node(call: Call) -> str | None:
    if call.verb != "bind":
        return None
    call = Call.objects.only("request_body").get(pk=call.pk) if "request_body" in call.get_deferred_fields() else call
    try:
        return json.loads(restore_body(bytes(call.request_body), lambda refs: {})).get("Node")
    except (ValueError, AttributeError):
        return None


# --- a pod's attempts ----------------------------------------------------------------------


@dataclass
class Attempt:
    key: str
    calls: list[Call] = field(default_factory=list)

    @property
    def started_at(self) -> datetime:
        return min(c.started_at for c in self.calls)

    @property
    def finished_at(self) -> datetime:
        return max(c.finished_at for c in self.calls)

    def timeline(self) -> list[dict]:
        """Each call with its offset and length as percentages of the attempt, for bars."""
        span = max((self.finished_at - self.started_at).total_seconds(), 1e-6)
        rows = []
        for c in sorted(self.calls, key=lambda c: (c.started_at, c.id)):
            offset = (c.started_at - self.started_at).total_seconds()
            length = (c.finished_at - c.started_at).total_seconds()
            rows.append(
                {
                    "call": c,
                    "offset_ms": round(offset * 1000, 1),
                    "duration_ms": round(length * 1000, 1),
                    "left": round(offset / span * 100, 2),
                    "width": max(round(length / span * 100, 2), 0.5),
                }
            )
        return rows

    @property
    def bound(self) -> bool:
        return any(c.verb == "bind" and c.outcome == "ok" for c in self.calls)


def pod_attempts(namespace: str, name: str, limit: int = 500) -> list[Attempt]:
    """The pod's most recent attempts, newest first (calls without an attempt stand alone)."""
    calls = Call.objects.filter(pod_namespace=namespace, pod_name=name).defer(*BODIES)[:limit]
    attempts: OrderedDict[str, Attempt] = OrderedDict()
    for call in calls:
        key = call.attempt or f"call-{call.id}"
        attempts.setdefault(key, Attempt(key)).calls.append(call)
    return list(attempts.values())


def latest_per_backend(calls: list[Call], verb: str) -> list[Call]:
    """The last call of `verb` per backend, in the order the scheduler made them."""
    last: dict[str, Call] = {}
    for c in sorted(calls, key=lambda c: (c.started_at, c.id)):
        if c.verb == verb:
            last[c.backend] = c
    return sorted(last.values(), key=lambda c: (c.started_at, c.id))


def with_bodies(calls: list[Call]) -> list[Call]:
    ids = [c.id for c in calls]
    found = {c.id: c for c in Call.objects.filter(id__in=ids).defer("response_body")}
    return [found[i] for i in ids if i in found]


def node_verdicts(filter_calls_: list[Call]) -> tuple[list[str], list[str], dict[str, dict]]:
    """(nodes in request order, backends, {node: {backend: decision}}) of an attempt's filters."""
    nodes: OrderedDict[str, dict] = OrderedDict()
    backends: list[str] = []
    for call in filter_calls_:
        for d in call.decisions():
            backend = d.get("backend") or call.backend
            if backend not in backends:
                backends.append(backend)
            nodes.setdefault(d["node"], {})[backend] = d
    return list(nodes), backends, nodes


def reason_summary(filter_calls_: list[Call]) -> list[dict]:
    """Per backend, like the scheduler's FailedScheduling message: "p/n passed: k reason, ..."."""
    per_backend: OrderedDict[str, dict] = OrderedDict()
    for call in filter_calls_:
        for d in call.decisions():
            backend = d.get("backend") or call.backend
            entry = per_backend.setdefault(backend, {"backend": backend, "total": 0, "passed": 0, "reasons": Counter()})
            entry["total"] += 1
            if d["result"] == "passed":
                entry["passed"] += 1
            else:
                entry["reasons"][d.get("reason") or "(no reason given)"] += 1
                entry.setdefault("results", defaultdict(set))[d.get("reason") or "(no reason given)"].add(d["result"])
        if call.outcome != "ok" and not call.decisions():
            per_backend.setdefault(
                call.backend, {"backend": call.backend, "total": call.node_count, "passed": 0, "reasons": Counter()}
            )["reasons"][call.error or call.outcome] += call.node_count or 1
    out = []
    for entry in per_backend.values():
        results = entry.pop("results", {})
        reasons = [  # one line per reason, as the scheduler counts them
            {"result": ", ".join(sorted(results.get(reason, {"error"}))), "reason": reason, "count": count}
            for reason, count in sorted(entry["reasons"].items())
        ]
        text = ", ".join(f"{r['count']} {r['reason']}" for r in reasons)
        message = f"{entry['passed']}/{entry['total']} nodes are available"
        out.append(dict(entry, reasons=reasons, message=f"{message}: {text}." if text else f"{message}."))
    return out


def score_matrix(prioritize_calls: list[Call]) -> tuple[list[str], list[dict]]:
    """(backends, rows sorted by rank): per node each backend's raw and weighted score, total."""
    backends: list[str] = []
    rows: OrderedDict[str, dict] = OrderedDict()
    for call in prioritize_calls:
        for d in call.decisions():
            if d["result"] != "scored":
                continue
            backend = d.get("backend") or call.backend
            if backend not in backends:
                backends.append(backend)
            row = rows.setdefault(d["node"], {"node": d["node"], "scores": {}, "total": 0})
            row["scores"][backend] = {"score": d.get("score"), "weighted": d.get("weighted_score")}
            row["total"] += d.get("weighted_score") or 0
    ordered = sorted(rows.values(), key=lambda r: (-r["total"], r["node"]))
    for i, row in enumerate(ordered):  # equal totals share a rank ("1, 1, 3")
        row["rank"] = ordered[i - 1]["rank"] if i and ordered[i - 1]["total"] == row["total"] else i + 1
        row["cells"] = [row["scores"].get(b) for b in backends]
    return backends, ordered


def pod_labels(calls: list[Call]) -> dict[str, str]:
    """The pod's labels as the newest of these (filter or prioritize) requests carried them."""
    for call in sorted(calls, key=lambda c: (c.started_at, c.id), reverse=True):
        try:
            pod = json.loads(restore_body(bytes(call.request_body), lambda refs: {})).get("Pod") or {}
        except (ValueError, AttributeError):
            continue
        labels = (pod.get("metadata") or {}).get("labels")
        if isinstance(labels, dict):
            return {str(k): str(v) for k, v in labels.items()}
    return {}


def bound_node(calls: list[Call]) -> str | None:
    for call in sorted(calls, key=lambda c: (c.started_at, c.id), reverse=True):
        if call.verb == "bind" and call.outcome == "ok":
            return _bound_node(call)
    return None


# --- backends ------------------------------------------------------------------------------


def _percentile(sorted_values: list[float], p: float) -> float | None:
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, max(0, int(round(p / 100 * len(sorted_values) + 0.5)) - 1))
    return round(sorted_values[index], 3)


def backend_series(minutes: int, buckets: int = 30, row_limit: int = 300_000) -> list[dict]:
    """Per backend and verb: calls/s, error and timeout rates, p50/p90/p99 (ms) per time bucket."""
    now = timezone.now()
    since = now - timedelta(minutes=minutes)
    width = minutes * 60 / buckets
    rows = (
        Call.objects.filter(started_at__gte=since)
        .order_by("-started_at")
        .values_list("backend", "verb", "started_at", "finished_at", "outcome")[:row_limit]
    )
    grouped: dict[tuple[str, str], list[list[tuple[float, str]]]] = defaultdict(lambda: [[] for _ in range(buckets)])
    for backend, verb, started, finished, outcome in rows:
        index = min(buckets - 1, int((started - since).total_seconds() // width))
        grouped[(backend, verb)][index].append(((finished - started).total_seconds() * 1000, outcome))
    series = []
    for (backend, verb), slots in sorted(grouped.items()):
        points = []
        for i, slot in enumerate(slots):
            latencies = sorted(ms for ms, _ in slot)
            n = len(slot)
            points.append(
                {
                    "t": round(since.timestamp() + (i + 1) * width, 3),
                    "rate": round(n / width, 4),
                    "error_rate": round(sum(1 for _, o in slot if o == "error") / n, 4) if n else None,
                    "timeout_rate": round(sum(1 for _, o in slot if o == "timeout") / n, 4) if n else None,
                    "p50": _percentile(latencies, 50),
                    "p90": _percentile(latencies, 90),
                    "p99": _percentile(latencies, 99),
                }
            )
        total = sum(len(s) for s in slots)
        everything = sorted(ms for s in slots for ms, _ in s)
        series.append(
            {
                "backend": backend,
                "verb": verb,
                "calls": total,
                "rate": round(total / (minutes * 60), 3),
                "errors": sum(1 for s in slots for _, o in s if o == "error"),
                "timeouts": sum(1 for s in slots for _, o in s if o == "timeout"),
                "p50": _percentile(everything, 50),
                "p90": _percentile(everything, 90),
                "p99": _percentile(everything, 99),
                "points": points,
            }
        )
    return series


def backend_findings(scan: int = 5000, examples: int = 3) -> dict[str, list[dict]]:
    """Per backend: each kind of contract finding with its count and a few example calls.

    Besides the recorder's findings, non-200 answers (with their bodies, kept in `error`) and
    `Error` texts under a 200 count as findings here.
    """
    problems = Q(outcome="error") | (Q(http_status__isnull=False) & ~Q(http_status=200)) | ~Q(findings=[])
    calls = (
        Call.objects.filter(problems)
        .order_by("-started_at", "-id")
        .only("id", "verb", "backend", "pod_namespace", "pod_name", "attempt", "started_at", "outcome",
              "http_status", "error", "findings")[:scan]
    )
    found: dict[str, OrderedDict[str, dict]] = defaultdict(OrderedDict)
    for call in calls:
        kinds = [(f.get("kind", "?"), f.get("detail", "")) for f in call.findings or []]
        if call.http_status not in (None, 200):
            # The body of a non-200 answer is kept in `error`: show it with the finding.
            kinds = [(k, f"{d}: {call.error}" if k == "non-200" else d) for k, d in kinds]
            if not any(k == "non-200" for k, _ in kinds):
                kinds.append(("non-200", call.error))
        elif call.http_status == 200 and call.outcome == "error" and not kinds:
            kinds.append(("error-under-200", call.error))
        for kind, detail in kinds:
            entry = found[call.backend].setdefault(kind, {"kind": kind, "count": 0, "examples": []})
            entry["count"] += 1
            if len(entry["examples"]) < examples:
                entry["examples"].append({"call": call, "detail": detail})
    return {backend: list(kinds.values()) for backend, kinds in found.items()}


# --- pending pods --------------------------------------------------------------------------


def pending_pods(scan: int = 20_000, limit: int = 200) -> list[dict]:
    """Pods whose latest attempt left no feasible node (and did not bind), newest first."""
    recent = Call.objects.order_by("-started_at", "-id").defer(*BODIES)[:scan]
    latest: OrderedDict[tuple[str, str], str] = OrderedDict()  # pod -> its newest attempt key
    attempts: dict[str, list[Call]] = defaultdict(list)
    for call in recent:
        if not call.pod_name:
            continue
        pod = (call.pod_namespace, call.pod_name)
        key = call.attempt or f"call-{call.id}"
        latest.setdefault(pod, key)
        if latest[pod] == key:
            attempts[key].append(call)
    pending: list[dict] = []
    for (namespace, name), key in latest.items():
        calls = attempts[key]
        filters = latest_per_backend(calls, "filter")
        blocked = [c for c in filters if c.node_count and (c.passed_count == 0 or c.outcome != "ok")]
        if not blocked or any(c.verb == "bind" and c.outcome == "ok" for c in calls):
            continue
        pending.append({"namespace": namespace, "name": name, "attempt": key, "calls": calls, "filters": filters})
        if len(pending) >= limit:
            break
    for entry in pending:
        entry["summary"] = reason_summary(with_bodies(entry.pop("filters")))
        entry["last_seen"] = max(c.finished_at for c in entry["calls"])
    return pending
