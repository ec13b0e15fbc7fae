"""`manage.py prune`: apply the retention settings now (the recorder also does it every minute)."""
from django.conf import settings
from django.core.management.base import BaseCommand

from extproxy.config import load_config
from extproxy.recording.retention import prune


class Command(BaseCommand):
    help = "Delete calls past the retention settings, and Node objects no kept call refers to."

    def handle(self, *args, **options):
        config = load_config(settings.EXTPROXY_CONFIG or None)
        result = prune(config.retention)
        self.stdout.write(f"pruned {result.calls} call(s), {result.nodes} node object(s) "
                          f"and {result.audit_events} audit event(s)")
