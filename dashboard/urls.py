"""Dashboard pages, and the live feed's JSON history (the filters /api/calls/ lacks)."""
from django.urls import path

from . import audit_views, replay_pages, views

app_name = "dashboard"
urlpatterns = [
    path("", views.live, name="live"),
    path("feed/calls/", views.feed_calls, name="feed-calls"),
    path("feed/attempts/", views.feed_attempts, name="feed-attempts"),
    path("feed/summary/", views.feed_summary, name="feed-summary"),
    path("feed/record-status/", views.record_status, name="record-status"),
    path("pods/<str:namespace>/<path:name>/", views.pod, name="pod"),
    path("backends/", views.backends, name="backends"),
    path("pending/", views.pending, name="pending"),
    path("audit/", audit_views.audit, name="audit"),
    path("calls/<int:pk>/", replay_pages.call, name="call"),
    path("replays/", replay_pages.replays, name="replays"),
    path("replays/<int:pk>/", replay_pages.replay, name="replay"),
    path("shadows/", replay_pages.shadows, name="shadows"),
]
