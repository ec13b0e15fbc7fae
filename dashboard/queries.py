"""What the dashboard pages read from the call records: feed filters, a pod's attempts, the
per-node and score tables, backend statistics and findings, pending pods.

Read-only: the recorder is the only writer. Decisions are one compressed blob per call, so
anything per node decodes the blobs of the few calls a page shows, never of a whole range.
Results are plain dicts and lists for the templates (autoescaped) and for JSON.
"""
from __future__ import annotations

import json
import math
from collections import Counter, OrderedDict, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import DurationField, ExpressionWrapper, F, Q, QuerySet
from django.utils import timezone

from extproxy.api.bodies import MAX_ID
from extproxy.api.filters import filter_calls
from extproxy.models import BackendCall, Call

from . import records, story

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
    if hasattr(call, "bound_to"):  # read with its attempt (attempt_calls)
        return call.bound_to
    if "request_body" in call.get_deferred_fields():
        call = Call.objects.only("request_body").get(pk=call.pk)
    return records.bind_node(call.request_body)


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
    calls = Call.objects.filter(pod_namespace=namespace, pod_name=name, is_replay=False).defer(*BODIES)[:limit]
    attempts: OrderedDict[str, Attempt] = OrderedDict()
    for call in calls:
        key = call.attempt or f"call-{call.id}"
        attempts.setdefault(key, Attempt(key)).calls.append(call)
    return list(attempts.values())


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


def reason_summary(filter_calls_: list[Call], backends: dict | None = None) -> list[dict]:
    """Per backend, like the scheduler's FailedScheduling message: "p/n nodes are available: k reason".

    A call that failed has no verdicts to count: it is shown as the scheduler takes it, skipped
    when its backend is ignorable, the attempt's error otherwise, never as n rejections.
    """
    backends = configured_backends() if backends is None else backends
    per_backend: OrderedDict[str, dict] = OrderedDict()
    for call in filter_calls_:
        if call.outcome != "ok" and call.form != "combined":
            ignorable = getattr(backends.get(call.backend), "ignorable", False)
            what = "skipped (ignorable)" if ignorable else "failed the attempt"
            per_backend[call.backend] = {"backend": call.backend, "total": call.node_count, "passed": None,
                                         "reasons": [], "message": f"{call.outcome}, {what}: {call.error or call.outcome}"}
            continue
        for d in call.decisions():
            backend = d.get("backend") or call.backend
            entry = per_backend.setdefault(backend, {"backend": backend, "total": 0, "passed": 0, "reasons": Counter()})
            entry["total"] += 1
            if d["result"] == "passed":
                entry["passed"] += 1
            else:
                entry["reasons"][d.get("reason") or "(no reason given)"] += 1
                entry.setdefault("results", defaultdict(set))[d.get("reason") or "(no reason given)"].add(d["result"])
    out = []
    for entry in per_backend.values():
        if "message" in entry:
            out.append(entry)
            continue
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
        if "request_body" in call.get_deferred_fields():
            continue
        labels = records.pod_labels(call.request_body)
        if labels is not None:
            return labels
    return {}


def bound_node(calls: list[Call]) -> str | None:
    for call in sorted(calls, key=lambda c: (c.started_at, c.id), reverse=True):
        if call.verb == "bind" and call.outcome == "ok":
            return _bound_node(call)
    return None


def attempt_calls(keys: list[str], requests: bool = False) -> dict[str, list[Call]]:
    """The calls of these attempts with their decisions and backend calls (bodies left out, but
    the stored requests with `requests`: Node objects stay references, so this stays cheap)."""
    found: dict[str, list[Call]] = defaultdict(list)
    wanted = [k for k in keys if not k.startswith("call-")]
    # A call id past the id column (64 bits) names no call, and SQLite cannot even be asked:
    # left out like any key without calls.
    singles = [int(k[5:]) for k in keys if k.startswith("call-") and k[5:].isascii() and k[5:].isdigit()]
    singles = [i for i in singles if 0 < i <= MAX_ID]
    queryset = Call.objects.filter(Q(attempt__in=wanted) | Q(id__in=singles))
    deferred = ("response_body",) if requests else ("request_body", "response_body")
    binds: dict[int, Call] = {}
    combined: dict[int, Call] = {}
    for call in queryset.defer(*deferred):
        found[call.attempt or f"call-{call.id}"].append(call)
        if call.verb == "bind" and not requests:
            binds[call.id] = call
        if call.form == "combined":
            call.children = []
            combined[call.id] = call
    # Backend calls only for combined calls (a prefetch would build a manager per call).
    for child in BackendCall.objects.filter(call_id__in=list(combined)).defer("request_body", "response_body"):
        combined[child.call_id].children.append(child)
    if binds:  # the node each bind names, in one query (bind requests are a few bytes)
        for id_, body in Call.objects.filter(id__in=list(binds)).values_list("id", "request_body"):
            binds[id_].bound_to = records.bind_node(body)
    return found


# --- backends ------------------------------------------------------------------------------


def histogram_percentile(counts: dict[int, int], p: float) -> float | None:
    """The upper edge of the latency bucket holding the p-th percentile (ms): "p99 ≤ x"."""
    from .rollup import UPPER_EDGES_MS

    total = sum(counts.values())
    if not total:
        return None
    rank = max(1, math.ceil(p / 100 * total))
    seen = 0
    for bucket in sorted(counts):
        seen += counts[bucket]
        if seen >= rank:
            return round(UPPER_EDGES_MS[bucket], 3)
    return None


def backend_series(minutes: int, slots: int = 30, now: datetime | None = None) -> list[dict]:
    """Per backend and verb over the last `minutes`: calls, calls/s, errors, timeouts, p50/p90/p99
    (ms, from the roll-up's log buckets), and per time slot the same plus the latency heatmap.

    Reads LatencyCell rows grouped in SQL: at most slots × buckets rows per backend and verb,
    whatever the number of recorded calls.
    """
    from django.db.models import IntegerField, Sum

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
        .annotate(n=Sum("calls"), e=Sum("errors"), t=Sum("timeouts")).order_by()
    )
    grouped: dict[tuple[str, str], dict] = {}
    for row in rows:
        entry = grouped.setdefault((row["backend"], row["verb"]), {"slots": defaultdict(lambda: defaultdict(int)),
                                                                    "errors": defaultdict(int),
                                                                    "timeouts": defaultdict(int)})
        entry["slots"][row["slot"]][row["bucket"]] += row["n"]
        entry["errors"][row["slot"]] += row["e"]
        entry["timeouts"][row["slot"]] += row["t"]
    series = []
    for (backend, verb), entry in sorted(grouped.items()):
        points: list[dict] = []
        heat: list[list[int]] = []
        overall: dict[int, int] = defaultdict(int)
        for i in range(count):
            hist = entry["slots"].get(i, {})
            n = sum(hist.values())
            for bucket, c in hist.items():
                overall[bucket] += c
                heat.append([i, bucket, c])
            points.append({
                "t": rollup.minute_start(first + (i + 1) * width).timestamp(),
                "rate": round(n / (width * 60), 4),
                "error_rate": round(entry["errors"][i] / n, 4) if n else None,
                "timeout_rate": round(entry["timeouts"][i] / n, 4) if n else None,
                "p50": histogram_percentile(hist, 50), "p90": histogram_percentile(hist, 90),
                "p99": histogram_percentile(hist, 99),
            })
        total = sum(overall.values())
        series.append({
            "backend": backend, "verb": verb, "calls": total, "rate": round(total / (minutes * 60), 3),
            "errors": sum(entry["errors"].values()), "timeouts": sum(entry["timeouts"].values()),
            "p50": histogram_percentile(overall, 50), "p90": histogram_percentile(overall, 90),
            "p99": histogram_percentile(overall, 99), "points": points, "heat": heat,
            "slot_seconds": width * 60,
        })
    return series


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
    recent = Call.objects.filter(is_replay=False).order_by("-started_at", "-id").values_list("id", flat=True)[:scan * 4]
    noted = list(Call.objects.filter(id__in=recent).exclude(outcome="error").exclude(findings=[]).only(*fields))
    calls = sorted(failed + noted, key=lambda c: (c.started_at, c.id), reverse=True)
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


# --- the pod's story and pending pods -------------------------------------------------------


def configured_backends() -> dict:
    from extproxy.engine import get_engine

    return {b.name: b for b in get_engine().config.backends}


def scheduler_events(pods: list[tuple[str, str]], since: datetime | None = None) -> dict[tuple[str, str], list]:
    """The scheduler's events and bindings seen through the API, per (namespace, name)."""
    from .models import SchedulerEvent

    found: dict[tuple[str, str], list] = defaultdict(list)
    if not pods:
        return found
    wanted = set(pods)
    # One IN per column (an OR of hundreds of pairs costs more to build than to run).
    events = SchedulerEvent.objects.filter(pod_name__in={n for _, n in pods}, pod_namespace__in={ns for ns, _ in pods})
    if since is not None:
        events = events.filter(at__gte=since)
    # The newest ones (a pod pending for days has thousands), in time order.
    for event in reversed(list(events.order_by("-at", "-id")[:200 * len(pods)])):
        if (event.pod_namespace, event.pod_name) in wanted:
            found[(event.pod_namespace, event.pod_name)].append(event)
    return found


def _watching() -> bool:
    from . import kubewatch

    return kubewatch.watching()


def story_of(calls: list[Call], events: list, backends: dict | None = None, now: datetime | None = None):
    backends = configured_backends() if backends is None else backends
    labels_pod = _pod_object(calls)
    return story.tell(calls, backends, events, now=now or timezone.now(), bound_node_of=_bound_node,
                      pod=labels_pod, watching=_watching())


def _pod_object(calls: list[Call]) -> dict | None:
    """The pod as a filter request carried it (for the binder's interest), when one is at hand."""
    for call in calls:
        if call.verb in ("filter", "prioritize") and "request_body" not in call.get_deferred_fields():
            pod = records.envelope(call.request_body).get("Pod")
            if isinstance(pod, dict):
                return pod
    return None


def pending_window() -> timedelta:
    # A pending pod is retried at least every 5 minutes (podMaxInUnschedulablePodsDuration), so
    # a pod with no attempt in this window is not waiting on the scheduler any more.
    from django.conf import settings

    return timedelta(minutes=getattr(settings, "EXTPROXY_PENDING_MINUTES", 15))


def pending_pods(limit: int = 300, now: datetime | None = None) -> list[dict]:
    """Pods whose last attempt did not end in a bind, grouped by the reason the scheduler gives.

    Candidates are bounded by time and trouble, never by scanning the table: pods with a filter
    that left no node or failed, a failed bind, or a FailedScheduling event in the window. Each
    candidate's newest attempt is then told by dashboard.story with the scheduler's rules, so an
    ignorable backend's failure or a later bind takes the pod off the list.
    """
    from django.db.models import OuterRef, Subquery

    from .models import SchedulerEvent

    now = now or timezone.now()
    since = now - pending_window()
    trouble = (Q(verb="filter") & (Q(passed_count=0) | ~Q(outcome="ok"))) | (Q(verb="bind") & ~Q(outcome="ok"))
    newest = Call.objects.filter(pod_namespace=OuterRef("pod_namespace"), pod_name=OuterRef("pod_name")).order_by(
        "-started_at", "-id")
    candidates = (
        Call.objects.filter(trouble, started_at__gte=since, is_replay=False).exclude(pod_name="")
        .values("pod_namespace", "pod_name").distinct()
        .annotate(last_attempt=Subquery(newest.values("attempt")[:1]), last_id=Subquery(newest.values("id")[:1]))
        .order_by()[:limit]
    )
    pods = {(c["pod_namespace"], c["pod_name"]): c["last_attempt"] or f"call-{c['last_id']}" for c in candidates}
    said = SchedulerEvent.objects.filter(at__gte=since, kind=SchedulerEvent.Kind.FAILED).values_list(
        "pod_namespace", "pod_name").distinct()[:limit]
    for namespace, name in said:
        if (namespace, name) not in pods:
            last = newest.model.objects.filter(pod_namespace=namespace, pod_name=name).order_by("-started_at", "-id")
            pods[(namespace, name)] = next((c.attempt or f"call-{c.id}" for c in last.only("id", "attempt")[:1]), "")
    calls = attempt_calls([k for k in pods.values() if k])
    events = scheduler_events(list(pods), since - timedelta(minutes=5))
    backends = configured_backends()
    pending = []
    for (namespace, name), key in pods.items():
        told = story_of(calls[key], events[(namespace, name)], backends, now) if calls.get(key) else None
        if told is None:
            said_last = events[(namespace, name)][-1:]
            if not said_last or said_last[0].kind != "FailedScheduling":
                continue
            told = story.Story(state="pending", sentence=f"Pending: the scheduler says: {said_last[0].message}",
                               group=story.fold_numbers(said_last[0].message), scheduler_says=said_last)
        if told.state != "pending":
            continue
        last_seen = max([c.finished_at for c in calls.get(key, [])] + [e.at for e in told.scheduler_says])
        pending.append({"namespace": namespace, "name": name, "attempt": key if calls.get(key) else "",
                        "story": told, "last_seen": last_seen})
    return pending


def pending_groups(pods: list[dict]) -> list[dict]:
    """Pending pods grouped by reason, the largest group first, newest pod first in each."""
    groups: dict[str, dict] = {}
    for pod in sorted(pods, key=lambda p: p["last_seen"], reverse=True):
        group = groups.setdefault(pod["story"].group, {"reason": pod["story"].sentence, "pods": []})
        group["pods"].append(pod)
    return sorted(groups.values(), key=lambda g: -len(g["pods"]))


# --- the feed by scheduling attempt ------------------------------------------------------------

ATTEMPT_SCAN = 3  # calls looked at per attempt asked for


def _iso(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


def attempt_to_json(key: str, calls: list[Call], told) -> dict:
    calls = sorted(calls, key=lambda c: (c.started_at, c.id))
    first = calls[0]
    return {
        "key": key,
        "pod": {"namespace": first.pod_namespace, "name": first.pod_name, "uid": first.pod_uid},
        "started_at": _iso(first.started_at),
        "finished_at": _iso(max(c.finished_at for c in calls)),
        "state": told.state,
        "sentence": told.sentence,
        "node": told.node,
        "steps": [
            {"verb": s.verb, "backend": s.backend, "call_id": s.call_id, "duration_ms": s.duration_ms,
             "outcome": s.outcome, "counted": s.counted, "detail": s.detail, "error": s.error[:500],
             "rejection": list(s.rejection) if s.rejection else None}
            for s in told.steps
        ],
        "calls": [c.id for c in calls],
    }


def feed_attempts(params, limit: int) -> list[dict]:
    """The newest attempts with a call matching the feed's filters (or the `keys` asked for),
    each told as the pod page tells it: chain, times, results, first rejection reasons."""
    if params.get("keys"):
        keys = [k for k in params["keys"].split(",") if k][:limit]
    else:
        keys = []
        for call in feed_queryset(params).only("id", "attempt")[: limit * ATTEMPT_SCAN]:
            key = call.attempt or f"call-{call.id}"
            if key not in keys:
                keys.append(key)
                if len(keys) >= limit:
                    break
    found = attempt_calls(keys)
    backends = configured_backends()
    now = timezone.now()
    out = []
    for key in keys:
        calls = found.get(key)
        if calls:
            told = story_of(calls, [], backends, now)
            out.append(attempt_to_json(key, calls, told))
    return out


_summary_cache: dict[str, tuple[float, Any]] = {}


def _cached(name: str, seconds: float, compute):
    import time

    hit = _summary_cache.get(name)
    if hit is not None and time.monotonic() - hit[0] < seconds:
        return hit[1]
    value = compute()
    _summary_cache[name] = (time.monotonic(), value)
    return value


def feed_summary(now: datetime | None = None, minutes: int = 5) -> dict:
    """The feed's band: attempts/s over the last minute, pods pending now, and per backend the
    calls, errors and timeouts of the last `minutes` (from the roll-up)."""
    from django.db.models import Count, Sum

    from . import rollup
    from .models import LatencyCell

    now = now or timezone.now()
    rollup.catch_up(max_rows=5000)
    attempts = (Call.objects.filter(started_at__gte=now - timedelta(seconds=60)).exclude(attempt="")
                .aggregate(n=Count("attempt", distinct=True))["n"])
    since = rollup.epoch_minute(now) - minutes + 1
    per_backend = (LatencyCell.objects.filter(minute__gte=since).values("backend")
                   .annotate(calls=Sum("calls"), errors=Sum("errors"), timeouts=Sum("timeouts")).order_by("backend"))
    pending = _cached("pending", 10.0, lambda: len(pending_pods()))
    return {
        "attempts_per_s": round(attempts / 60, 2),
        "pending": pending,
        "minutes": minutes,
        "backends": [dict(b) for b in per_backend],
    }
