"""`manage.py redact`: the redaction rules of the configuration applied to the records already kept.

    manage.py redact --dry-run     (what would change, table by table; nothing written)
    manage.py redact               (redacts, then records a `records-redacted` audit event)

For after a rule was added (a `namePatterns` entry, an annotation to redact): restart extproxy's
processes with the new configuration first, so that new calls are recorded by it and the shadow
process's kept examples are redacted again when it loads them, then run this. Safe while they
run, and safe to run again: what was redacted stays redacted, marks are added, not replaced.
"""
from __future__ import annotations

import sys
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from dashboard.kubewatch import MESSAGE_MAX
from dashboard.models import SchedulerEvent
from extproxy.audit import Action, audit
from extproxy.config import load_config
from extproxy.recording.redact_stored import RedactionRun, Table, Tally, record_tables

from .user import _cli_actor


class Command(BaseCommand):
    help = "Apply the configured redaction rules to every call, reply, decision, Node object and event already recorded."

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="count what would change; write nothing")

    def handle(self, *args, **options):
        config = load_config(settings.EXTPROXY_CONFIG or None)
        tables = record_tables() + (Table(SchedulerEvent, texts=(("message", MESSAGE_MAX),)),)
        shown = [0.0]
        doing = "to change" if options["dry_run"] else "redacted"

        def progress(tally: Tally) -> None:
            now = time.monotonic()
            if now - shown[0] >= 0.2:
                shown[0] = now
                sys.stderr.write(f"\r{sum(tally.examined.values())} rows read, "
                                 f"{sum(tally.changed.values())} fields {doing}")
                sys.stderr.flush()

        run = RedactionRun(config.redaction, dry_run=options["dry_run"], progress=progress)
        started = time.monotonic()
        try:
            tally = run.run(tables)
        except DatabaseError as exc:
            raise CommandError(f"the database failed ({exc}); what was written stays: run the command again") from exc
        sys.stderr.write("\n")
        verb = "would change" if options["dry_run"] else "changed"
        names = [table.name for table in tables] + ["extproxy.NodeObject"]
        for name in names:
            fields = {key.split(".", 2)[2]: n for key, n in sorted(tally.changed.items()) if key.startswith(name + ".")}
            said = ", ".join(f"{field} {n}" for field, n in fields.items()) or "nothing"
            failed = f"; {tally.failed[name]} could not be redacted (logged)" if tally.failed[name] else ""
            self.stdout.write(f"{name}: {tally.examined[name]} read, {verb}: {said}{failed}")
        self.stdout.write(f"done in {time.monotonic() - started:.1f} s")
        if not options["dry_run"]:
            audit(None, Action.RECORDS_REDACTED, target="records", actor=_cli_actor(), source="cli",
                  detail={"changed": dict(tally.changed), "failed": dict(tally.failed),
                          "read": dict(tally.examined)})
        if tally.failed:
            raise CommandError(f"{sum(tally.failed.values())} row(s) could not be redacted: see the log above")
