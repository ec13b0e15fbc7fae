"""The proof around an export: the hash chain, the manifest's HMAC signature and its key, and
verification of a file against a manifest.

The chain (per record i, over the exact bytes in the file):

    h(0) = sha256("extproxy-export/1" \\n export_id \\n format \\n columns joined by ",")
    h(i) = sha256(h(i-1) as hex \\n body(i))

body(i) is the record as written without its hash: in JSON Lines the object without its last
key (`,"hash":"<64 hex>"}` becomes `}`), in CSV the row without its last column. Starting from
the export id ties a file to its own manifest: another export's manifest cannot match it.
The manifest is signed with HMAC-SHA256 over its canonical JSON (sorted keys, no signature).

Key: settings.EXTPROXY_EXPORT_KEY (several replicas must share it), else a random key created
once in the data directory (mode 0600); either at least 32 bytes, and checking a manifest never
creates one. This module reads files and the key; it never touches
the database.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

FORMATS = ("ndjson", "csv")
HASH_LEN = 64
NDJSON_TAIL = len(b',"hash":"') + HASH_LEN + len(b'"}')
MANIFEST_VERSION = 1


def chain_start(export_id: str, fmt: str, columns: list[str]) -> str:
    seed = "\n".join(["extproxy-export/1", export_id, fmt, ",".join(columns)])
    return hashlib.sha256(seed.encode()).hexdigest()


def link(previous: str, body: bytes) -> str:
    return hashlib.sha256(previous.encode() + b"\n" + body).hexdigest()


def with_hash(fmt: str, body: bytes, digest: str) -> bytes:
    """The line as written: the body with its hash appended (no newline)."""
    if fmt == "ndjson":
        return body[:-1] + b',"hash":"' + digest.encode() + b'"}'
    return body + b"," + digest.encode()


def split_line(fmt: str, line: bytes) -> tuple[bytes, str]:
    """(body, hash) of a line as written; ValueError when it is not shaped like a record."""
    if fmt == "ndjson":
        if len(line) <= NDJSON_TAIL or not line.startswith(b"{") or line[-NDJSON_TAIL:][:9] != b',"hash":"' \
                or not line.endswith(b'"}'):
            raise ValueError('not a record: expected a JSON object ending in "hash"')
        digest = line[-NDJSON_TAIL + 9 : -2].decode("ascii", "replace")
        body = line[:-NDJSON_TAIL] + b"}"
    else:
        if len(line) <= HASH_LEN + 1 or line[-HASH_LEN - 1 : -HASH_LEN] != b",":
            raise ValueError("not a record: expected a CSV row ending in its hash")
        digest = line[-HASH_LEN:].decode("ascii", "replace")
        body = line[: -HASH_LEN - 1]
    if any(c not in "0123456789abcdef" for c in digest):
        raise ValueError("not a record: its hash is not 64 hex digits")
    return body, digest


# --- the manifest's signature --------------------------------------------------------------


MIN_KEY_BYTES = 32  # an HMAC key shorter than SHA-256's output is weaker than the hash it signs with
KEY_FILE = "export-hmac.key"


class ExportKeyError(RuntimeError):
    """No usable export key: exports cannot be signed (or manifests checked) until it is fixed."""


def signing_key(create: bool = True) -> bytes:
    """The export key; `create=False` (checking a manifest) refuses rather than make one, since
    a new key can only say that every manifest signed before is forged."""
    from django.conf import settings

    configured = getattr(settings, "EXTPROXY_EXPORT_KEY", "")
    if configured:
        if len(configured.encode()) < MIN_KEY_BYTES:
            raise ExportKeyError(f"EXTPROXY_EXPORT_KEY is shorter than {MIN_KEY_BYTES} bytes: set a longer key")
        return configured.encode()
    path = Path(settings.DATA_DIR) / KEY_FILE
    try:
        return _read_key(path)
    except FileNotFoundError:
        if not create:
            raise ExportKeyError(f"no export key: EXTPROXY_EXPORT_KEY is not set and {path} does not exist "
                                 f"(the key that signed the manifest is needed to check it)") from None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Written whole to a temporary file, then linked into place: a crash (or a full disk)
        # midway leaves no empty key file behind, and when two processes race, the link of the
        # second fails and both use the first one's key.
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{KEY_FILE}.")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(secrets.token_hex(32).encode())
                out.flush()
                os.fsync(out.fileno())
            try:
                os.link(temp, path)
            except FileExistsError:
                pass
        finally:
            os.unlink(temp)
    except OSError as exc:
        raise ExportKeyError(f"no EXTPROXY_EXPORT_KEY set and {path} cannot be written ({exc.strerror})") from None
    return _read_key(path)


def _read_key(path: Path) -> bytes:
    key = path.read_bytes().strip()
    if len(key) < MIN_KEY_BYTES:  # an empty key made every manifest forgeable
        raise ExportKeyError(f"{path} holds no usable key (fewer than {MIN_KEY_BYTES} bytes): remove it to make "
                             f"a new one (manifests signed with the old key no longer verify)")
    return key


def canonical(manifest: dict[str, Any]) -> bytes:
    unsigned = {k: v for k, v in manifest.items() if k != "signature"}
    return json.dumps(unsigned, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sign(manifest: dict[str, Any], key: bytes | None = None) -> dict[str, Any]:
    signed = dict(manifest)
    signed["signature"] = hmac.new(key or signing_key(), canonical(manifest), hashlib.sha256).hexdigest()
    return signed


def signature_ok(manifest: dict[str, Any], key: bytes | None = None) -> bool:
    expected = hmac.new(key or signing_key(create=False), canonical(manifest), hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, str(manifest.get("signature", "")))


# --- verification --------------------------------------------------------------------------


@dataclass
class Verdict:
    ok: bool  # unaltered: every record chains and the file is exactly what the manifest says
    message: str
    line: int | None = None  # the first bad line (1-based, counting a CSV header)
    complete: bool = False  # ok, and the manifest reports no gap in the records

    def __str__(self) -> str:
        return self.message


# No record extproxy writes comes near this (texts are bounded when stored); a longer one means
# a quote was added and the rest of the file reads as one field: say so rather than gather it.
MAX_RECORD_BYTES = 16 * 1024 * 1024


class Unreadable(ValueError):
    """The file cannot be split into records from `line` on (a quote left open)."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line


def records_of(stream: Iterable[bytes], fmt: str) -> Iterator[tuple[int, bytes, bool]]:
    """(first physical line number, record bytes without newline, ended by a newline).

    A CSV record may hold newlines inside quoted fields; it ends at a newline outside quotes.
    Unreadable when a quoted field is still open at the end of the file or after
    MAX_RECORD_BYTES (the lines are gathered in a list: joining once keeps this linear).
    """
    pending: list[bytes] = []
    number, size, start, quotes = 0, 0, 0, 0
    for raw in stream:
        number += 1
        if not pending:
            start = number
        if fmt == "csv":
            quotes += raw.count(b'"')
            if quotes % 2:  # inside a quoted field: the record goes on
                pending.append(raw)
                size += len(raw)
                if size > MAX_RECORD_BYTES:
                    raise Unreadable(start, f"unbalanced quote at line {start}: the record starting there "
                                            f"runs past {MAX_RECORD_BYTES // (1024 * 1024)} MiB without closing it")
                continue
        record = b"".join(pending) + raw if pending else raw
        ended = record.endswith(b"\n")
        yield start, record[:-1] if ended else record, ended
        pending, size, quotes = [], 0, 0
    if pending:
        raise Unreadable(start, f"unbalanced quote at line {start}: the quoted field opened in the record "
                                f"starting there is still open at the end of the file (a quote added, or the "
                                f"file cut short)")


def _seq_of(fmt: str, body: bytes) -> int | None:
    try:
        if fmt == "ndjson":
            return int(json.loads(body)["seq"])
        return int(body.split(b",", 1)[0])
    except (ValueError, KeyError, TypeError):
        return None


def verify(stream: BinaryIO, manifest: dict[str, Any], key: bytes | None = None) -> Verdict:
    """Check an export file against its manifest; the first problem found is the answer."""
    if not signature_ok(manifest, key):
        return Verdict(False, "the manifest's signature does not match: it was altered or forged "
                              "(or signed with another key)")
    fmt, columns = manifest.get("format"), manifest.get("columns") or []
    if fmt not in FORMATS:
        return Verdict(False, f"the manifest names an unknown format {fmt!r}")
    whole = hashlib.sha256()
    try:
        return _check_records(records_of(_Hashing(stream, whole), fmt), fmt, columns, manifest, whole)
    except Unreadable as exc:
        return Verdict(False, str(exc), exc.line)


def _check_records(lines: Iterator[tuple[int, bytes, bool]], fmt: str, columns: list[str],
                   manifest: dict[str, Any], whole: Any) -> Verdict:
    previous = chain_start(str(manifest.get("export_id")), fmt, columns)
    seq = 0
    if fmt == "csv":
        header = next(lines, None)
        if header is None or header[1] != ",".join(columns + ["hash"]).encode():
            return Verdict(False, "line 1: not the header this manifest's columns make", 1)
    for number, line, ended in lines:
        seq += 1
        try:
            body, digest = split_line(fmt, line)
        except ValueError as exc:
            what = "cut short (the file is truncated)" if not ended else str(exc)
            return Verdict(False, f"line {number}: {what}", number)
        if not ended:
            return Verdict(False, f"line {number}: no newline after the last record: the file is truncated", number)
        if link(previous, body) != digest:
            return Verdict(False, f"line {number}: {_why_broken(fmt, body, digest, seq, previous, manifest)}", number)
        previous = digest
    expected = manifest.get("records")
    if seq != expected:
        return Verdict(False, f"the file has {seq} records, the manifest says {expected}: "
                              f"{'records are missing at the end (truncated)' if seq < (expected or 0) else 'records were added'}",
                       None)
    if seq and previous != manifest.get("last_hash"):
        return Verdict(False, "the last record's hash is not the manifest's last_hash")
    if whole.hexdigest() != manifest.get("file_sha256"):
        return Verdict(False, "every record chains, but the file's SHA-256 differs from the manifest's "
                              "(bytes outside the records were changed)")
    gaps = manifest.get("gaps") or []
    if gaps or not manifest.get("complete", False):
        missing = ", ".join(f"{g['calls']} {g['reason']}" for g in gaps)
        if manifest.get("still_open"):
            missing = ", ".join(filter(None, [missing, f"the range is still open: {manifest['still_open'].get('reason')}, "
                                                       f"stored up to {manifest['still_open'].get('stored_up_to')}"]))
        missing = missing or "see the manifest"
        return Verdict(True, f"unaltered: {seq} records as exported, but the range is NOT complete "
                             f"({'events' if manifest.get('kind') == 'audit' else 'calls'} missing from the records: "
                             f"{missing})", None, complete=False)
    tail = f"last hash {previous[:16]}…" if seq else "an empty export"
    return Verdict(True, f"complete and unaltered: {seq} records, {tail}", None, complete=True)


def _why_broken(fmt: str, body: bytes, digest: str, expected_seq: int, previous: str, manifest: dict) -> str:
    seq = _seq_of(fmt, body)
    if expected_seq == 1 and digest != manifest.get("first_hash"):
        return "the first record does not chain from this manifest's export (a manifest of another export?)"
    if seq is not None and seq != expected_seq:
        if seq > expected_seq:
            return f"record {seq} where record {expected_seq} belongs: record(s) {expected_seq}..{seq - 1} removed or moved"
        return f"record {seq} where record {expected_seq} belongs: records reordered or duplicated"
    return f"record {expected_seq} was altered (its content does not match its hash)"


class _Hashing:
    """Feeds every byte read through to a running SHA-256 of the whole file."""

    def __init__(self, stream: BinaryIO, digest: Any) -> None:
        self.stream, self.digest = stream, digest

    def __iter__(self) -> Iterator[bytes]:
        for line in self.stream:
            self.digest.update(line)
            yield line
