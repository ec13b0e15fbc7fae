"""`manage.py verify_export FILE MANIFEST`: complete and unaltered, or the first bad line and
what is wrong with it. Exit status 0 when unaltered and complete, 1 otherwise."""
from __future__ import annotations

import json
import time

from django.core.management.base import BaseCommand, CommandError

from extproxy.exportproof import ExportKeyError, verify


class Command(BaseCommand):
    help = "Check an export file against its signed manifest."

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument("manifest")

    def handle(self, *args, file: str, manifest: str, **options):
        try:
            with open(manifest, "rb") as handle:
                data = json.load(handle)
        except (OSError, ValueError) as exc:
            raise CommandError(f"{manifest}: not a readable manifest ({exc})") from exc
        if not isinstance(data, dict):
            raise CommandError(f"{manifest}: not a manifest (expected a JSON object)")
        try:
            started = time.perf_counter()
            with open(file, "rb") as handle:
                verdict = verify(handle, data)
            seconds = time.perf_counter() - started
        except OSError as exc:
            raise CommandError(f"{file}: {exc}") from exc
        except ExportKeyError as exc:
            raise CommandError(f"cannot check the manifest's signature: {exc}") from None
        if not verdict.ok or not verdict.complete:
            raise CommandError(f"{file}: {verdict.message}")
        self.stdout.write(f"{file}: {verdict.message} (checked in {seconds:.3f} s)")
