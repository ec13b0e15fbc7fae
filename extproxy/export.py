"""Exports with proof: decision logs (and the audit trail) as CSV or JSON Lines, each record
chained to the previous one by a hash, and a signed manifest that says what the file must be.

Records stream in constant memory: calls are read in chunks (`.iterator()`), each record is
encoded and hashed as it goes, and the caller receives chunks of bytes. The chain:

    h0   = sha256("extproxy-export/1" \n export_id \n format \n columns)
    h(i) = sha256(h(i-1) hex \n body(i))

where body(i) is the record's bytes as written, without its hash: in JSON Lines the object
without its last key `"hash"`; in CSV the row without its last column `hash`. So the hash is
checked on the exact bytes in the file, never on a re-encoding. The manifest (filters, counts,
first and last hash, time range, who and when, the recorder's gaps in the range, the file's
SHA-256) is signed with the server's Ed25519 key (exportsigning.py), so that an auditor checks
it with the public key alone.

`exportproof.verify` checks a file against a manifest and names the first bad line and what is wrong;
exportstream.py serves the chunks and saves the manifest.
This module reads records and writes only Export rows (the manifests); it never alters calls.
"""
from __future__ import annotations

import csv
import hashlib
import logging
import re
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec
from django.db.models import BinaryField, Case, F, QuerySet, When
from django.utils import timezone

from . import exportproof as proof
from . import exportsigning as signing
from .timetext import iso_z

CHUNK_BYTES = 64 * 1024  # bytes handed to the server at a time
CALLS_PER_READ = 1000  # calls read (and bind nodes looked up) per database round trip

CALL_COLUMNS = [
    "seq", "kind", "call", "time", "verb", "call_backend", "backend", "namespace", "pod", "pod_uid", "node",
    "result", "reason", "score", "weighted_score", "latency_ms", "outcome", "http_status", "error", "attempt",
]
AUDIT_COLUMNS = ["seq", "event", "time", "actor", "action", "target", "source", "detail"]
# Every text in a record may come from outside: a client of the extender endpoint names the pod,
# its namespace and uid, a backend writes reasons and errors, a replay's caller the audit target.
# A spreadsheet must not run any of it as a formula, so a CSV cell (or a line of a cell, after a
# line break) starting with one of these gets a leading apostrophe; JSON Lines keep text as is.
FORMULA_START = "=+-@\t\r"
_LINE_START = re.compile(r"(\r\n|\r|\n)([=+\-@\t])")
JSON_COLUMNS = {"detail"}  # objects: JSON text in a CSV cell
CALL_FIELDS = ("id", "started_at", "finished_at", "verb", "backend", "pod_namespace", "pod_name", "pod_uid",
               "outcome", "http_status", "error", "attempt", "decisions_blob")


# --- records ---------------------------------------------------------------------------------


@dataclass
class Tally:
    calls: int = 0
    decision_records: int = 0
    call_records: int = 0
    first_time: datetime | None = None
    last_time: datetime | None = None
    passed_over: int = 0  # node-filtered: candidate binds read and left out (another node's, or unread)
    unread_binds: int = 0  # ... of which their request names no node that can be read

    def saw(self, when: datetime) -> None:
        self.first_time = self.first_time or when
        self.last_time = when


def call_records(calls: QuerySet, tally: Tally, node: str | None = None) -> Iterator[list[Any]]:
    """One record per decision, one call-level record for a call without decisions (errors,
    timeouts, bind, preempt), and one per backend part of a combined call that did not answer
    ok; oldest call first. Values in CALL_COLUMNS order, seq left 0.

    node: the export's node filter. Its candidates (api.filters.ExportCallFilter) include binds
    the node index cannot speak for: a bind is kept only when its request names `node`."""
    from .models import Call

    # A bind's request (its node) with its row: the index misses some binds (off, raw, set gone).
    bind_request = Case(When(verb="bind", then=F("request_body")), default=None, output_field=BinaryField())
    rows = calls.order_by("started_at", "id").annotate(bind_request=bind_request).values_list(
        *CALL_FIELDS, "bind_request")
    pending: list[tuple] = []
    for row in rows.iterator(chunk_size=CALLS_PER_READ):
        pending.append(row)
        if len(pending) >= CALLS_PER_READ:
            yield from _records_of(pending, Call, tally, node)
            pending = []
    if pending:
        yield from _records_of(pending, Call, tally, node)


def _failed_parts(Call: Any, rows: list[tuple]) -> dict[int, list[tuple]]:
    """Per combined call of the chunk: its backends' parts that did not answer ok (one query)."""
    from .models import BackendCall

    combined = [r[0] for r in rows if r[4] == "combined"]
    parts: dict[int, list[tuple]] = {}
    if combined:
        failed = (BackendCall.objects.filter(call_id__in=combined).exclude(outcome="ok").order_by("started_at", "id")
                  .values_list("call_id", "backend", "started_at", "finished_at", "outcome", "http_status", "error"))
        for part in failed:
            parts.setdefault(part[0], []).append(part)
    return parts


def _records_of(rows: list[tuple], Call: Any, tally: Tally, node: str | None) -> Iterator[list[Any]]:
    from .bodies import bind_target

    # A combined call answers for all its backends: one that timed out or failed shows only in
    # its part, so each such part is a record of its own (kind backend-call).
    failed_parts = _failed_parts(Call, rows)
    for (pk, started, finished, verb, backend, namespace, name, uid, outcome, status, error, attempt, blob,
         request) in rows:
        target = bind_target(request) if request is not None else None
        if node is not None and verb == "bind" and target != node:
            tally.passed_over += 1
            tally.unread_binds += target is None
            continue
        tally.calls += 1
        tally.saw(started)
        when = iso_z(started)
        latency = round((finished - started).total_seconds() * 1000, 3)
        decisions = msgspec.json.decode(zlib.decompress(bytes(blob))) if blob else []
        for d in decisions:
            tally.decision_records += 1
            yield [0, "decision", pk, when, verb, backend, d.get("backend", backend), namespace, name, uid,
                   d.get("node"), d.get("result"), d.get("reason"), d.get("score"), d.get("weighted_score"),
                   latency, outcome, status, error, attempt]
        if not decisions:
            tally.call_records += 1
            yield [0, "call", pk, when, verb, backend, backend, namespace, name, uid, target, None, None,
                   None, None, latency, outcome, status, error, attempt]
        for _, part, part_started, part_finished, part_outcome, part_status, part_error in failed_parts.get(pk, ()):
            tally.call_records += 1
            yield [0, "backend-call", pk, when, verb, backend, part, namespace, name, uid, target, None, None, None,
                   None, round((part_finished - part_started).total_seconds() * 1000, 3), part_outcome, part_status,
                   part_error, attempt]


def audit_records(events: QuerySet, tally: Tally) -> Iterator[list[Any]]:
    rows = events.order_by("at", "id").values_list("id", "at", "actor", "action", "target", "source", "detail")
    for pk, at, actor, action, target, source, detail in rows.iterator(chunk_size=CALLS_PER_READ):
        tally.calls += 1
        tally.call_records += 1
        tally.saw(at)
        yield [0, pk, iso_z(at), actor, action, target, source, detail]


# --- encoding --------------------------------------------------------------------------------


class _Rows:
    """What csv.writer writes to: keeps the last row (the C writer quotes, we keep the bytes)."""

    def __init__(self) -> None:
        self.last = ""

    def write(self, row: str) -> None:
        self.last = row


def guarded(value: str) -> str:
    """A CSV cell's text that no spreadsheet runs as a formula, on its first line or any other.
    NUL becomes U+FFFD (as the database stores it in text): spreadsheets cut a cell at NUL."""
    if value[0] in FORMULA_START:
        value = "'" + value
    if "\n" in value or "\r" in value:
        value = _LINE_START.sub(r"\1'\2", value)
    return value.replace("\x00", "\ufffd")


def _json_text(value: Any) -> str:
    from .recording.bulk import storable

    try:
        return msgspec.json.encode(value).decode()
    except UnicodeEncodeError:  # a lone surrogate stored before texts were made storable: "?"
        return msgspec.json.encode(storable(value)).decode()


def csv_encoder(columns: list[str]) -> Callable[[list[Any]], bytes]:
    rows = _Rows()
    # "\r\n" as the terminator makes the C writer quote a field holding \r or \n (it quotes
    # only the terminator's characters); with "" a line break went out unquoted and split the record.
    writer = csv.writer(rows, lineterminator="\r\n")
    structured = [i for i, c in enumerate(columns) if c in JSON_COLUMNS]
    formula_start = FORMULA_START

    def encode(values: list[Any]) -> bytes:
        for i in structured:
            if values[i] is not None:
                values[i] = _json_text(values[i])
        for i, value in enumerate(values):
            # isprintable() is false for \n, \r, \t and NUL: one C call keeps the common case fast
            if type(value) is str and value and (value[0] in formula_start or not value.isprintable()):
                values[i] = guarded(value)
        writer.writerow(values)
        # A lone surrogate (stored before texts were made storable) is written as "?", as
        # storable_text stores it: one record must not end the export mid-stream.
        return rows.last[:-2].encode("utf-8", "replace")

    return encode


def ndjson_encoder(columns: list[str]) -> Callable[[list[Any]], bytes]:
    from .recording.bulk import storable

    encoder = msgspec.json.Encoder()

    def encode(values: list[Any]) -> bytes:
        try:
            return encoder.encode(dict(zip(columns, values)))
        except UnicodeEncodeError:  # a lone surrogate stored before texts were made storable: "?", as the CSV
            return encoder.encode(dict(zip(columns, storable(values))))

    return encode


def why_interrupted(exc: Exception, written: int) -> dict[str, Any]:
    """What an interrupted export's mark and manifest say (exportstream.py): the kind of failure
    only, never its text (a database error can quote SQL and values) nor a trace."""
    from django.db import DatabaseError

    what = "the database failed while the records were read" if isinstance(exc, DatabaseError) else \
        "the server failed while the records were made"
    return {"after_records": written, "reason": f"{what} ({type(exc).__name__})"}


# --- one export ------------------------------------------------------------------------------


def range_problem(since: datetime | None, until: datetime) -> str | None:
    """Why [since, until) cannot be exported, or None. Swapped, the two select nothing, and a
    signed empty export that verifies as complete would tell an auditor the range had no calls."""
    if since is not None and until < since:
        return f"until is before since ({iso_z(until)} < {iso_z(since)}): the range holds nothing; swapped?"
    return None


@dataclass
class ExportRun:
    """One export in progress: what it is, who asked, the running chain and counts."""

    kind: str  # "calls" or "audit"
    fmt: str
    filters: dict[str, str]
    since: datetime | None
    until: datetime
    user: str
    source: str
    export_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    started_at: datetime = field(default_factory=timezone.now)
    tally: Tally = field(default_factory=Tally)
    records: int = 0
    first_hash: str | None = None
    last_hash: str | None = None
    file_hash: Any = field(default_factory=hashlib.sha256)
    file_bytes: int = 0
    manifest: dict[str, Any] | None = None
    still_open: dict[str, Any] | None = None  # calls of the range may still arrive (stored_up_to.still_open)
    # Its records failed mid-stream (interruption): after how many, and why; the file ends with a mark.
    interrupted: dict[str, Any] | None = None
    # Node-filtered: the selection's other calls the node index cannot speak for
    # (api.filters.ExportCallFilter.unindexed); counted in the manifest, which is then not complete.
    unindexed_calls: QuerySet | None = None

    @property
    def columns(self) -> list[str]:
        return CALL_COLUMNS if self.kind == "calls" else AUDIT_COLUMNS

    def lines(self, records: Iterable[list[Any]]) -> Iterator[bytes]:
        """Chunks of the file: the header (CSV), then the chained records; the manifest at the end."""
        if self.kind == "calls":  # before the first record is read: what was stored by then
            from .stored_up_to import still_open

            self.still_open = still_open(self.until)
        encode = (csv_encoder if self.fmt == "csv" else ndjson_encoder)(self.columns)
        previous = proof.chain_start(self.export_id, self.fmt, self.columns)
        buffer: list[bytes] = []
        size = 0
        if self.fmt == "csv":
            buffer.append(",".join(self.columns + ["hash"]).encode() + b"\n")
        # The loop inlines proof.link and proof.with_hash (the same bytes; verify uses those):
        # at 50,000+ records/s two calls a record are a tenth of the budget.
        sha256 = hashlib.sha256
        previous_hex = previous.encode()
        csv_format = self.fmt == "csv"
        written = 0  # records whole in the buffer or sent: what an interrupted file holds
        try:
            for count, values in enumerate(records, 1):
                values[0] = count
                body = encode(values)
                previous_hex = sha256(previous_hex + b"\n" + body).hexdigest().encode()
                if csv_format:
                    line = body + b"," + previous_hex + b"\n"
                else:
                    line = body[:-1] + b',"hash":"' + previous_hex + b'"}\n'
                buffer.append(line)
                written = count
                size += len(line)
                if count == 1:
                    self.first_hash = previous_hex.decode()
                if size >= CHUNK_BYTES:
                    self.records = count
                    yield self._emit(buffer)
                    buffer, size = [], 0
        except Exception as exc:  # the records failed mid-stream (a client gone is GeneratorExit: not caught)
            logging.getLogger(__name__).error("export %s: interrupted after %d records", self.export_id, written,
                                              exc_info=exc)
            self.interrupted = why_interrupted(exc, written)
            buffer.append(proof.interrupted_line(self.fmt, written, self.interrupted["reason"]))
        self.records = written
        self.last_hash = previous_hex.decode() if written else None
        if buffer:
            yield self._emit(buffer)
        self.manifest = self.build_manifest() if self.interrupted is None else self.manifest_if_possible()

    def _emit(self, buffer: list[bytes]) -> bytes:
        chunk = b"".join(buffer)
        self.file_hash.update(chunk)
        self.file_bytes += len(chunk)
        return chunk

    def build_manifest(self) -> dict[str, Any]:
        from .gaps import gaps_overlapping

        gaps = gaps_overlapping(self.since, self.until, self.kind)
        unindexed = self.unindexed()
        manifest = {
            "manifest_version": proof.MANIFEST_VERSION,
            "export_id": self.export_id,
            "kind": self.kind,
            "format": self.fmt,
            "columns": self.columns,
            "filters": self.filters,
            "range": {"since": iso_z(self.since), "until": iso_z(self.until)},
            "exported_by": self.user,
            "exported_from": self.source,
            "exported_at": iso_z(self.started_at),
            "finished_at": iso_z(timezone.now()),
            "records": self.records,
            "decision_records": self.tally.decision_records,
            "call_records": self.tally.call_records,
            "calls" if self.kind == "calls" else "events": self.tally.calls,
            "first_time": iso_z(self.tally.first_time),
            "last_time": iso_z(self.tally.last_time),
            "first_hash": self.first_hash,
            "last_hash": self.last_hash,
            "file_sha256": self.file_hash.hexdigest(),
            "file_bytes": self.file_bytes,
            "gaps": gaps,
            "still_open": self.still_open,
            "unindexed": unindexed,
            "interrupted": self.interrupted,
            "complete": not gaps and not self.still_open and not unindexed and not self.interrupted,
        }
        return signing.sign(manifest)

    def manifest_if_possible(self) -> dict[str, Any] | None:
        """An interrupted export's manifest, when the database still answers what it asks (its
        gaps, its unindexed count); else none: the file's mark alone says it was interrupted."""
        from django.db import DatabaseError

        try:
            return self.build_manifest()
        except DatabaseError:
            logging.getLogger(__name__).exception("export %s: interrupted, and no manifest could be made",
                                                  self.export_id)
            return None

    def unindexed(self) -> dict[str, Any] | None:
        """Node-filtered: the selection's calls that the node index cannot tell of (and binds
        whose request cannot be read), which may have involved the node; or None."""
        from .nodeindex import UNINDEXED_REASON

        calls = self.unindexed_calls.count() + self.tally.unread_binds if self.unindexed_calls is not None else 0
        return {"calls": calls, "reason": UNINDEXED_REASON} if calls else None
