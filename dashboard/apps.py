"""The dashboard app: pages, websocket consumer, static assets."""
from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "dashboard"
