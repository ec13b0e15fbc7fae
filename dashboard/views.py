"""Dashboard pages and the feed's JSON history (login and the view_calls permission required).

Views stay thin: dashboard/queries.py reads the records; templates render them autoescaped
and page scripts set DOM text with textContent only. htmx requests for a page's fragment
(pagination of the node table and score matrix, the pending list's refresh) get the fragment.
"""
from __future__ import annotations

from typing import Any

from django.core.paginator import Paginator
from django.http import HttpResponseBadRequest, JsonResponse
from django.shortcuts import render
from django.utils import timezone

from extproxy.api.filters import VERDICTS
from extproxy.models import Outcome, Verb
from extproxy.redaction import url_without_password
from extproxy.roles import Perm, requires

from . import backend_stats, feed, queries, records
from .story import latest_per_backend

NODE_PAGE = 100
MAX_NODE_SEARCH = 253  # a node's name is a DNS subdomain: no longer than this


def node_search(request) -> str | HttpResponseBadRequest:
    """The node table's search (`?node=`, the pod page's and the call page's): a cluster's
    thousands of nodes are 100 a page, and the operator asks about one of them by name."""
    search = request.GET.get("node", "").strip()
    if len(search) > MAX_NODE_SEARCH:
        return HttpResponseBadRequest(f"node: at most {MAX_NODE_SEARCH} characters (a node's name is no longer)",
                                      content_type="text/plain")
    return search


def named_like(nodes: list[str], search: str) -> list[str]:
    """The nodes whose name contains `search`, in any case (all of them for no search)."""
    return [n for n in nodes if search.lower() in n.lower()] if search else nodes
SCORE_PAGE = 50


# Login (redirect to the login page), then the viewer permission (403 otherwise).
viewer_required = requires(Perm.VIEW_CALLS)


def _backends():
    from extproxy.engine import get_engine

    return get_engine().config.backends


@viewer_required
def live(request):
    context = {
        "verbs": Verb.values,
        "outcomes": Outcome.values,
        "backends": [b.name for b in _backends()] + ["combined"],
        "verdicts": [v for v, _ in VERDICTS],  # with node, as the API's `verdict`
        "filters": {k: request.GET.get(k, "") for k in FEED_FILTERS},
        "view": "calls" if request.GET.get("view") == "calls" else "attempts",
        "can_export": request.user.has_perm(Perm.EXPORT_CALLS),  # the export form under the filters
    }
    return render(request, "dashboard/live.html", context)


FEED_FILTERS = ("pod", "namespace", "verb", "backend", "outcome", "node", "verdict", "latency_above", "error")


def _feed(request, query, default_limit: int, max_limit: int) -> JsonResponse:
    """One feed query with the bar's filters, answered as {"results": [...]} or a 400 naming the bad filter."""
    try:
        limit = max(1, min(int(request.GET.get("limit") or default_limit), max_limit))
        results = query(request.GET, limit)
    except (feed.BadFilter, ValueError) as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    return JsonResponse({"results": results})


@viewer_required
def feed_calls(request):
    """History for the live feed with every filter of its bar: {"results": [call, ...]}."""
    return _feed(request, feed.feed_calls, 200, 1000)


@viewer_required
def feed_attempts(request):
    """The feed by scheduling attempt: {"results": [attempt, ...]} (filters as for calls, or keys=)."""
    return _feed(request, feed.feed_attempts, 100, 200)


@viewer_required
def feed_summary(request):
    return JsonResponse(feed.feed_summary())


def _page(request, items, per_page: int, param: str):
    return Paginator(items, per_page).get_page(request.GET.get(param))


@viewer_required
def pod(request, namespace: str, name: str):
    # namespace: "" for a pod without one (the URL's "-": urls.PodNamespace)
    attempts = queries.pod_attempts(namespace, name)
    selected = next((a for a in attempts if a.key == request.GET.get("attempt")), attempts[0] if attempts else None)
    search = node_search(request)
    if isinstance(search, HttpResponseBadRequest):
        return search
    context: dict[str, Any] = {"namespace": namespace, "name": name, "attempts": attempts, "selected": selected,
                               "node_search": search}
    if selected is not None:
        calls = queries.attempt_calls([selected.key], requests=True).get(selected.key, selected.calls)
        filters = latest_per_backend(calls, "filter")
        prioritizes = latest_per_backend(calls, "prioritize")
        nodes, node_backends, verdicts = queries.node_verdicts(filters)
        score_backends, score_rows = queries.score_matrix(prioritizes)
        events = queries.scheduler_events([(namespace, name)]).get((namespace, name), [])
        story = queries.story_of(calls, events)
        bound = story.node if story.state == "bound" else None
        matching = named_like(nodes, search)
        node_page = _page(request, matching, NODE_PAGE, "page")
        context.update(
            story=story,
            watching=queries._watching(),
            events=events[-20:][::-1],
            node_backends=node_backends,
            node_page=node_page,
            node_rows=[
                {"node": n, "cells": [verdicts[n].get(b) for b in node_backends]} for n in node_page.object_list
            ],
            summary=queries.reason_summary(filters),
            score_backends=score_backends,
            score_page=_page(request, score_rows, SCORE_PAGE, "spage"),
            bound=bound,
            labels=queries.pod_labels(filters + prioritizes),
            node_total=len(nodes),
            node_matching=len(matching),
            unreadable=records.unreadable_requests(calls),
        )
    fragments = {"node-table": "dashboard/_node_table.html", "score-matrix": "dashboard/_score_matrix.html"}
    if request.htmx and request.htmx.target in fragments and selected is not None:
        return render(request, fragments[request.htmx.target], context)
    from .record_status import DROPS_WINDOW, recent_drops

    if attempts:  # calls dropped meanwhile may have been this pod's: the page says so
        context["earliest_shown"] = min(a.started_at for a in attempts)
        context["dropped_since_earliest"] = recent_drops(context["earliest_shown"])
    else:  # why a pod may have no calls: the scheduler's events, and the last hour's drops
        context.update(events=queries.scheduler_events([(namespace, name)]).get((namespace, name), [])[-20:][::-1],
                       watching=queries._watching(), dropped_lately=recent_drops(timezone.now() - DROPS_WINDOW))
    return render(request, "dashboard/pod.html", context)


def record_status(request):
    """The warnings above every page (record_status.py), for their refresh in place. A page
    whose session ended, or whose user lost the permission, is reloaded (htmx would put the
    login page or the 403 inside it); other requests get the usual redirect or 403."""
    from django_htmx.http import HttpResponseClientRefresh

    if request.htmx and not request.user.has_perm(Perm.VIEW_CALLS):
        return HttpResponseClientRefresh()
    return _record_status(request)


@viewer_required
def _record_status(request):
    from .record_status import record_status as current

    return render(request, "dashboard/_record_status.html", {"status": current()})


record_status.required_permission = Perm.VIEW_CALLS  # type: ignore[attr-defined]  # checked above, and by _record_status


@viewer_required
def backends(request):
    try:
        minutes = max(1, min(int(request.GET.get("minutes") or 60), 24 * 60))
    except ValueError:
        minutes = 60
    configured = {b.name: b for b in _backends()}
    series = backend_stats.backend_series(minutes)
    findings = backend_stats.backend_findings()
    names = list(configured) + sorted({s["backend"] for s in series} - set(configured))
    for s in series:  # p99 as a fraction of the backend's httpTimeout: how close to failing
        timeout = configured[s["backend"]].http_timeout * 1000 if s["backend"] in configured else None
        s["timeout_ms"] = timeout
        s["p99_of_timeout"] = round(s["p99"] / timeout, 3) if timeout and s["p99"] is not None else None
        s["error_pct"] = round(100 * s["errors"] / s["calls"], 2) if s["calls"] else None
        s["timeout_pct"] = round(100 * s["timeouts"] / s["calls"], 2) if s["calls"] else None
    from .rollup import UPPER_EDGES_MS
    from .rollup_health import rollup_behind

    chart_data = {
        "series": series,
        "timeouts": {name: b.http_timeout * 1000 for name, b in configured.items()},
        "edges": [round(e, 4) for e in UPPER_EDGES_MS],
    }
    rows = [
        {
            "name": name,
            "config": configured.get(name),
            # the URL as shown: a password in it (Basic auth to the backend) is not for any role
            "url": url_without_password(configured[name].url_prefix) if name in configured else "",
            "series": [s for s in series if s["backend"] == name],
            "findings": findings.get(name, []),
        }
        for name in names
    ]
    return render(
        request,
        "dashboard/backends.html",
        {"rows": rows, "series": series, "chart_data": chart_data, "minutes": minutes, "windows": (15, 60, 360, 1440),
         "rollup_behind": rollup_behind()},
    )


@viewer_required
def pending(request):
    pods = queries.pending_pods()
    minutes = int(queries.pending_window().total_seconds() // 60)
    context = {"pods": pods, "groups": queries.pending_groups(pods), "window": f"{minutes} minutes"}
    if request.htmx:
        return render(request, "dashboard/_pending_list.html", context)
    return render(request, "dashboard/pending.html", context)
