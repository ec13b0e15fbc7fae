"""The live feed's JSON history: the calls, and the scheduling attempts, matching the feed's
filters (the API's, plus latency, error text, ids and node), and the band above it (attempts/s,
pods pending, per backend calls and errors of the last minutes).

Read-only. An attempt is told as the pod page tells it (queries.story_of).
"""
from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from django.db.models import DurationField, ExpressionWrapper, F, QuerySet
from django.utils import timezone

from extproxy.api.filters import filter_calls
from extproxy.models import Call
from extproxy.timetext import iso_z

from .queries import BODIES, attempt_calls, configured_backends, pending_pods, story_of


class BadFilter(ValueError):
    pass


# --- the live feed's history -------------------------------------------------------------


def feed_queryset(params) -> QuerySet:
    """The API's filters (`backend` included: the calls that backend took part in, in the combined
    form too; `error` too: the call's error or one of its parts', where an ignorable backend's
    failure is its part's alone) plus what only the dashboard offers: latency above, ids."""
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
    if params.get("ids"):
        try:
            ids = [int(i) for i in params["ids"].split(",") if i][:1000]
        except ValueError:
            raise BadFilter("ids: expected a comma-separated list of call ids") from None
        queryset = queryset.filter(id__in=ids)
    return queryset.order_by("-started_at", "-id")


def feed_calls(params, limit: int) -> list[dict]:
    """`node` is the API's node filter (applied in feed_queryset, from the node index): the calls
    whose request involved the node, those that came to no verdict on it (an error, a timeout)
    too. Scanning the calls' decisions for it instead left exactly those out."""
    return [c.to_json() for c in feed_queryset(params).defer(*BODIES)[:limit]]


# --- the feed by scheduling attempt ------------------------------------------------------------

ATTEMPT_SCAN = 3  # calls looked at per attempt asked for


def attempt_to_json(key: str, calls: list[Call], told) -> dict:
    calls = sorted(calls, key=lambda c: (c.started_at, c.id))
    first = calls[0]
    return {
        "key": key,
        "pod": {"namespace": first.pod_namespace, "name": first.pod_name, "uid": first.pod_uid},
        "started_at": iso_z(first.started_at),
        "finished_at": iso_z(max(c.finished_at for c in calls)),
        "state": told.state,
        "sentence": told.sentence,
        "node": told.node,
        "steps": [
            {"verb": s.verb, "backend": s.backend, "call_id": s.call_id, "duration_ms": s.duration_ms,
             "outcome": s.outcome, "counted": s.counted, "detail": s.detail, "error": s.error[:500],
             "rejection": list(s.rejection) if s.rejection else None, "not_called": s.not_called}
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
