"""API routes, namespaced "api"."""
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView
from rest_framework.routers import DefaultRouter

from .auth import token_login
from .export_views import AuditExportView, CallExportView, ManifestView
from .views import AuditEventViewSet, CallViewSet

app_name = "api"
router = DefaultRouter()
router.register("calls", CallViewSet, basename="call")
router.register("audit", AuditEventViewSet, basename="audit")

urlpatterns = [
    path("auth/token/", token_login, name="token"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("export/", CallExportView.as_view(), name="export"),
    path("export/<str:export_id>/manifest/", ManifestView.as_view(), name="export-manifest"),
    path("audit/export/", AuditExportView.as_view(), name="audit-export"),
    path("", include(router.urls)),
]
