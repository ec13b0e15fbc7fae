"""URL routes of the human face (the extender endpoints are routed in asgi.py)."""
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

from . import health
from .throttling import throttle_logins

# A request that fails on the database answers 503 saying so (database_down.py).
handler500 = "extproxy.database_down.server_error"

urlpatterns = [
    path("healthz", health.healthz),
    path("readyz", health.readyz),
    path("metrics", health.metrics_view),
    # Browsers ask for it on pages that name no icon (the API's JSON, the admin): a 404 in the
    # console of every such page, and a logged 404 on the server, otherwise.
    path("favicon.ico", RedirectView.as_view(url=static("dashboard/favicon.svg"), permanent=True)),
    # Before admin.site.urls, so that the admin's own login form is throttled too.
    path("admin/login/", throttle_logins(admin.site.login)),
    path("admin/", admin.site.urls),
    path("accounts/login/", throttle_logins(auth_views.LoginView.as_view()), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/", include("extproxy.api.urls")),
    path("", include("dashboard.urls")),
]
