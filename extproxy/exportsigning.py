"""The server's side of the export manifests' signatures: its Ed25519 private key, signing, the
public key it publishes, and what it trusts when it verifies a file itself.

Key: settings.EXTPROXY_EXPORT_SIGNING_KEY (a PEM private key; replicas must share one, so set it
from a Secret), else one generated once in the data directory (export-signing.pem, mode 0600).
A key that cannot be read is an error before an export starts, never a manifest signed with
something else. Verifying here trusts the server's own public key and those in
settings.EXTPROXY_EXPORT_TRUSTED_KEYS (other replicas', earlier keys: PEM or base64, as
`published` gives them, `trusted_keys`), and the version 1 secret
(settings.EXTPROXY_EXPORT_KEY or export-hmac.key) for the manifests signed before version 2;
verifying never creates a key.
"""
from __future__ import annotations

import base64
import os
import re
import secrets
from pathlib import Path
from typing import Any

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from . import exportproof as proof

KEY_FILE = "export-signing.pem"
LEGACY_HMAC_FILE = "export-hmac.key"
MIN_HMAC_KEY = 32  # a version 1 secret shorter than this (an empty file: a crash mid-write) is not one


class SigningKeyError(RuntimeError):
    """The signing key is set or stored but cannot be used: exports are refused until it is mended."""


def existing_private_key() -> Ed25519PrivateKey | None:
    """The signing key as set or stored; None when there is none yet."""
    from django.conf import settings

    configured = getattr(settings, "EXTPROXY_EXPORT_SIGNING_KEY", "")
    if configured:
        return _parse(configured.encode(), "EXTPROXY_EXPORT_SIGNING_KEY")
    path = Path(settings.DATA_DIR) / KEY_FILE
    try:
        return _parse(path.read_bytes(), str(path))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SigningKeyError(f"{path} cannot be read ({exc.strerror or exc})") from None


def private_key() -> Ed25519PrivateKey:
    """The signing key; generated and stored the first time (see the module's docstring)."""
    from django.conf import settings

    existing = existing_private_key()
    if existing is not None:
        return existing
    path = Path(settings.DATA_DIR) / KEY_FILE
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Written whole under another name, then linked into place: no process ever reads part
        # of a key (a crash mid-write leaves only the temporary file), and when two race, one wins.
        temporary = path.with_name(f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(pem)
                out.flush()
                os.fsync(out.fileno())
            try:
                os.link(temporary, path)
            except FileExistsError:
                pass
        finally:
            temporary.unlink(missing_ok=True)
        return _parse(path.read_bytes(), str(path))
    except OSError as exc:
        raise SigningKeyError(f"no EXTPROXY_EXPORT_SIGNING_KEY set and {path} cannot be written "
                              f"({exc.strerror or exc})") from None


def _parse(data: bytes, where: str) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise SigningKeyError(f"{where}: not a PEM private key without a password ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningKeyError(f"{where}: an Ed25519 key is needed, this is a {type(key).__name__}")
    return key


def public_raw(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def sign(manifest: dict[str, Any], key: Ed25519PrivateKey | None = None) -> dict[str, Any]:
    key = key or private_key()
    signed = dict(manifest)
    signed["signed_with"] = {"alg": proof.SIGNATURE_ALG, "key_id": proof.key_id(public_raw(key))}
    signed["signature"] = base64.b64encode(key.sign(proof.canonical(signed))).decode()
    return signed


def published() -> dict[str, str]:
    """The public key as an auditor takes it: its id, its 32 bytes in base64, and PEM."""
    public = private_key().public_key()
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    pem = public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return {"alg": proof.SIGNATURE_ALG, "key_id": proof.key_id(raw),
            "public_key": base64.b64encode(raw).decode(), "pem": pem.decode()}


def trust() -> proof.Trust:
    """What verifying on this server trusts (see the module's docstring)."""
    from django.conf import settings

    own = existing_private_key()
    keys = [public_raw(own)] if own is not None else []
    keys += trusted_keys(getattr(settings, "EXTPROXY_EXPORT_TRUSTED_KEYS", ""))
    return proof.Trust(public_keys=tuple(keys), hmac_key=legacy_hmac_key())


_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)
_ACCEPTED = "each a PEM public key or its 32 bytes in base64 (manage.py export_signing_key, GET /api/export/signing-key/)"


def trusted_keys(text: str) -> list[bytes]:
    """The raw public keys of EXTPROXY_EXPORT_TRUSTED_KEYS: PEM public keys (as `cryptography`
    writes them, `manage.py export_signing_key` prints them with its `# key id` line, or the
    `pem` of GET /api/export/signing-key/, its line breaks as they are, written as \\n, or
    spaces) and keys in base64 (its `public_key`), separated by commas or whitespace; from `#`
    to the end of a line is a comment. SigningKeyError names the first entry that is not one."""
    text = "\n".join(line.split("#", 1)[0] for line in text.replace("\\n", "\n").splitlines())
    keys = []
    for number, entry in enumerate(_entries(text), 1):
        block = _PEM_BLOCK.fullmatch(entry)
        if block is not None and "PRIVATE" in block.group(1):  # shown by its label alone: it is a secret
            raise SigningKeyError(f"EXTPROXY_EXPORT_TRUSTED_KEYS: entry {number} is a PEM {block.group(1)}: "
                                  f"give its public half ({_ACCEPTED})")
        if block is not None:
            body = "".join(block.group(2).split())
            shown = f"PEM {block.group(1)} {body[:12]}..."
            wrapped = "\n".join(body[i : i + 64] for i in range(0, len(body), 64))
            entry = f"-----BEGIN {block.group(1)}-----\n{wrapped}\n-----END {block.group(1)}-----\n"
        else:
            shown = f"{entry[:16]}..." if len(entry) > 16 else entry
        try:
            if block is None and "-----" in entry:
                raise ValueError("part of a PEM block without its matching -----BEGIN/-----END line")
            keys.append(proof.read_public_key(entry.encode()))
        except ValueError as exc:
            raise SigningKeyError(f"EXTPROXY_EXPORT_TRUSTED_KEYS: entry {number} ({shown}): {exc}; {_ACCEPTED}") from None
    return keys


def _entries(text: str) -> list[str]:
    """PEM blocks whole, and the words between them."""
    entries, at = [], 0
    for block in _PEM_BLOCK.finditer(text):
        entries += [w for w in re.split(r"[\s,]+", text[at : block.start()]) if w]
        entries.append(block.group(0))
        at = block.end()
    return entries + [w for w in re.split(r"[\s,]+", text[at:]) if w]


def legacy_hmac_key() -> bytes | None:
    """The version 1 secret, where this server has one; never created."""
    from django.conf import settings

    configured = getattr(settings, "EXTPROXY_EXPORT_KEY", "")
    if configured:
        return configured.encode()
    try:
        key = (Path(settings.DATA_DIR) / LEGACY_HMAC_FILE).read_bytes().strip()
    except FileNotFoundError:
        return None
    return key if len(key) >= MIN_HMAC_KEY else None


def verify_here(stream: Any, manifest: dict[str, Any]) -> proof.Verdict:
    return proof.verify(stream, manifest, trust())
