"""Dashboard pages of replays: start a batch, list runs; one run with live progress, counts by
kind of change and each call's diff; the shadow backends' live diff against their primaries.
(The call page, with its replay button, is dashboard/call_page.py.) Rendering is autoescaped.
"""
from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.http import HttpResponseBadRequest
from django.shortcuts import redirect, render
from rest_framework.exceptions import NotFound, ValidationError

from extproxy.api.bodies import MAX_ID, object_or_404
from extproxy.models import Call, Outcome, ReplayItem, ReplayRun, Verb
from extproxy.replay.paging import NOT_REPLAYED, ids_of_kind, listed_up_to, listing_total
from extproxy.replay.stored import item_diff, summary
from extproxy.replay.targets import TargetError, load_rules
from extproxy.roles import Perm, requires

replay_required = requires(Perm.REPLAY_CALLS)


# --- replays ---------------------------------------------------------------------------------

TARGET_FIELDS = {"filter_verb": "filterVerb", "prioritize_verb": "prioritizeVerb", "preempt_verb": "preemptVerb",
                 "bind_verb": "bindVerb", "weight": "weight", "http_timeout": "httpTimeout", "replaces": "replaces"}
FILTER_FIELDS = ("since", "until", "backend", "verb", "outcome", "namespace", "pod")
ITEMS_SHOWN = 200


MAX_RULES_TEXT = 64 * 1024  # characters of policy rules posted from the form


def _target_from_form(post) -> dict[str, Any]:
    kind = post.get("target_kind") or "configured"
    target: dict[str, Any] = {"kind": kind}
    if kind == "url":
        target["url"] = post.get("url", "")
    elif kind == "policy":
        if post.get("rules", "").strip():
            if len(post["rules"]) > MAX_RULES_TEXT:
                raise ValidationError({"rules": f"at most {MAX_RULES_TEXT} characters"})
            try:
                target["rules"] = load_rules(post["rules"])  # aliases refused (as the command's --rules)
            except TargetError as exc:
                raise ValidationError({"rules": str(exc)}) from None
        else:
            target["policy"] = post.get("policy", "")
    for field, key in TARGET_FIELDS.items():
        value = post.get(field, "").strip()
        if value:
            target[key] = _number(value) if key == "weight" else value
    if post.get("node_cache_capable") in ("true", "false"):
        target["nodeCacheCapable"] = post["node_cache_capable"] == "true"
    return target


def _number(value: str) -> int | str:
    """An ASCII integer as int; anything else as given, for the target check to refuse with the
    field's name (str.isdigit() takes '²', which int() does not: that was a 500)."""
    digits = value[1:] if value.startswith("-") else value
    return int(value) if digits.isascii() and digits.isdecimal() else value


def _start_from_form(request, data: dict[str, Any]) -> ReplayRun | dict:
    """The run started, or what was wrong ({field: problem})."""
    from extproxy.api.replays import start

    try:
        data = dict(data, target=_target_from_form(request.POST), allow_bind=bool(request.POST.get("allow_bind")))
        run, status = start(data, request.user, request)
    except (ValidationError, NotFound) as exc:  # NotFound: the call to replay is gone (pruned)
        detail = exc.detail if isinstance(exc.detail, dict) else {"replay": exc.detail}
        return {field: _plain(problem) for field, problem in detail.items()}
    if status == 429:
        return {"busy": run.error}
    return run


def _plain(detail: Any) -> str:
    """A DRF error detail (a message, or a list or mapping of them) as the words it holds: the
    refused page would show the reprs of ErrorDetail objects otherwise."""
    if isinstance(detail, dict):
        return "; ".join(f"{field}: {_plain(problem)}" for field, problem in detail.items())
    if isinstance(detail, list):
        return " ".join(_plain(problem) for problem in detail)
    return str(detail)


@replay_required
def replays(request):
    if request.method == "POST":
        data: dict[str, Any]
        if "call" in request.POST:  # one call, from its page: done before answering
            data = {"call": _number(request.POST["call"].strip()), "wait": True}  # not a number: "call" refused
        else:
            filters = {k: request.POST[k] for k in FILTER_FIELDS if request.POST.get(k, "").strip()}
            data = {"filters": filters}
            try:
                data["rate"] = float(request.POST.get("rate") or 20)
            except ValueError:
                data["rate"] = -1.0  # refused by the rate check, with its message
        run = _start_from_form(request, data)
        if not isinstance(run, ReplayRun):
            return render(request, "dashboard/replay_refused.html", {"errors": run}, status=400)
        return redirect("dashboard:replay", pk=run.pk)
    context = {
        "runs": ReplayRun.objects.select_related("created_by")[:50],
        "verbs": Verb.values, "outcomes": Outcome.values,
    }
    return render(request, "dashboard/replays.html", context)


@replay_required
def replay(request, pk: int):
    run = object_or_404(ReplayRun, pk=pk)
    if request.method == "POST" and "cancel" in request.POST:  # the page's Cancel button (CSRF-checked)
        from extproxy.api.replays import cancel

        cancel(run, request.user, request)  # a run that has just ended: the page shows how
        return redirect("dashboard:replay", pk=run.pk)
    running = run.status in ("queued", "running")
    if request.htmx and request.htmx.target == "progress":  # the poll: the run's row is all it shows
        response = render(request, "dashboard/_replay_progress.html",
                          {"run": run, "counts": sorted(run.counts.items()), "running": running})
        if not running:
            response["HX-Refresh"] = "true"  # finished: reload once for the whole list of calls
        return response
    not_replayed = bool(request.GET.get("errors"))  # the calls that could not be replayed, from the error count's link
    kind = NOT_REPLAYED if not_replayed else request.GET.get("kind", "")
    offset_text = request.GET.get("offset") or "0"
    if not (offset_text.isascii() and offset_text.isdecimal() and int(offset_text) <= MAX_ID):
        return HttpResponseBadRequest(f"offset: a whole number from 0 to {MAX_ID}", content_type="text/plain")
    offset = int(offset_text)
    items = run.items.filter(changed=True) if kind or request.GET.get("changed") else run.items.all()
    total = listing_total(run, kind, bool(request.GET.get("changed")))  # a page lists no more (paging.py)
    if kind:
        shown = _rows(run.items.filter(id__in=ids_of_kind(run.pk, kind, offset, listed_up_to(total, offset, ITEMS_SHOWN))))
    else:
        shown = _rows(items[offset : offset + listed_up_to(total, offset, ITEMS_SHOWN)])
    query = {k: request.GET[k] for k in ("kind", "changed", "errors") if request.GET.get(k)}
    page = {"first": offset + 1, "last": offset + len(shown), "total": total, "paged": offset > 0 or total > len(shown),
            "previous": urlencode(dict(query, offset=max(0, offset - ITEMS_SHOWN))) if offset else "",
            "next": urlencode(dict(query, offset=offset + ITEMS_SHOWN)) if offset + len(shown) < total else ""}
    context = {"run": run, "items": shown, "kind": "" if not_replayed else kind, "not_replayed": not_replayed,
               "counts": sorted(run.counts.items()), "page": page, "running": running}
    return render(request, "dashboard/replay.html", context)


def _rows(items) -> list[dict]:
    """The page's rows: each call with the summary of its diff. The node changes (up to
    diff.MAX_NODE_CHANGES a call) are not on the page: a page of 200 changed calls was megabytes
    of them; the row loads its own when opened (replay_item)."""
    items = list(items)
    originals = [item.original_id for item in items if item.original_id]
    # Each row names its call (verb, backend, pod): without them a developer opened every changed
    # call to learn whose decision it was. One query for the page's calls, bodies left out.
    calls = {c["pk"]: c for c in Call.objects.filter(pk__in=originals).values(
        "pk", "form", "verb", "backend", "pod_namespace", "pod_name")} if originals else {}
    rows = []
    for item in items:
        call = calls.get(item.original_id)
        combined = None if call is None else call["form"] == "combined"
        rows.append({"item": item, "call": call, "diff": summary(item_diff(item), combined)})
    return rows


@replay_required
def replay_item(request, pk: int, item: int):
    """One call's node changes: the fragment its row on the run page loads when opened, or a
    page of its own when followed as a link (no script)."""
    row = object_or_404(ReplayItem, pk=item, run_id=pk)
    diff = item_diff(row) or {}
    context = {"run_id": pk, "item": row, "nodes": diff.get("nodes") or [], "more_nodes": diff.get("more_nodes") or 0}
    if request.htmx:
        return render(request, "dashboard/_replay_nodes.html", context)
    return render(request, "dashboard/replay_item.html", context)


@requires(Perm.VIEW_CALLS)
def shadows(request):
    """The shadow backends' live diff against their primaries (refreshed by htmx)."""
    from extproxy.engine import get_engine
    from extproxy.shadowstats import current_stats, serving_root

    config = get_engine().config
    figures = current_stats(serving_root(), [(s.name, s.shadow_of) for s in config.shadows])
    context = {"stats": figures["results"], "process": figures["process"]}
    if request.htmx:
        return render(request, "dashboard/_shadows.html", context)
    return render(request, "dashboard/shadows.html", context)
