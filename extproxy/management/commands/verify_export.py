"""`manage.py verify_export FILE [MANIFEST] [--public-key KEY ...]`: complete and unaltered, or the
first bad line and what is wrong with it. Exit status 0 when unaltered and complete, 1 otherwise.
MANIFEST defaults to FILE.manifest.json, where `manage.py export -o FILE` writes it.

Without --public-key it trusts what this server trusts (its own key, EXTPROXY_EXPORT_TRUSTED_KEYS,
the version 1 secret); with it, only the keys given. An auditor away from the server runs
exportproof.py itself with the published public key (README, "Exports that prove themselves")."""
from __future__ import annotations

import json
import time

from django.core.management.base import BaseCommand, CommandError

from extproxy import exportproof, exportsigning


class Command(BaseCommand):
    help = "Check an export file against its signed manifest."

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument("manifest", nargs="?", help="default: FILE.manifest.json (where export -o FILE puts it)")
        parser.add_argument("--public-key", action="append", default=[], metavar="KEY",
                            help="a file holding a public key to trust instead of this server's own")

    def handle(self, *args, file: str, manifest: str | None, public_key: list[str], **options):
        manifest = manifest or exportproof.manifest_beside(file)
        try:
            with open(manifest, "rb") as handle:
                data = json.load(handle)
        except (OSError, ValueError) as exc:
            raise CommandError(f"{manifest}: not a readable manifest ({exc})") from exc
        if not isinstance(data, dict):
            raise CommandError(f"{manifest}: not a manifest (expected a JSON object)")
        try:
            trust = self._pinned(public_key) if public_key else exportsigning.trust()
        except exportsigning.SigningKeyError as exc:
            raise CommandError(str(exc)) from exc
        try:
            started = time.perf_counter()
            with open(file, "rb") as handle:
                verdict = exportproof.verify(handle, data, trust)
            seconds = time.perf_counter() - started
        except OSError as exc:
            raise CommandError(f"{file}: {exc}") from exc
        if not verdict.ok or not verdict.complete:
            raise CommandError(f"{file}: {verdict.message}")
        self.stdout.write(f"{file}: {verdict.message} (checked in {seconds:.3f} s)")

    @staticmethod
    def _pinned(paths: list[str]) -> exportproof.Trust:
        keys = []
        for path in paths:
            try:
                with open(path, "rb") as handle:
                    keys.append(exportproof.read_public_key(handle.read()))
            except (OSError, ValueError) as exc:
                raise CommandError(f"{path}: {exc}") from exc
        return exportproof.Trust(public_keys=tuple(keys))
