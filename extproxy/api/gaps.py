"""`GET /api/gaps/`: calls missing from the records, newest first: dropped before they were
stored (queue-full, spool-full, ... torn) or pruned by retention, each with its reason, count
and time range. The same RecordingGap rows that export manifests count (extproxy/gaps.py).

Filters: `reason`, and `since`/`until` select the gaps whose range overlaps [since, until), as
an export of that range would report them. Viewers may read it: it holds no call data.
"""
from __future__ import annotations

import django_filters as df
from rest_framework import generics, serializers

from ..models import RecordingGap
from ..roles import Perm
from .filters import StrictCursorPagination, StrictFilterBackend, UtcDateTimeFilter
from .permissions import needs


class GapFilter(df.FilterSet):
    reason = df.CharFilter(field_name="reason", help_text="e.g. queue-full, spool-full, torn, pruned-age")
    since = UtcDateTimeFilter(field_name="last_at", lookup_expr="gte", help_text="gaps ending at or after (ISO 8601)")
    until = UtcDateTimeFilter(field_name="first_at", lookup_expr="lt", help_text="gaps starting before (ISO 8601)")

    class Meta:
        model = RecordingGap
        fields: list[str] = []


class GapSerializer(serializers.ModelSerializer):
    class Meta:
        model = RecordingGap
        fields = ["id", "reason", "calls", "first_at", "last_at", "noted_at"]


class GapsNewestFirst(StrictCursorPagination):
    ordering = ("-first_at", "-id")


class GapList(generics.ListAPIView):
    """Gaps in the records: calls dropped or pruned, by reason and time range."""

    queryset = RecordingGap.objects.all()
    serializer_class = GapSerializer
    pagination_class = GapsNewestFirst
    permission_classes = [needs(Perm.VIEW_CALLS)]
    filter_backends = [StrictFilterBackend]
    filterset_class = GapFilter
