"""REST API views: read-only calls and the audit trail, newest first, filtered by FilterSets.

Each view declares the one permission it needs (roles.py): calls need view_calls, the audit
trail view_audit. Filters, unknown parameters and page sizes are handled (strictly) by
api/filters.py; views stay declarations.
"""
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import viewsets

from ..models import AuditEvent, Call
from ..roles import Perm
from .filters import AuditFilter, CallFilter, StrictCursorPagination, StrictFilterBackend
from .permissions import needs
from .serializers import AuditEventSerializer, CallDetailDoc, CallDoc, CallSerializer


UNINDEXED_COUNTED = 1000  # at most this many rows read to count them: one bounded query per page
LISTING_UNINDEXED_REASON = ("no node set (recorded while EXTPROXY_NODE_INDEX=0, replays recorded before replays were "
                            "indexed, records whose request was not read): whether they involved the node is not "
                            "known, and this listing does not show them (an export reads the binds among them); "
                            "`manage.py index_nodes` indexes those whose stored request reads")


class NewestFirst(StrictCursorPagination):
    ordering = ("-started_at", "-id")


class AuditNewestFirst(StrictCursorPagination):
    ordering = ("-at", "-id")


@extend_schema_view(
    list=extend_schema(responses=CallDoc(many=True)),
    retrieve=extend_schema(responses=CallDetailDoc),
)
class CallViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = CallSerializer
    pagination_class = NewestFirst
    permission_classes = [needs(Perm.VIEW_CALLS)]
    filter_backends = [StrictFilterBackend]
    filterset_class = CallFilter

    def get_queryset(self):
        queryset = Call.objects.all()
        if self.action == "list":
            queryset = queryset.defer("request_body", "response_body", "decisions_blob")
        return queryset

    def list(self, request, *args, **kwargs):
        """With `node`: besides the page, `unindexed`: how many calls of the selection (the other
        filters, the range) the node index cannot speak for, which no page lists (counted up to
        UNINDEXED_COUNTED: a bounded count, `more` past it)."""
        response = super().list(request, *args, **kwargs)
        if request.query_params.get("node"):
            filterset = StrictFilterBackend().filterset(request, self.get_queryset(), self)
            if filterset.unindexed is not None:
                found = filterset.unindexed.values("pk")[: UNINDEXED_COUNTED + 1].count()
                response.data["unindexed"] = {"calls": min(found, UNINDEXED_COUNTED), "more": found > UNINDEXED_COUNTED,
                                              "reason": LISTING_UNINDEXED_REASON}
        return response

    def get_serializer_context(self):
        context = super().get_serializer_context()
        context["detail"] = self.action == "retrieve"
        return context


class AuditEventViewSet(viewsets.ReadOnlyModelViewSet):
    """The audit trail: logins, user and role changes, tokens, exports, replays (auditors)."""

    queryset = AuditEvent.objects.all()
    serializer_class = AuditEventSerializer
    pagination_class = AuditNewestFirst
    permission_classes = [needs(Perm.VIEW_AUDIT)]
    filter_backends = [StrictFilterBackend]
    filterset_class = AuditFilter
