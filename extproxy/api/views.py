"""REST API views: read-only calls, newest first, filtered by query parameters."""
from rest_framework import viewsets
from rest_framework.pagination import CursorPagination

from ..models import Call
from .filters import filter_calls
from .serializers import CallSerializer


class NewestFirst(CursorPagination):
    ordering = ("-started_at", "-id")
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


class CallViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = CallSerializer
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
