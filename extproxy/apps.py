"""The extproxy Django app."""
from django.apps import AppConfig
from django.db.models.signals import post_migrate


class ExtproxyConfig(AppConfig):
    name = "extproxy"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import logsafety, throttling  # noqa: F401  (throttling counts failed log-ins by signal)
        from . import shadowstats  # noqa: F401  (its collector puts the shadow process's figures on /metrics)
        from .audit import connect_signals
        from .roles import ensure_roles

        logsafety.install()  # before the server logs its first request line

        post_migrate.connect(ensure_roles, sender=self)
        connect_signals()
