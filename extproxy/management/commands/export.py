"""`manage.py export`: decision logs (or, with --audit, the audit trail) to a file or stdout,
with the API's filters, a progress line on stderr, and the signed manifest beside the file.

    manage.py export --format csv --since 2026-12-01T00:00:00Z --node node-03 -o calls.csv
        (writes calls.csv and calls.csv.manifest.json)
    manage.py export --namespace ml --manifest m.json > calls.ndjson

Filters are the same FilterSet as /api/export/ (a bad value is refused with its name).
"""
from __future__ import annotations

import datetime as dt
import json
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from extproxy import export, exportproof, exportstream, exporttimes
from extproxy.exportproof import incomplete
from extproxy.exportsigning import SigningKeyError, private_key
from extproxy.api.filters import AuditFilter, CallFilter, ExportCallFilter
from extproxy.audit import Action, audit
from extproxy.models import AuditEvent, Call

from .user import _cli_actor


class Progress:
    """One line on stderr, rewritten at most 5 times a second: calls read, records, rate."""

    def __init__(self, stream: Any, total: int, noun: str) -> None:
        self.stream, self.total, self.noun = stream, total, noun
        self.started = self.shown = time.monotonic()

    def show(self, run: export.ExportRun, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self.shown < 0.2:
            return
        self.shown = now
        done = run.tally.calls + run.tally.passed_over  # read so far (a node's export passes over some binds)
        share = f" ({done * 100 // self.total}%)" if self.total else ""
        rate = run.records / max(now - self.started, 1e-9)
        width = 30
        filled = width * done // self.total if self.total else width
        bar = "#" * filled + "-" * (width - filled)
        self.stream.write(f"\r[{bar}] {done}/{self.total} {self.noun}{share}, {run.records} records, "
                          f"{rate:,.0f} records/s")
        if final:
            self.stream.write("\n")
        self.stream.flush()


class Command(BaseCommand):
    help = "Export decision logs (or the audit trail) with a hash chain and a signed manifest."

    def add_arguments(self, parser):
        parser.add_argument("--format", choices=["ndjson", "csv"], default="ndjson")
        parser.add_argument("-o", "--output", help="file to write (default: stdout)")
        parser.add_argument("--manifest", help="where the manifest goes (default: OUTPUT.manifest.json)")
        parser.add_argument("--audit", action="store_true", help="export the audit trail instead of calls")
        parser.add_argument("--no-progress", action="store_true")
        names = sorted(set(CallFilter.base_filters) | set(AuditFilter.base_filters))
        for name in names:
            parser.add_argument(f"--{name.replace('_', '-')}", dest=f"filter_{name}", metavar="VALUE",
                                help=(CallFilter.base_filters.get(name) or AuditFilter.base_filters[name]).extra.get(
                                    "help_text") or f"the API's {name} filter")

    def handle(self, *args, **options):
        audit_kind = options["audit"]
        filterset_class = AuditFilter if audit_kind else ExportCallFilter
        given = {k[len("filter_"):]: v for k, v in options.items() if k.startswith("filter_") and v is not None}
        unknown = sorted(set(given) - set(filterset_class.base_filters))
        if unknown:
            raise CommandError(f"not a filter of the {'audit trail' if audit_kind else 'calls'}: {', '.join(unknown)}")
        try:  # as the API reads them (exporttimes.py): digits past the microsecond rounded up
            given.update(exporttimes.range_as_meant(given) or {})
        except exporttimes.TimeProblem as exc:
            raise CommandError(f"{exc.field}: {exc}") from None
        model, time_field = (AuditEvent, "at") if audit_kind else (Call, "started_at")
        filterset = filterset_class(given, queryset=model.objects.all())
        if not filterset.is_valid():
            raise CommandError("; ".join(f"{k}: {' '.join(v)}" for k, v in filterset.errors.items()))
        try:
            queryset = filterset.qs
        except Exception as exc:  # a ValidationError raised while filtering (e.g. verdict without node)
            raise CommandError(str(getattr(exc, "detail", exc))) from exc
        until = (filterset.form.cleaned_data.get("until") or timezone.now()).astimezone(dt.timezone.utc)
        since = filterset.form.cleaned_data.get("since")
        since = since.astimezone(dt.timezone.utc) if since else None
        problem = export.range_problem(since, until)
        if problem is not None:
            raise CommandError(problem)
        end = {f"{time_field}__lt": until}
        queryset = queryset.filter(**end)
        unindexed = getattr(filterset, "unindexed", None)
        output, manifest_path = options["output"], options["manifest"]
        if not output and not manifest_path:
            raise CommandError("writing to stdout: say where the manifest goes with --manifest FILE")
        manifest_path = manifest_path or exportproof.manifest_beside(output)
        try:  # before the first byte: a file whose manifest cannot be signed proves nothing
            private_key()
        except SigningKeyError as exc:
            raise CommandError(f"exports cannot be signed: {exc}") from None
        actor = _cli_actor()
        run = export.ExportRun(kind="audit" if audit_kind else "calls", fmt=options["format"], filters=given,
                               since=since, until=until, user=actor, source="cli",
                               unindexed_calls=None if unindexed is None else unindexed.filter(**end))
        audit(None, Action.AUDIT_EXPORT if audit_kind else Action.EXPORT, target=f"{run.kind} as {run.fmt}",
              actor=actor, source="cli", detail={"export_id": run.export_id, "filters": given})
        progress = None if options["no_progress"] else Progress(self.stderr._out, queryset.count(),
                                                                 "events" if audit_kind else "calls")
        if audit_kind:
            records = export.audit_records(queryset, run.tally)
        else:
            records = export.call_records(queryset, run.tally, filterset.form.cleaned_data.get("node") or None)
        target: BinaryIO = open(output, "wb") if output else sys.stdout.buffer
        started = time.perf_counter()
        try:
            for chunk in exportstream.stream(run, records):
                target.write(chunk)
                if progress:
                    progress.show(run)
        finally:
            if output:
                target.close()
            else:
                target.flush()
        if progress:
            progress.show(run, final=True)
        if run.manifest is None:  # its records failed, and the database refused the manifest's questions too
            raise CommandError(f"{output or 'stdout'}: the export was INTERRUPTED after {run.records} records "
                               f"({(run.interrupted or {}).get('reason')}); no manifest could be made")
        Path(manifest_path).write_text(json.dumps(run.manifest, indent=2) + "\n")
        note = "" if not run.manifest or run.manifest["complete"] else " NOT complete: " + incomplete(run.manifest)
        seconds = time.perf_counter() - started
        self.stderr.write(f"exported {run.records} records to {output or 'stdout'} in {seconds:.3f} s "
                          f"({run.records / max(seconds, 1e-9):,.0f} records/s); manifest {manifest_path}{note}")
