"""API routes, namespaced "api"."""
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView
from rest_framework.authtoken.views import obtain_auth_token
from rest_framework.routers import DefaultRouter

from .views import CallViewSet

app_name = "api"
router = DefaultRouter()
router.register("calls", CallViewSet, basename="call")

urlpatterns = [
    path("auth/token/", obtain_auth_token, name="token"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("", include(router.urls)),
]
