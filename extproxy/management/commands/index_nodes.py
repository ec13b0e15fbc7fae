"""`manage.py index_nodes [--since T] [--until T]`: give the calls the node index cannot speak
for (recorded while EXTPROXY_NODE_INDEX=0, replays recorded before replays were indexed) their
node set from their stored rows, so `?node=` listings find them and node-filtered exports of
their range can be complete. Safe while the recorder runs; running it again does nothing more."""
from __future__ import annotations

import datetime

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils.dateparse import parse_datetime

from extproxy.nodeindex_backfill import backfill


def _moment(value: str | None) -> datetime.datetime | None:
    if value is None:
        return None
    moment = parse_datetime(value)
    if moment is None or moment.tzinfo is None:
        raise CommandError(f"{value!r}: an ISO 8601 time with its offset, e.g. 2026-12-01T00:00:00Z")
    return moment


class Command(BaseCommand):
    help = "Index by node the recorded calls that have no node set (recorded while the index was off)."

    def add_arguments(self, parser):
        parser.add_argument("--since", help="only calls started at or after this time (ISO 8601)")
        parser.add_argument("--until", help="only calls started before this time (ISO 8601)")

    def handle(self, *args, **options):
        if not settings.EXTPROXY_NODE_INDEX:
            raise CommandError("EXTPROXY_NODE_INDEX=0: the node index is off, nothing would be indexed")
        result = backfill(_moment(options["since"]), _moment(options["until"]))
        self.stdout.write(f"indexed {result.indexed} call(s); left unindexed {result.left} "
                          f"({result.unread} naming no node that could be read, {result.failed} whose stored "
                          f"request could not be read back)")
