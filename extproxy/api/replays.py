"""API: replays. Starting and reading them needs the extproxy.replay_calls permission (the
developer role): a replay sends recorded requests to backends and any URL given.

    POST /api/replays/      {"call": id} | {"calls": [ids]} | {"pod": "ns/name"} | {"filters": {...}},
                            "target": {...} (replay/targets.py), "allow_bind": false, "rate": 20,
                            "wait": false (one call only: answer when done); a missing call is
                            a 404, a selection matching no call a 400; `calls` naming ids that
                            are not recorded calls a 404 naming them ("missing", at most 20),
                            unless "allow_missing": true (the others run; the answer names them)
    GET  /api/replays/      runs, newest first
    GET  /api/replays/<id>/ progress, counts by kind of change, items (?changed=1, ?kind= one kind of
                            change, ?errors=1 the calls that could not be replayed, ?offset=; a
                            page of 200, with items_total and items_next, the next page's offset
                            or null; a page lists no more than items_total, also while it runs)
    GET  /api/replays/<id>/items/<item>/   one item with its whole diff ("parts": null in a diff
                            stored before a combined call's parts were compared: not compared)
    POST /api/replays/<id>/cancel/   stop a queued or running run (between calls; audited);
                            409 when it has ended. GET: whether it can still be cancelled.
                            A run shows the ask in cancel_requested_by/_at (and in words in error)
    GET  /api/shadows/      the shadow backends' live diff against their primaries (any role)
"""
from __future__ import annotations

import json
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view, parser_classes, permission_classes
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.response import Response

from ..audit import Action, audit
from ..engine import get_engine
from ..models import ReplayItem, ReplayRun
from ..replay.runner import MAX_CALLS_PER_RUN, missing_calls, missing_words, run_replay, select_calls
from ..replay.cancel import request_cancel
from ..replay.paging import NOT_REPLAYED, ids_of_kind, listed_up_to, listing_total
from ..replay.stored import item_diff
from ..replay.targets import TargetError, check, standing_in_for_selected
from ..replay.worker import beating, get_worker
from ..roles import Perm
from ..timetext import iso_z
from .bodies import MAX_ID, TRUE, flag, object_or_404
from .parsers import BoundedJSONParser
from .permissions import needs

MAX_RATE = 200.0  # calls per second a run may ask for
DEFAULT_RATE = 20.0
MAX_RUN_SECONDS = 6 * 3600  # the longest a run may take at the rate it asks for
MAX_TARGET_BYTES = 64 * 1024  # a target (policy rules included) as stored and audited
ITEMS_PAGE = 200
MISSING_SHOWN = 20  # missing call ids named in an answer
FALSE = ("", "0", "false", "no", "off")
FILTER_KEYS = {"pod", "namespace", "pod_uid", "verb", "backend", "outcome", "attempt", "since", "until"}


CanReplay = needs(Perm.REPLAY_CALLS)  # starting and reading replays: the developer role


def run_to_json(run: ReplayRun) -> dict[str, Any]:
    return {
        "id": run.pk,
        "status": run.status,
        "created_at": iso_z(run.created_at),
        "created_by": run.created_by.username if run.created_by else None,
        "selector": run.selector,
        "target": run.shown_target,
        "allow_bind": run.allow_bind,
        "rate": run.rate,
        "total": run.total,
        "done": run.done,
        "changed": run.changed,
        "errors": run.errors,
        "skipped": run.skipped,
        "redacted": run.redacted,
        "counts": run.counts,
        "error": run.error or run.cancel_note,  # a cancel in words too, for clients that read only this
        "cancel_requested_by": run.cancel_requested_by or None,
        "cancel_requested_at": iso_z(run.cancel_requested_at),
        "url": f"/api/replays/{run.pk}/",
        "page": f"/replays/{run.pk}/",
    }


def item_to_json(item: ReplayItem, with_diff: bool = False) -> dict[str, Any]:
    data = {
        "id": item.pk,
        "original": item.original_id,
        "replay": item.replay_id,
        "changed": item.changed,
        "kinds": item.kinds,
        "error": item.error,
        "request_redacted": item.request_marks,
        "note": item.redaction_note,
        "links": {
            "original": f"/api/calls/{item.original_id}/" if item.original_id else None,
            "replay": f"/api/calls/{item.replay_id}/" if item.replay_id else None,
            "diff": f"/api/replays/{item.run_id}/items/{item.pk}/",
        },
    }
    if with_diff:
        data["diff"] = item_diff(item)
    return data


def _selector(data: dict[str, Any]) -> dict[str, Any]:
    given = [k for k in ("call", "calls", "pod", "filters") if k in data]
    if len(given) != 1:
        raise ValidationError({"selector": "give exactly one of call, calls, pod, filters"})
    key = given[0]
    value = data[key]
    if key == "call" and not _is_id(value):
        raise ValidationError({"call": "a call id"})
    if key == "calls" and not (isinstance(value, list) and all(_is_id(v) for v in value) and len(value) <= 10_000):
        raise ValidationError({"calls": "a list of at most 10000 call ids"})
    if key == "pod" and not (isinstance(value, str) and value):
        raise ValidationError({"pod": "namespace/name"})
    if key == "filters":
        if not isinstance(value, dict) or set(value) - FILTER_KEYS or not all(isinstance(v, str) for v in value.values()):
            raise ValidationError({"filters": f"a mapping of strings with keys among {', '.join(sorted(FILTER_KEYS))}"})
    selector: dict[str, Any] = {key: value}
    select_calls(selector).exists()  # a bad filter value is a 400 naming it
    return selector


def _not_empty(selector: dict[str, Any]) -> None:
    """Refuse a selection of no call (checked last, after the shape of every field): a run of
    0 calls would report success, and a CI gate pointed at a pruned call pass green."""
    if select_calls(selector).exists():
        return
    [(key, value)] = selector.items()
    if key == "call":
        raise NotFound({"call": f"no recorded call {value}"})
    raise ValidationError({key: "matches no recorded call"})


def _missing(selector: dict[str, Any], data: dict[str, Any]) -> list[int]:
    """The ids of a `calls` selector that name no recorded call: a 404 naming them (the run of
    the others would let a CI gate pass on fewer calls than it asked), unless the request says
    "allow_missing": true; then the ids, for the answer to name."""
    allow = data.get("allow_missing", False)
    if not isinstance(allow, bool):
        raise ValidationError({"allow_missing": "true or false"})
    if "calls" not in selector:
        return []
    missing = missing_calls(selector["calls"])
    if missing and not allow:
        raise MissingCalls(missing, len(set(selector["calls"])))
    return missing


class MissingCalls(NotFound):
    """A 404 naming the ids of `calls` that name no recorded call; `body` keeps them numbers
    (DRF makes every value of an exception's detail a string)."""

    def __init__(self, missing: list[int], asked: int) -> None:
        words = missing_words(missing, asked, MISSING_SHOWN) + '; "allow_missing": true replays the others'
        super().__init__({"calls": words})
        self.body = {"calls": words, "missing": missing[:MISSING_SHOWN], "missing_count": len(missing)}


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_ID


def _rate(data: dict[str, Any]) -> float:
    rate = data.get("rate", DEFAULT_RATE)
    if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not 0 < rate <= MAX_RATE:
        raise ValidationError({"rate": f"calls per second, above 0 and at most {MAX_RATE:g}"})
    return float(rate)


@extend_schema(methods=["GET"], responses={200: dict}, operation_id="replays_list")
@extend_schema(methods=["POST"], request=dict, responses={201: dict}, operation_id="replays_create")
@api_view(["GET", "POST"])
@permission_classes([CanReplay])
@parser_classes([BoundedJSONParser])  # JSON only: no multipart uploads spooled to temporary files
def replays(request):
    if request.method == "GET":
        runs = ReplayRun.objects.select_related("created_by")[:100]
        return Response({"results": [run_to_json(r) for r in runs]})
    data = request.data if isinstance(request.data, dict) else {}
    try:
        run, status = start(data, request.user, request)
    except MissingCalls as exc:
        return Response(exc.body, status=404)
    if status == 429:
        return Response({"detail": run.error, "run": run_to_json(run)}, status=429)
    body = run_to_json(run)
    missing = getattr(run, "missing", [])
    if missing:  # allowed: the answer still says which ids were not replayed
        body["missing"], body["missing_count"] = missing[:MISSING_SHOWN], len(missing)
    if run.status == "done" and data.get("wait"):
        body["items"] = [item_to_json(i, with_diff=True) for i in run.items.all()]
    return Response(body, status=201)


def start(data: dict[str, Any], user, request=None) -> tuple[ReplayRun, int]:
    """Check a replay request, store its run and start it: (run, 201), or (run, 429) when too
    many runs wait. `wait` (one call only) runs it here. ValidationError for bad input.
    Every run stored is in the audit trail (who, what, against which target, from where)."""
    selector = _selector(data)
    try:
        config = get_engine().config
        names = [b.name for b in config.backends]
        target = standing_in_for_selected(check(data.get("target") or {"kind": "configured"}, config.policies, names),
                                          selector, names)
    except TargetError as exc:
        raise ValidationError({"target": str(exc)}) from None
    # The target is stored with the run and in the audit trail: its size is bounded, whatever
    # it holds (policy rules, a description).
    if len(json.dumps(target)) > MAX_TARGET_BYTES:
        raise ValidationError({"target": f"at most {MAX_TARGET_BYTES} bytes as JSON"})
    wait = bool(data.get("wait"))
    if wait and "call" not in selector:
        raise ValidationError({"wait": "only for one call; a batch runs in the background"})
    rate = _rate(data)
    missing = _missing(selector, data)
    _not_empty(selector)
    # A run holds the process's only worker: a rate that would hold it for days is refused.
    # Only the calls it will replay take a turn of the rate: without allow_bind a bind is
    # skipped at once (replay/runner.py), so a bind-heavy selection is not refused for its binds.
    allow_bind = bool(data.get("allow_bind"))
    paced = select_calls(selector) if allow_bind else select_calls(selector).exclude(verb="bind")
    calls = min(paced.count(), MAX_CALLS_PER_RUN)
    if calls / rate > MAX_RUN_SECONDS:
        replayed = "calls" if allow_bind else "calls to replay (binds skipped)"
        raise ValidationError({"rate": f"{calls} {replayed} at {rate:g}/s would take more than "
                                       f"{MAX_RUN_SECONDS // 3600} h; at least {calls / MAX_RUN_SECONDS:.3g} calls/s"})
    run = ReplayRun.objects.create(
        created_by=user, selector=selector, target=target, allow_bind=allow_bind, rate=rate,
    )
    detail = {"selector": selector, "target": run.shown_target, "allow_bind": run.allow_bind}
    if missing:
        detail["missing_count"] = len(missing)
    audit(request, Action.REPLAY, target=f"replay {run.pk}", user=user, detail=detail)
    run.missing = missing  # not stored: named in the answer to this request
    if wait:
        with beating(run.pk):  # a live watcher would take it for a dead process's run
            run_replay(run)
        return run, 201
    if not get_worker().submit(run.pk):
        run.status, run.error = "failed", "too many replays waiting; try again later"
        run.save(update_fields=["status", "error"])
        return run, 429
    return run, 201


@extend_schema(responses={200: dict}, operation_id="replay_retrieve")
@api_view(["GET"])
@permission_classes([CanReplay])
def replay_detail(request, pk: int):
    run = object_or_404(ReplayRun, pk=pk)
    items = run.items.all()
    changed = request.query_params.get("changed") or ""
    if changed.lower() not in TRUE + FALSE:  # "?changed=0" once meant changed only: say so
        raise ValidationError({"changed": f"one of {', '.join(TRUE + FALSE)}"})
    if flag(request.query_params, "changed"):
        items = items.filter(changed=True)
    try:
        offset = int(request.query_params.get("offset") or 0)
    except ValueError:
        raise ValidationError({"offset": "a number"}) from None
    if offset < 0:  # was read as 0, where any other bad offset is refused
        raise ValidationError({"offset": "0 or more"})
    if offset > MAX_ID:  # the database's OFFSET is 64 bits (SQLite: "datatype mismatch" past it)
        raise ValidationError({"offset": f"at most {MAX_ID}"})
    kind = request.query_params.get("kind") or ""
    errors = request.query_params.get("errors") or ""
    if errors.lower() not in TRUE + FALSE:
        raise ValidationError({"errors": f"one of {', '.join(TRUE + FALSE)}"})
    if flag(request.query_params, "errors"):  # the calls that could not be replayed, listed as a kind
        kind = NOT_REPLAYED
    # Of this selection (one kind, changed only, or all): a script needs no short page to stop.
    # A page lists no more than its total, also while the run goes on (as the run page).
    total = listing_total(run, kind, flag(request.query_params, "changed"))
    listed = listed_up_to(total, offset, ITEMS_PAGE)
    if kind:  # the calls with one kind of change, through the run's kind index
        page = [item_to_json(i) for i in run.items.filter(id__in=ids_of_kind(run.pk, kind, offset, listed))]
    else:
        page = [item_to_json(i) for i in items[offset : offset + listed]]
    following = offset + ITEMS_PAGE if offset + ITEMS_PAGE < total else None
    return Response(dict(run_to_json(run), items=page, items_offset=offset, items_page=ITEMS_PAGE,
                         items_total=total, items_next=following))


@extend_schema(methods=["GET"], responses={200: dict}, operation_id="replay_cancel_retrieve")
@extend_schema(methods=["POST"], request=None, responses={200: dict, 409: dict}, operation_id="replay_cancel")
@api_view(["GET", "POST"])
@permission_classes([CanReplay])
def replay_cancel(request, pk: int):
    run = object_or_404(ReplayRun, pk=pk)
    if request.method == "GET":
        return Response({"cancellable": run.status in ("queued", "running"), "run": run_to_json(run)})
    if not cancel(run, request.user, request):
        return Response({"detail": f"replay {pk} has ended ({run.status}) or is being cancelled"}, status=409)
    run.refresh_from_db()
    return Response(run_to_json(run))


def cancel(run: ReplayRun, user, request=None) -> bool:
    """Ask a run to stop (the runner stops between calls); audited. False when it has ended."""
    if not request_cancel(run.pk, user.username):
        return False
    audit(request, Action.REPLAY_CANCELLED, target=f"replay {run.pk}", user=user,
          detail={"status": run.status, "done": run.done, "total": run.total})
    return True


@extend_schema(responses={200: dict}, operation_id="replay_item_retrieve")
@api_view(["GET"])
@permission_classes([CanReplay])
def replay_item(request, pk: int, item: int):
    return Response(item_to_json(object_or_404(ReplayItem, pk=item, run_id=pk), with_diff=True))


@extend_schema(responses={200: dict}, operation_id="shadows_list")
@api_view(["GET"])
@permission_classes([needs(Perm.VIEW_CALLS)])
def shadows(request):
    """The shadow backends' figures (the shadow process's, from the spool of this replica): calls
    compared, differing, dropped by reason, examples; and the shadow process's heartbeat."""
    from ..shadowstats import current_stats, serving_root

    config = get_engine().config
    return Response(current_stats(serving_root(), [(s.name, s.shadow_of) for s in config.shadows]))
