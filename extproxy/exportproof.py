"""The proof around an export: the hash chain, the manifest's signature, and verification of a
file against a manifest. One file on its own: an auditor runs it with Python and the
`cryptography` package, with no Django, no database and no secret:

    python3 exportproof.py FILE MANIFEST --public-key KEY

The chain (per record i, over the exact bytes in the file):

    h(0) = sha256("extproxy-export/1" \\n export_id \\n format \\n columns joined by ",")
    h(i) = sha256(h(i-1) as hex \\n body(i))

body(i) is the record as written without its hash: in JSON Lines the object without its last
key (`,"hash":"<64 hex>"}` becomes `}`), in CSV the row without its last column. Starting from
the export id ties a file to its own manifest: another export's manifest cannot match it.

The signature is over the manifest's canonical JSON (sorted keys, no `signature`). Version 2
manifests are signed with Ed25519 (`signed_with` names the key by its id): anyone holding the
server's public key can check one, and nobody without its private key can make one, so an
auditor verifies without a secret and cannot forge either. Version 1 manifests were signed with
HMAC-SHA256 under a server secret: they are checked only where that secret is (the server that
made them; exportsigning.py holds the server's side of both).
"""
from __future__ import annotations

import argparse
import base64
import binascii
import csv
import hashlib
import hmac
import io
import json
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

FORMATS = ("ndjson", "csv")
HASH_LEN = 64
NDJSON_TAIL = len(b',"hash":"') + HASH_LEN + len(b'"}')
MANIFEST_VERSION = 2
SIGNATURE_ALG = "ed25519"


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


# An export whose server could not finish its records (the database failed mid-stream) ends
# with one line no record can be: in JSON Lines an object that starts with "interrupted" and has
# neither seq nor hash; in CSV a row whose first cell is "interrupted" where a record's seq is,
# then the records written before it and why. Its manifest says `interrupted` too.
INTERRUPTED = "interrupted"


def interrupted_line(fmt: str, after_records: int, reason: str) -> bytes:
    """The mark that ends an interrupted export's file (with its newline)."""
    if fmt == "ndjson":
        mark = {INTERRUPTED: True, "after_records": after_records, "reason": reason}
        return json.dumps(mark, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
    row = io.StringIO()
    csv.writer(row, lineterminator="\n").writerow([INTERRUPTED, after_records, reason])
    return row.getvalue().encode()


def interruption(fmt: str, line: bytes) -> str | None:
    """The reason an interrupted export's mark gives, or None when `line` is not a mark."""
    if not line.startswith(b'{"interrupted":' if fmt == "ndjson" else b"interrupted,"):
        return None
    text = line.decode("utf-8", "replace")
    try:
        reason = json.loads(text).get("reason") if fmt == "ndjson" else next(csv.reader([text]))[2]
    except (ValueError, AttributeError, IndexError):
        reason = None
    return str(reason or "no reason given")


# --- the manifest's signature --------------------------------------------------------------


def canonical(manifest: dict[str, Any]) -> bytes:
    unsigned = {k: v for k, v in manifest.items() if k != "signature"}
    return json.dumps(unsigned, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def key_id(public_raw: bytes) -> str:
    """A public key's name in manifests: the first 16 hex digits of the SHA-256 of its 32 bytes."""
    return hashlib.sha256(public_raw).hexdigest()[:16]


def read_public_key(text: bytes) -> bytes:
    """A public key as the server publishes it (PEM, or its 32 bytes in base64): its raw bytes.
    ValueError when it is neither, or not an Ed25519 key."""
    text = text.strip()
    if b"-----BEGIN" in text:  # lines before it (`manage.py export_signing_key` names the key) are not the key
        text = text[text.index(b"-----BEGIN"):]
        try:
            key = serialization.load_pem_public_key(text)
        except ValueError as exc:
            raise ValueError(f"not a PEM public key ({exc})") from None
        if not isinstance(key, Ed25519PublicKey):
            raise ValueError(f"an Ed25519 public key is needed, this is a {type(key).__name__}")
        return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    try:
        raw = base64.b64decode(text, validate=True)
    except binascii.Error:
        raise ValueError("neither PEM nor base64") from None
    if len(raw) != 32:
        raise ValueError(f"an Ed25519 public key is 32 bytes, this is {len(raw)}")
    return raw


@dataclass(frozen=True)
class Trust:
    """What a manifest's signature is checked against."""

    public_keys: tuple[bytes, ...] = ()  # Ed25519, raw: version 2 manifests
    hmac_key: bytes | None = None  # the server's secret: version 1 manifests only


def signature_problem(manifest: dict[str, Any], trust: Trust) -> str | None:
    """Why the manifest's signature does not hold under `trust`; None when it does."""
    if manifest.get("manifest_version") == 1:
        if not trust.hmac_key:
            return ("a version 1 manifest is signed with the server's secret (HMAC): it can be checked "
                    "only where that secret is (manage.py verify_export on the server that made it)")
        expected = hmac.new(trust.hmac_key, canonical(manifest), hashlib.sha256).hexdigest()
        if hmac.compare_digest(expected, str(manifest.get("signature", ""))):
            return None
        return "the manifest's signature does not match: it was altered or forged (or signed with another key)"
    signed = manifest.get("signed_with")
    if not isinstance(signed, dict) or signed.get("alg") != SIGNATURE_ALG:
        return f"the manifest is not signed with {SIGNATURE_ALG} (no or another `signed_with`)"
    trusted = {key_id(raw): raw for raw in trust.public_keys}
    claimed = str(signed.get("key_id"))
    if claimed not in trusted:
        known = ", ".join(sorted(trusted)) or "none given"
        return (f"the manifest is signed with key {claimed!r}, which is not a trusted key ({known}): "
                f"forged, or signed by a server whose public key you do not hold")
    try:
        signature = base64.b64decode(str(manifest.get("signature", "")), validate=True)
        Ed25519PublicKey.from_public_bytes(trusted[claimed]).verify(signature, canonical(manifest))
    except (binascii.Error, InvalidSignature):
        return "the manifest's signature does not match: it was altered or forged"
    return None


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


def verify(stream: BinaryIO, manifest: dict[str, Any], trust: Trust) -> Verdict:
    """Check an export file against its manifest; the first problem found is the answer."""
    problem = signature_problem(manifest, trust)
    if problem is not None:
        return Verdict(False, problem)
    fmt, columns = manifest.get("format"), manifest.get("columns") or []
    if fmt not in FORMATS:
        return Verdict(False, f"the manifest names an unknown format {fmt!r}")
    whole = hashlib.sha256()
    try:
        return _check_records(records_of(_Hashing(stream, whole), fmt), fmt, columns, manifest, whole)
    except Unreadable as exc:
        return Verdict(False, str(exc), exc.line)


# Exports end lines in LF; a text-mode copy or an editor makes that CR LF: say so, not "not a record".
CRLF_CHANGED = "ends in CR LF where the export wrote LF: its line endings were changed (a text-mode copy, an editor)"


def _check_records(lines: Iterator[tuple[int, bytes, bool]], fmt: str, columns: list[str],
                   manifest: dict[str, Any], whole: Any) -> Verdict:
    previous = chain_start(str(manifest.get("export_id")), fmt, columns)
    seq = 0
    if fmt == "csv":
        header = next(lines, None)
        if header is None or header[1] != ",".join(columns + ["hash"]).encode():
            why = CRLF_CHANGED if header and header[1].endswith(b"\r") else "not the header this manifest's columns make"
            return Verdict(False, f"line 1: {why}", 1)
    mark = None
    for number, line, ended in lines:
        if line.endswith(b"\r"):  # a record ends in its hash (hex), a mark in a letter or "}": never CR
            return Verdict(False, f"line {number}: {CRLF_CHANGED}", number)
        if mark is not None:
            return Verdict(False, f"line {number}: a line after the mark that the export was interrupted "
                                  f"(added)", number)
        mark = interruption(fmt, line)
        if mark is not None:  # its bytes are checked with the file's SHA-256 below
            continue
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
    if manifest.get("gaps") or not manifest.get("complete", False):
        return Verdict(True, f"unaltered: {seq} records as exported, but the range is NOT complete "
                             f"({incomplete(manifest)})", None, complete=False)
    tail = f"last hash {previous[:16]}…" if seq else "an empty export"
    return Verdict(True, f"complete and unaltered: {seq} records, {tail}", None, complete=True)


def incomplete(manifest: dict) -> str:
    """Why a manifest is not complete, in words: its gaps, an open range, records its server could
    not finish (interrupted), calls the node index could not tell of (a node-filtered export)."""
    gaps = manifest.get("gaps") or []
    missing = ", ".join(f"{gap_count(g)} {g.get('reason')}" for g in gaps)
    why = [f"{'events' if manifest.get('kind') == 'audit' else 'calls'} missing from the records: {missing}"] if gaps else []
    if manifest.get("still_open"):
        stored_up_to = manifest["still_open"].get("stored_up_to") or "no point known yet"  # None: not known
        why.append(f"the range is still open: {manifest['still_open'].get('reason')}, stored up to {stored_up_to}")
    if manifest.get("interrupted"):
        why.append(f"the export was INTERRUPTED after {manifest['interrupted'].get('after_records')} records: "
                   f"{manifest['interrupted'].get('reason')}")
    if manifest.get("unindexed"):
        why.append(f"{manifest['unindexed'].get('calls')} calls of the selection not checked for the node: "
                   f"{manifest['unindexed'].get('reason')}")
    return "; ".join(why) or "see the manifest"


def gap_count(gap: dict) -> Any:
    """A gap's count: `events` in an audit export's gap (pruned audit events), `calls` in a calls
    export's, and in audit exports whose manifests were made before they said `events`."""
    return gap["events"] if "events" in gap else gap.get("calls")


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


# --- the auditor's command -------------------------------------------------------------------


def manifest_beside(file: str) -> str:
    """Where an export's manifest is when none is named: beside it, as `manage.py export -o FILE` writes it."""
    return f"{file}.manifest.json"


def main(argv: list[str] | None = None) -> int:
    """Exit status 0 when complete and unaltered; 1 when not; 2 when it could not be checked."""
    parser = argparse.ArgumentParser(description="Check an extproxy export file against its signed manifest.")
    parser.add_argument("file")
    parser.add_argument("manifest", nargs="?", help="default: FILE.manifest.json (where extproxy's export -o FILE puts it)")
    parser.add_argument("--public-key", action="append", required=True, metavar="KEY",
                        help="a file holding the server's public key (GET /api/export/signing-key/); "
                             "may be given more than once (replicas, earlier keys)")
    args = parser.parse_args(argv)
    args.manifest = args.manifest or manifest_beside(args.file)
    try:
        keys = []
        for path in args.public_key:
            with open(path, "rb") as handle:
                keys.append(read_public_key(handle.read()))
        with open(args.manifest, "rb") as handle:
            manifest = json.load(handle)
        if not isinstance(manifest, dict):
            raise ValueError(f"{args.manifest}: not a manifest (expected a JSON object)")
        with open(args.file, "rb") as handle:
            verdict = verify(handle, manifest, Trust(public_keys=tuple(keys)))
    except (OSError, ValueError) as exc:
        print(f"cannot check: {exc}", file=sys.stderr)
        return 2
    print(f"{args.file}: {verdict.message}")
    return 0 if verdict.ok and verdict.complete else 1


if __name__ == "__main__":
    sys.exit(main())
