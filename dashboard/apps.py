"""The dashboard app: pages, websocket consumer, static assets."""
from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "dashboard"

    def ready(self) -> None:
        # Open live sockets are closed when their user loses access (live_access).
        from . import live_access
        from . import rollup_health  # noqa: F401  (its collector puts the roll-up's failed passes on /metrics)

        live_access.connect()
