"""Start-up chores of `make run`: the admin user and the backends table.

With EXTPROXY_ADMIN_PASSWORD the user `admin` gets that password; without it, the first start
creates `admin` with a random password and prints it once.

Replicas start together: everything here (and the migrations, with --migrate) runs under one
lock per database (a PostgreSQL advisory lock, or a file lock beside the SQLite file), so the
second replica waits and then finds the admin and the backends already there.
"""
import fcntl
import os
import secrets
from contextlib import contextmanager
from typing import Iterator

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction

from extproxy.audit import Action, acting_as, audit
from extproxy.config import ConfigError, load_config
from extproxy.models import ConfiguredBackend


class Command(BaseCommand):
    help = "Ensure the admin user exists and mirror the configured backends."

    def add_arguments(self, parser):
        parser.add_argument("--migrate", action="store_true", help="apply migrations first, under the same lock")

    def handle(self, *args, **options):
        from django.conf import settings

        try:
            config = load_config(settings.EXTPROXY_CONFIG or None)
        except ConfigError as exc:
            raise CommandError(f"bad configuration: {exc}") from exc
        with start_lock():
            if options["migrate"]:
                call_command("migrate", "--noinput", verbosity=0)
            with transaction.atomic():
                with acting_as("bootstrap", "start-up"):
                    self.ensure_admin()
                self.mirror_backends(config)
        audit(None, Action.CONFIG_LOADED, target=config.source, actor="bootstrap", source="start-up",
              detail={"backends": [b.name for b in config.backends]})
        self.stdout.write(f"extproxy: {len(config.backends)} backend(s) from {config.source}")

    def mirror_backends(self, config):
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


_LOCK_KEY = 0x65787470726F7879 & 0x7FFFFFFFFFFFFFFF  # "extproxy": one key for every replica


@contextmanager
def start_lock() -> Iterator[None]:
    """Held while one process bootstraps; others wait for it."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s)", [_LOCK_KEY])
        try:
            yield
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [_LOCK_KEY])
        return
    path = str(connection.settings_dict["NAME"]) + ".bootstrap-lock"
    if path.startswith(":memory:") or "mode=memory" in path:
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
