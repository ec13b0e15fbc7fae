"""Start-up chores of `make run`: the admin user and the backends table.

With EXTPROXY_ADMIN_PASSWORD the user `admin` gets that password; without it, the first start
creates `admin` with a random password and prints it once.
"""
import os
import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from extproxy.audit import Action, acting_as, audit
from extproxy.config import ConfigError, load_config
from extproxy.models import ConfiguredBackend


class Command(BaseCommand):
    help = "Ensure the admin user exists and mirror the configured backends."

    def handle(self, *args, **options):
        with acting_as("bootstrap", "start-up"):
            self.ensure_admin()
        from django.conf import settings

        try:
            config = load_config(settings.EXTPROXY_CONFIG or None)
        except ConfigError as exc:
            raise CommandError(f"bad configuration: {exc}") from exc
        with transaction.atomic():
            ConfiguredBackend.objects.all().delete()
            ConfiguredBackend.objects.bulk_create(
                ConfiguredBackend(
                    name=b.name,
                    position=i,
                    target=b.target,
                    filter_verb=b.filter_verb,
                    prioritize_verb=b.prioritize_verb,
                    preempt_verb=b.preempt_verb,
                    bind_verb=b.bind_verb,
                    weight=b.weight,
                    http_timeout_seconds=b.http_timeout,
                    node_cache_capable=b.node_cache_capable,
                    ignorable=b.ignorable,
                    managed_resources=[
                        {"name": m.name, "ignoredByScheduler": m.ignored_by_scheduler} for m in b.managed_resources
                    ],
                    config_source=config.source,
                )
                for i, b in enumerate(config.backends)
            )
        audit(None, Action.CONFIG_LOADED, target=config.source, actor="bootstrap", source="start-up",
              detail={"backends": [b.name for b in config.backends]})
        self.stdout.write(f"extproxy: {len(config.backends)} backend(s) from {config.source}")

    def ensure_admin(self):
        User = get_user_model()
        password = os.environ.get("EXTPROXY_ADMIN_PASSWORD")
        user = User.objects.filter(username="admin").first()
        if password:
            if user is None:
                User.objects.create_superuser("admin", "", password)
            elif not user.check_password(password):
                user.set_password(password)
                user.save(update_fields=["password"])
            return
        if user is None:
            password = secrets.token_urlsafe(18)
            User.objects.create_superuser("admin", "", password)
            self.stdout.write(f"extproxy: created user admin with password {password} (shown once)")
