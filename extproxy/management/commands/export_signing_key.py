"""`manage.py export_signing_key`: the public key export manifests are signed with (PEM, with its
id), for auditors to pin. `--new`: a new private key (PEM) to put in a Secret as
EXTPROXY_EXPORT_SIGNING_KEY, printed and stored nowhere."""
from __future__ import annotations

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.management.base import BaseCommand, CommandError

from extproxy import exportsigning


class Command(BaseCommand):
    help = "Print the export signing key's public half, or a new private key for a Secret."

    def add_arguments(self, parser):
        parser.add_argument("--new", action="store_true", help="print a new private key (PEM); store nothing")

    def handle(self, *args, new: bool, **options):
        if new:
            pem = Ed25519PrivateKey.generate().private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
            self.stdout.write(pem.decode(), ending="")
            return
        try:
            key = exportsigning.published()
        except exportsigning.SigningKeyError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"# key id {key['key_id']} ({key['alg']})\n{key['pem']}", ending="")
