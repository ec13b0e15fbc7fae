"""Dashboard pages, and the live feed's JSON history (the filters /api/calls/ lacks)."""
from urllib.parse import unquote

from django.urls import path, register_converter

from . import audit_views, call_page, replay_pages, views


def _segment(value: str) -> str:
    """`value` as one path segment that comes back whole: "%" and "/" escaped once more than
    reverse() escapes them (a "/" would make two segments), and a segment that is "." or ".."
    escaped too (browsers resolve those: "a/../b" would open pod "b")."""
    escaped = value.replace("%", "%25").replace("/", "%2F")
    return escaped.replace(".", "%2E") if escaped in (".", "..") else escaped


class PodName:
    """A pod's name as one path segment. Anyone who reaches the extender endpoint can send any
    name (a newline, a "/", ".."): each comes back as it was sent, never as another pod's.
    dashboard/static/dashboard/live.js (segment, podHref) builds the same URLs."""

    regex = "[^/]+"

    def to_python(self, value: str) -> str:
        return unquote(value)

    def to_url(self, value: str) -> str:
        return _segment(value)


class PodNamespace(PodName):
    """A pod's namespace, as a name is; "-" stands for no namespace (a namespace that is "-"
    is written %2D)."""

    def to_python(self, value: str) -> str:
        return "" if value == "-" else unquote(value)

    def to_url(self, value: str) -> str:
        if not value:
            return "-"
        return "%2D" if value == "-" else _segment(value)


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
    path("calls/<int:pk>/", call_page.call, name="call"),
    path("replays/", replay_pages.replays, name="replays"),
    path("replays/<int:pk>/", replay_pages.replay, name="replay"),
    path("replays/<int:pk>/items/<int:item>/", replay_pages.replay_item, name="replay-item"),
    path("shadows/", replay_pages.shadows, name="shadows"),
]
