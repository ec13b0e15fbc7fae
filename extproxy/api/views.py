"""REST API views: read-only calls and the audit trail, newest first, filtered by query parameters.

Each view declares the one permission it needs (roles.py); calls need view_calls (the default).
"""
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import viewsets
from rest_framework.pagination import CursorPagination

from ..models import AuditEvent, Call
from ..roles import Perm
from .filters import filter_calls
from .permissions import needs
from .serializers import AuditEventSerializer, CallDetailDoc, CallDoc, CallSerializer

FILTER_PARAMETERS = [
    OpenApiParameter("pod", OpenApiTypes.STR, description="pod name, or namespace/name"),
    OpenApiParameter("namespace", OpenApiTypes.STR),
    OpenApiParameter("pod_uid", OpenApiTypes.STR),
    OpenApiParameter("verb", OpenApiTypes.STR, enum=["filter", "prioritize", "bind", "preempt"]),
    OpenApiParameter("backend", OpenApiTypes.STR, description="a backend name, or combined"),
    OpenApiParameter("outcome", OpenApiTypes.STR, enum=["ok", "error", "timeout"]),
    OpenApiParameter("attempt", OpenApiTypes.STR),
    OpenApiParameter("since", OpenApiTypes.DATETIME),
    OpenApiParameter("until", OpenApiTypes.DATETIME),
]


class NewestFirst(CursorPagination):
    ordering = ("-started_at", "-id")
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


@extend_schema_view(
    list=extend_schema(responses=CallDoc(many=True), parameters=FILTER_PARAMETERS),
    retrieve=extend_schema(responses=CallDetailDoc),
)
class CallViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = CallSerializer
    permission_classes = [needs(Perm.VIEW_CALLS)]
    pagination_class = NewestFirst

    def get_queryset(self):
        queryset = Call.objects.all()
        if self.action == "list":
            queryset = filter_calls(queryset, self.request.query_params).defer(
                "request_body", "response_body", "decisions_blob"
            )
        return queryset

    def get_serializer_context(self):
        context = super().get_serializer_context()
        context["detail"] = self.action == "retrieve"
        return context


class AuditNewestFirst(CursorPagination):
    ordering = ("-at", "-id")
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


class AuditEventViewSet(viewsets.ReadOnlyModelViewSet):
    """The audit trail: logins, user and role changes, tokens, exports, replays (auditors)."""

    queryset = AuditEvent.objects.all()
    serializer_class = AuditEventSerializer
    pagination_class = AuditNewestFirst
    permission_classes = [needs(Perm.VIEW_AUDIT)]
