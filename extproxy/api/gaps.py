"""`GET /api/gaps/`: records missing, newest first: calls dropped before they were stored
(queue-full, spool-full, ... torn) or pruned by retention, and audit events the audit trail's
own retention deleted, each with its kind, reason, count and time range. The same RecordingGap
rows that export manifests count (extproxy/gaps.py).

Each row says its `kind`: `calls` (its count in `calls`) or `audit` (its count in `events`;
`calls` is null: no call is missing), so an audit-retention gap is never read as lost calls.
Filters: `kind`, `reason`, and `since`/`until` select the gaps whose range overlaps
[since, until), as an export of that range would report them. Viewers may read it: it holds no
call data.
"""
from __future__ import annotations

import django_filters as df
from drf_spectacular.utils import extend_schema_field
from rest_framework import generics, serializers

from ..gaps import KINDS, kind_of, of_kind
from ..models import RecordingGap
from ..roles import Perm
from .filters import StrictCursorPagination, StrictFilterBackend, UtcDateTimeFilter
from .permissions import needs


class GapFilter(df.FilterSet):
    kind = df.ChoiceFilter(choices=[(k, k) for k in KINDS], method="filter_kind",
                           help_text="calls (calls dropped or pruned) or audit (audit events pruned); both if not given")
    reason = df.CharFilter(field_name="reason", help_text="e.g. queue-full, spool-full, torn, pruned-age")
    since = UtcDateTimeFilter(field_name="last_at", lookup_expr="gte", help_text="gaps ending at or after (ISO 8601)")
    until = UtcDateTimeFilter(field_name="first_at", lookup_expr="lt", help_text="gaps starting before (ISO 8601)")

    class Meta:
        model = RecordingGap
        fields: list[str] = []

    def filter_kind(self, queryset, name: str, value: str):
        return queryset.filter(of_kind(value))


class GapSerializer(serializers.ModelSerializer):
    kind = serializers.SerializerMethodField()
    calls = serializers.SerializerMethodField()
    events = serializers.SerializerMethodField()

    class Meta:
        model = RecordingGap
        fields = ["id", "kind", "reason", "calls", "events", "first_at", "last_at", "noted_at"]

    @extend_schema_field(serializers.ChoiceField(choices=KINDS))
    def get_kind(self, gap: RecordingGap) -> str:
        return kind_of(gap.reason)

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_calls(self, gap: RecordingGap) -> int | None:
        """Calls missing; null for an audit gap."""
        return gap.calls if kind_of(gap.reason) == "calls" else None

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_events(self, gap: RecordingGap) -> int | None:
        """Audit events missing; null for a gap in the calls."""
        return gap.calls if kind_of(gap.reason) == "audit" else None


class GapsNewestFirst(StrictCursorPagination):
    ordering = ("-first_at", "-id")


class GapList(generics.ListAPIView):
    """Records missing: calls dropped or pruned, audit events pruned; by kind, reason and time range."""

    queryset = RecordingGap.objects.all()
    serializer_class = GapSerializer
    pagination_class = GapsNewestFirst
    permission_classes = [needs(Perm.VIEW_CALLS)]
    filter_backends = [StrictFilterBackend]
    filterset_class = GapFilter
