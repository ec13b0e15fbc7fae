"""Query-parameter filters of /api/calls/; a bad value is a 400 that names it."""
from __future__ import annotations

from django.db.models import QuerySet
from django.utils.dateparse import parse_datetime
from rest_framework.exceptions import ValidationError

from ..models import Outcome, Verb

EXACT = {"namespace": "pod_namespace", "pod_uid": "pod_uid", "backend": "backend", "attempt": "attempt"}
CHOICES = {"verb": ("verb", Verb.values), "outcome": ("outcome", Outcome.values)}


def filter_calls(queryset: QuerySet, params) -> QuerySet:
    if params.get("pod"):
        pod = params["pod"]
        if "/" in pod:  # "namespace/name" is accepted too
            namespace, pod = pod.split("/", 1)
            queryset = queryset.filter(pod_namespace=namespace)
        queryset = queryset.filter(pod_name=pod)
    for param, column in EXACT.items():
        if params.get(param):
            queryset = queryset.filter(**{column: params[param]})
    for param, (column, allowed) in CHOICES.items():
        if params.get(param):
            if params[param] not in allowed:
                raise ValidationError({param: f"must be one of {', '.join(allowed)}"})
            queryset = queryset.filter(**{column: params[param]})
    for param, lookup in (("since", "started_at__gte"), ("until", "started_at__lt")):
        if params.get(param):
            when = parse_datetime(params[param])
            if when is None:
                raise ValidationError({param: "must be an ISO 8601 date-time, e.g. 2026-12-02T18:00:00Z"})
            queryset = queryset.filter(**{lookup: when})
    return queryset
