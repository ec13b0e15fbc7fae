"""What the dashboard pages read from the call records: a pod's attempts, the per-node and
score tables, the story of an attempt, pending pods. (The live feed's history: feed.py; the
backends page's statistics: backend_stats.py.)

Read-only: the recorder is the only writer. Decisions are one compressed blob per call, so
anything per node decodes the blobs of the few calls a page shows, never of a whole range.
Results are plain dicts and lists for the templates (autoescaped) and for JSON.
"""
from __future__ import annotations

from collections import Counter, OrderedDict, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from extproxy.api.bodies import MAX_ID
from extproxy.models import BackendCall, Call

from . import records, story

BODIES = ("request_body", "response_body", "decisions_blob")


def _bound_node(call: Call) -> str | None:
    if call.verb != "bind":
        return None
    if hasattr(call, "bound_to"):  # read with its attempt (attempt_calls)
        return call.bound_to
    if "request_body" in call.get_deferred_fields():
        call = Call.objects.only("request_body").get(pk=call.pk)
    return records.bind_node(records.read_request(call)[0])


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
        for d in records.decisions_of(call):
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
        for d in records.decisions_of(call):
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
    """(backends, rows sorted by rank): per node each backend's raw and weighted score, total.

    The total is what the scheduler adds: each call's answer. A combined call's parts are shown
    beside it, as the terms of its answer, and not added again."""
    backends: list[str] = []
    rows: OrderedDict[str, dict] = OrderedDict()
    for call in prioritize_calls:
        for d in records.decisions_of(call):
            if d["result"] != "scored":
                continue
            backend = d.get("backend") or call.backend
            if backend not in backends:
                backends.append(backend)
            row = rows.setdefault(d["node"], {"node": d["node"], "scores": {}, "total": 0})
            row["scores"][backend] = {"score": d.get("score"), "weighted": d.get("weighted_score")}
            if backend == call.backend:  # a combined call's parts are its answer's terms, not more of it
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
        labels = records.pod_labels(records.read_request(call)[0])
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
            binds[id_].bound_to = records.bind_node(records.envelope(body))
    return found


# --- backends ------------------------------------------------------------------------------


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
            pod = records.read_request(call)[0].get("Pod")
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
