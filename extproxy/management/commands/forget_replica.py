"""`manage.py forget_replica [REPLICA]`: list the replicas whose recorders report to this database,
or forget one that is gone.

A replica's last report holds every later export range open (spool_reports.py) until its
recorder reports again or stops with its spool empty. A replica that vanished otherwise (its
pod deleted with calls in its spool, its node lost) never will: forgetting it lets exports
close again. The span from its stored-up-to point to now becomes a gap (`replica-forgotten`),
which exports of that span report, counting the calls its spool held at its last report (at
least that many are lost: those it answered since are not known). The audit trail records who forgot it and what it had last reported.
"""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from extproxy.audit import Action, audit
from extproxy.models import SpoolReport
from extproxy.spool_reports import forget

from .user import _cli_actor


class Command(BaseCommand):
    help = "List the replicas' spool reports, or forget a replica that is gone (its unstored calls are lost)."

    def add_arguments(self, parser):
        parser.add_argument("replica", nargs="?", help="the replica to forget, as the listing names it")

    def handle(self, *args, replica: str | None, **options):
        if replica is None:
            now = timezone.now()
            for report in SpoolReport.objects.all():
                state = "ended" if report.ended else (
                    f"stored up to {report.stored_up_to.isoformat() if report.stored_up_to else 'not known'}, "
                    f"{report.undrained} calls in its spool")
                self.stdout.write(f"{report.replica}\treported {(now - report.reported_at).total_seconds():.0f} s ago"
                                  f"\t{state}")
            return
        last = forget(replica)
        if last is None:
            raise CommandError(f"no report of replica {replica!r} (`manage.py forget_replica` lists them)")
        audit(None, Action.REPLICA_FORGOTTEN, target=replica, actor=_cli_actor(), source="cli", detail=last)
        self.stdout.write(f"forgot {replica}" + ("" if last["ended"] else
                          f": calls since {last['stored_up_to'] or last['reported_at']} may be lost, at least the "
                          f"{last['undrained']} in its spool when it last reported (gap replica-forgotten)"))
