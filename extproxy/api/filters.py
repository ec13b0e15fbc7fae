"""Query-parameter filters of the API (django-filter FilterSets; the OpenAPI schema is generated
from them), and the strictness around them: an unknown parameter, a bad value or a bad page
size is a 400 that names it.

`CallFilter` is shared by /api/calls/, the dashboard's feed (through `filter_calls`) and, as
`ExportCallFilter`, by /api/export/ and `manage.py export`, so every face filters the same way
(exports also account for the calls the node index cannot speak for).

`backend` is one meaning everywhere (`took_part`): the calls that backend took part in, its own
and, in the combined form, the `combined` calls with a part by it.
"""
from __future__ import annotations

from typing import Any

import datetime

import django_filters as df
from django import forms
from django.db.models import DurationField, Exists, ExpressionWrapper, F, OuterRef, Q, QuerySet
from django_filters.rest_framework import DjangoFilterBackend
from django_filters.utils import translate_validation
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import CursorPagination

from .. import nodeindex
from ..exporttimes import TimeProblem, as_meant
from ..models import AuditEvent, BackendCall, Call, Outcome, Verb

REPLAYS = ("exclude", "include", "only")
VERDICTS = [("passed", "passed"), ("failed", "failed"), ("unresolvable", "unresolvable"), ("scored", "scored")]


MAX_IDS = 1000
# latency_above's ceiling: no call takes a year, and a larger value overflows the interval
# arithmetic (timedelta past ~1e17 ms; SQLite's 64-bit microseconds past ~9.2e15 ms).
MAX_LATENCY_MS = 365 * 86_400_000


class UtcDateTimeField(df.fields.IsoDateTimeField):
    """ISO 8601 read as an export reads it (exporttimes.as_meant: digits past the microsecond
    rounded up, a `+` that arrived as a space read as `+`), so every listing selects the range
    its export would. Moved to UTC when the value is cleaned: PostgreSQL refuses offsets past 15:59
    that Python accepts (a 500 found by schemathesis), and a date at the edge of the calendar
    cannot move to UTC. Checked here, not when filtering, so that the form is invalid and every
    face says so as it says any bad value (the API a 400, the audit page on the page)."""

    def to_python(self, value: Any) -> datetime.datetime | None:
        if isinstance(value, str):  # nanoseconds rounded up, a `+` that arrived as a space (exporttimes)
            try:
                value = as_meant(value)
            except TimeProblem as exc:
                raise forms.ValidationError(str(exc), code="invalid") from None
        moment = super().to_python(value)
        if moment is None:
            return None
        try:
            return moment.astimezone(datetime.timezone.utc)
        except (OverflowError, ValueError):
            raise forms.ValidationError("out of range once moved to UTC", code="invalid") from None


class UtcDateTimeFilter(df.IsoDateTimeFilter):
    field_class = UtcDateTimeField


def took_part(backend: str) -> Q:
    """The calls `backend` took part in: its own (per-backend form; `combined` names the combined
    calls), and the combined calls with a part by it. In the combined form every call's own
    backend is `combined` and each backend answers in a part (BackendCall), so matching the
    call's own backend alone found none of a backend's calls there. The part is looked up per
    call through the parts' index on their call, which keeps a newest-first page a short walk
    of the calls' own index.

    A side that holds no row for `backend` is left out of the query: the `or` of the two keeps
    the database from using either side's index, so a backend with no parts (a typo, a
    per-backend setup, a backend since removed) walked every call looking for one. Each check
    is one probe of an index (call_backend_verb, part_backend_call).

    A backend with its own calls only is bounded by its newest call: PostgreSQL's planner walks
    the newest-first index expecting to meet a backend's calls early, and a backend whose calls
    are all old (a per-backend setup since made combined, a backend since removed) was met only
    after every newer call. From the bound the walk starts at its newest call."""
    if not BackendCall.objects.filter(backend=backend).exists():
        newest = newest_own_call(backend)
        return Q(backend=backend) if newest is None else Q(backend=backend, started_at__lte=newest)
    parts = Q(Exists(BackendCall.objects.filter(call=OuterRef("pk"), backend=backend)))
    if not Call.objects.filter(backend=backend).exists():
        return parts
    return Q(backend=backend) | parts


def newest_own_call(backend: str) -> datetime.datetime | None:
    """When the newest call of `backend`'s own started (None: it has none): one probe of
    call_backend_verb per verb. A max over all verbs at once is planned as the same walk of the
    newest-first index that this bound is for."""
    newest = [started for verb in Verb.values for started in Call.objects.filter(backend=backend, verb=verb)
              .order_by("-started_at").values_list("started_at", flat=True)[:1]]
    return max(newest, default=None)


def errors_containing(text: str) -> QuerySet:
    """The ids of the calls whose error, or one of whose parts' errors, contains `text` (any case).

    In the combined form an ignorable backend's failure is its part's error only: the answer the
    scheduler got (it went on without that backend) has none. Both sides are read through their
    partial indexes of the rows that have an error (call_with_error, part_with_error), so the
    search costs the errors recorded, not the calls. Asked of each call instead (the error's text,
    or a part's, per call walked newest first), a text that few or no calls had walked the whole
    table: PostgreSQL read all 250,000 calls for a listing page that found none."""
    own = Call.objects.exclude(error="").filter(error__icontains=text).order_by().values("id")
    parts = BackendCall.objects.exclude(error="").filter(error__icontains=text).order_by().values("call_id")
    return own.union(parts, all=True)


class IdsFilter(df.BaseInFilter, df.NumberFilter):
    """`ids=1,2,3`: whole numbers, at most MAX_IDS of them."""

    def filter(self, qs: QuerySet, value: Any) -> QuerySet:
        if value and len(value) > MAX_IDS:
            raise ValidationError({"ids": [f"at most {MAX_IDS} ids"]})
        if value and any(v is None or v != int(v) for v in value):  # "ids=," has empty items
            raise ValidationError({"ids": ["call ids are whole numbers"]})
        if value and any(not 0 < int(v) < 2**63 for v in value):  # beyond the id column: not a call
            raise ValidationError({"ids": ["call ids are positive 64-bit integers"]})
        return super().filter(qs, [int(v) for v in value] if value else value)


class CallFilter(df.FilterSet):
    pod = df.CharFilter(method="filter_pod", help_text="pod name, or namespace/name")
    namespace = df.CharFilter(field_name="pod_namespace", help_text="pod namespace")
    pod_uid = df.CharFilter(field_name="pod_uid")
    verb = df.ChoiceFilter(choices=Verb.choices)
    backend = df.CharFilter(
        method="filter_backend",
        help_text="a backend name: the calls it took part in (in the combined form, the combined calls with a part"
        " by it); or combined",
    )
    outcome = df.ChoiceFilter(choices=Outcome.choices)
    attempt = df.CharFilter(field_name="attempt", help_text="the scheduling attempt key")
    since = UtcDateTimeFilter(field_name="started_at", lookup_expr="gte", help_text="started at or after (ISO 8601)")
    until = UtcDateTimeFilter(field_name="started_at", lookup_expr="lt", help_text="started before (ISO 8601)")
    node = df.CharFilter(method="filter_nothing", help_text="calls whose request involved this node")
    verdict = df.ChoiceFilter(
        choices=VERDICTS, method="filter_nothing", help_text="with node: calls that gave the node this verdict"
    )
    latency_above = df.NumberFilter(method="filter_latency", help_text="calls that took longer (milliseconds)")
    error = df.CharFilter(method="filter_error", help_text="error text contains (the call's, or one of its parts')")
    ids = IdsFilter(field_name="id", help_text=f"comma-separated call ids (at most {MAX_IDS})")
    replays = df.ChoiceFilter(
        choices=[(r, r) for r in REPLAYS], method="filter_nothing",
        help_text="replayed calls (replay/): exclude (the default), include, or only",
    )

    class Meta:
        model = Call
        fields: list[str] = []

    def filter_pod(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        if "/" in value:  # "namespace/name" is accepted too
            namespace, value = value.split("/", 1)
            queryset = queryset.filter(pod_namespace=namespace)
        return queryset.filter(pod_name=value)

    def filter_backend(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        return queryset.filter(took_part(value))

    def filter_error(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        return queryset.filter(id__in=errors_containing(value))

    def filter_nothing(self, queryset: QuerySet, name: str, value: Any) -> QuerySet:
        return queryset  # node and verdict are applied together in filter_queryset

    def filter_latency(self, queryset: QuerySet, name: str, value: Any) -> QuerySet:
        if value < 0:
            raise ValidationError({"latency_above": ["must be zero or more milliseconds"]})
        if value > MAX_LATENCY_MS:
            raise ValidationError({"latency_above": [f"at most {MAX_LATENCY_MS} milliseconds (a year)"]})
        duration = ExpressionWrapper(F("finished_at") - F("started_at"), output_field=DurationField())
        from datetime import timedelta

        return queryset.annotate(duration=duration).filter(duration__gt=timedelta(milliseconds=float(value)))

    def filter_queryset(self, queryset: QuerySet) -> QuerySet:
        queryset = super().filter_queryset(queryset)
        replays = self.form.cleaned_data.get("replays") or "exclude"
        view = (getattr(self.request, "parser_context", None) or {}).get("view")
        one_call = getattr(view, "action", None) == "retrieve"  # a replay is reachable by its id
        if replays != "include" and not (one_call and replays == "exclude"):
            queryset = queryset.filter(is_replay=(replays == "only"))  # out of listings unless asked for
        node, verdict = self.form.cleaned_data.get("node"), self.form.cleaned_data.get("verdict")
        if verdict and not node:
            raise ValidationError({"verdict": ["needs node: the verdict given to which node?"]})
        if node:
            from django.conf import settings

            if not settings.EXTPROXY_NODE_INDEX:
                raise ValidationError({"node": ["the node index is off (EXTPROXY_NODE_INDEX=0): no node filter"]})
            queryset = self.filter_node(queryset, node, verdict)
        return queryset

    # With `node`: the selection's calls (the other filters, the range) that have no node set,
    # which the listing cannot find; /api/calls/ counts them (api/views.py).
    unindexed: QuerySet | None = None

    def filter_node(self, queryset: QuerySet, node: str, verdict: str | None) -> QuerySet:
        """Listings read the node index only (nodeindex.involving): a call it cannot speak for
        (nodeindex.unindexed) is not found. Exports do more (ExportCallFilter)."""
        self.unindexed = queryset.filter(nodeindex.without_set())
        return queryset.filter(nodeindex.involving(node, verdict))


class ExportCallFilter(CallFilter):
    """The calls filters of an export, which promises completeness: with `node`, besides what
    the index finds, the binds it cannot speak for are candidates (the export keeps those whose
    request names the node: export.call_records), and the other calls it cannot speak for are
    kept in `unindexed`, for the manifest to count (whether they involved the node is not known).
    """

    def filter_node(self, queryset: QuerySet, node: str, verdict: str | None) -> QuerySet:
        unknown = nodeindex.unindexed()
        self.unindexed = queryset.filter(unknown).exclude(verb=Verb.BIND)
        if verdict:  # a bind gives no verdict: none is a candidate
            return queryset.filter(nodeindex.involving(node, verdict))
        return queryset.filter(nodeindex.involving(node) | (Q(verb=Verb.BIND) & unknown))


class AuditFilter(df.FilterSet):
    action = df.CharFilter(field_name="action")
    actor = df.CharFilter(field_name="actor")
    target = df.CharFilter(field_name="target")
    since = UtcDateTimeFilter(field_name="at", lookup_expr="gte", help_text="at or after (ISO 8601)")
    until = UtcDateTimeFilter(field_name="at", lookup_expr="lt", help_text="before (ISO 8601)")

    class Meta:
        model = AuditEvent
        fields: list[str] = []


def filter_calls(queryset: QuerySet, params) -> QuerySet:
    """The API's call filters over `queryset`; a bad value raises ValidationError naming it.

    Parameters this FilterSet does not know are left alone (the dashboard has its own).
    """
    filterset = CallFilter(params, queryset=queryset)
    if not filterset.is_valid():
        raise ValidationError(filterset.errors)
    return filterset.qs


class StrictFilterBackend(DjangoFilterBackend):
    """django-filter, plus: a query parameter nobody reads is a 400 naming it."""

    def filter_queryset(self, request, queryset, view):
        self.reject_unknown(request, queryset, view)
        return super().filter_queryset(request, queryset, view)

    def filterset(self, request, queryset, view) -> df.FilterSet:
        """The view's FilterSet, checked as filter_queryset checks it and filtered (`.qs`), for
        a view that reads more of it than the queryset (exports: the range, the node)."""
        self.reject_unknown(request, queryset, view)
        filterset = self.get_filterset(request, queryset, view)
        if not filterset.is_valid():
            raise translate_validation(filterset.errors)
        filterset.qs  # noqa: B018 (filters now: a bad value is a 400 before anything else is done)
        return filterset

    def reject_unknown(self, request, queryset, view) -> None:
        filterset_class = self.get_filterset_class(view, queryset)
        known = set(filterset_class.base_filters) if filterset_class else set()
        known |= set(getattr(view, "extra_query_params", ()))
        paginator = getattr(view, "paginator", None)
        known |= {getattr(paginator, "cursor_query_param", None), getattr(paginator, "page_size_query_param", None)}
        known.add("format")  # DRF's own (content negotiation)
        unknown = sorted(set(request.query_params) - known)
        if unknown:
            raise ValidationError(
                {
                    "unknown_parameters": unknown,
                    "detail": f"unknown query parameter(s): {', '.join(unknown)}; "
                    f"known: {', '.join(sorted(k for k in known if k))}",
                }
            )


class StrictCursorPagination(CursorPagination):
    """Cursor pagination whose page_size is checked, not silently fixed."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500

    def get_page_size(self, request):
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        try:
            size = int(raw)
        except ValueError:
            raise ValidationError({"page_size": [f"must be a whole number from 1 to {self.max_page_size}"]}) from None
        if size < 1:
            raise ValidationError({"page_size": [f"must be a whole number from 1 to {self.max_page_size}"]})
        if size > self.max_page_size:
            raise ValidationError({"page_size": [f"at most {self.max_page_size} (the maximum page size)"]})
        return size
