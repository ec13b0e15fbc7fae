"""Dashboard pages, and the live feed's JSON history (the filters /api/calls/ lacks)."""
from urllib.parse import unquote

from django.urls import path, register_converter

from . import audit_views, replay_pages, views


class PodNamespace:
    """A pod's namespace as one path segment. Anyone who reaches the extender endpoint can
    send any namespace: "/" and "%" are escaped once more than Django's reverse() escapes
    them, so a namespace with a "/" comes back whole rather than as another pod's namespace
    and name. "-" stands for no namespace (a namespace that is "-" is escaped: %2D).
    dashboard/static/dashboard/live.js (podHref) builds the same URLs."""

    regex = "[^/]+"

    def to_python(self, value: str) -> str:
        return "" if value == "-" else unquote(value)

    def to_url(self, value: str) -> str:
        if not value:
            return "-"
        return "%2D" if value == "-" else value.replace("%", "%25").replace("/", "%2F")


class PodName:
    """A pod's name: the rest of the path, any character (a newline, a "/") included;
    Django's reverse() escapes it."""

    regex = r"[\s\S]+"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(PodNamespace, "podnamespace")
register_converter(PodName, "podname")

app_name = "dashboard"
urlpatterns = [
    path("", views.live, name="live"),
    path("feed/calls/", views.feed_calls, name="feed-calls"),
    path("feed/attempts/", views.feed_attempts, name="feed-attempts"),
    path("feed/summary/", views.feed_summary, name="feed-summary"),
    path("feed/record-status/", views.record_status, name="record-status"),
    path("pods/<podnamespace:namespace>/<podname:name>/", views.pod, name="pod"),
    path("backends/", views.backends, name="backends"),
    path("pending/", views.pending, name="pending"),
    path("audit/", audit_views.audit, name="audit"),
    path("calls/<int:pk>/", replay_pages.call, name="call"),
    path("replays/", replay_pages.replays, name="replays"),
    path("replays/<int:pk>/", replay_pages.replay, name="replay"),
    path("shadows/", replay_pages.shadows, name="shadows"),
]
