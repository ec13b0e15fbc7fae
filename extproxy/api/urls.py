"""API routes, namespaced "api"."""
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView
from rest_framework.routers import DefaultRouter

from . import bodies, replays
from .auth import token_login
from .export_key import SigningKeyView
from .export_views import AuditExportView, CallExportView, ManifestView
from .gaps import GapList
from .views import AuditEventViewSet, CallViewSet

app_name = "api"
router = DefaultRouter()
router.register("calls", CallViewSet, basename="call")
router.register("audit", AuditEventViewSet, basename="audit")

urlpatterns = [
    path("auth/token/", token_login, name="token"),
    # replay lane: bodies, copy-out, replays
    path("calls/<int:pk>/request", bodies.call_request, name="call-request"),
    path("calls/<int:pk>/response", bodies.call_response, name="call-response"),
    path("calls/<int:pk>/backend-calls/<int:bc>/request", bodies.backend_call_request, name="backend-call-request"),
    path("calls/<int:pk>/backend-calls/<int:bc>/response", bodies.backend_call_response, name="backend-call-response"),
    path("calls/<int:pk>/curl", bodies.call_curl, name="call-curl"),
    path("calls/<int:pk>/fixture", bodies.call_fixture, name="call-fixture"),
    path("fixtures/", bodies.fixtures, name="fixtures"),
    path("replays/", replays.replays, name="replays"),
    path("replays/<int:pk>/", replays.replay_detail, name="replay"),
    path("replays/<int:pk>/items/<int:item>/", replays.replay_item, name="replay-item"),
    path("replays/<int:pk>/cancel/", replays.replay_cancel, name="replay-cancel"),
    path("shadows/", replays.shadows, name="shadows"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("export/", CallExportView.as_view(), name="export"),
    path("export/signing-key/", SigningKeyView.as_view(), name="export-signing-key"),
    path("export/<str:export_id>/manifest/", ManifestView.as_view(), name="export-manifest"),
    path("audit/export/", AuditExportView.as_view(), name="audit-export"),
    path("gaps/", GapList.as_view(), name="gaps"),
    path("", include(router.urls)),
]
