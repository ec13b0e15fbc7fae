"""The extproxy Django app."""
from django.apps import AppConfig
from django.db.models.signals import post_migrate


class ExtproxyConfig(AppConfig):
    name = "extproxy"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from .audit import connect_signals
        from .roles import ensure_roles

        post_migrate.connect(ensure_roles, sender=self)
        connect_signals()
