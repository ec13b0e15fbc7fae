"""The Trace: what the hot path hands over for one call, and its spooled byte form.

Owns the Trace dataclass (built by the engine and the combined form, never decoded there) and
its encoding for the spool (msgpack through msgspec: bytes stay bytes, no base64, one copy;
then, by default, deflated: see `encode_trace`); and the spool's other kind of record, the gap
record: `Drops` by reason, calls the serving process answered and could not hand over (see
dropcount.py), stored by the recorder as gaps.
Must not decode bodies, judge, or touch Django: it runs on the hot path's side.
"""
from __future__ import annotations

import os
import struct
import time
from dataclasses import dataclass, field
from typing import Any

import msgspec

# ISA-L's deflate (isal is in requirements.txt): a 6 kB names-mode record in ~8 µs (2.7x
# smaller); zlib's level 1 takes ~3x that. The streams are plain raw deflate, which zlib reads too.
from isal import isal_zlib as _deflate

# What a damaged stream raises. isal's type stub declares `error` an instance; it is the class
# igzip_lib.IsalError.
_DeflateError: type[Exception] = _deflate.error  # type: ignore[assignment]

NOT_CALLED = "not-called"  # the finding of a combined call's part that was never sent (combined.py)
FORMAT = 1  # bumped when the spooled form changes; a recorder refuses what it cannot read

# A deflated record: this byte, the packed record's length (4 bytes, little-endian), then the
# packed record as raw deflate. 0xC1 is the one byte msgpack never uses, so no packed record
# (a Trace's starts with 0x92, a gap record's with 0x93) can be taken for a deflated one, and a
# spool written before compression existed reads as it did.
DEFLATED_START = 0xC1
_DEFLATED_HEAD = struct.Struct("<BI")
COMPRESS_MIN = 512  # smaller packed records (a tiny call) are spooled as they are: too little to gain


def new_call_id() -> str:
    """A version 7 UUID's text (RFC 9562): the Unix time in milliseconds, then random bits.

    Time-ordered, so that the call table's unique index takes each new id at its right-hand
    edge: with random (version 4) ids every insert landed on a random page of that index, and
    the recorder's writes slowed as the table grew (bench/README.md, "Fourteenth pass"). Made
    without a UUID object: this runs on every call.
    """
    raw = bytearray((time.time_ns() // 1_000_000).to_bytes(6, "big") + os.urandom(10))
    raw[6] = raw[6] & 0x0F | 0x70  # version 7
    raw[8] = raw[8] & 0x3F | 0x80  # RFC 9562 variant
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


@dataclass(slots=True)
class Trace:
    """What happened on one call, as raw as the hot path had it."""

    verb: str
    backend: str
    url: str  # the backend's urlPrefix (the scheduler's name for an extender)
    started_at: float
    finished_at: float
    request_body: bytes
    status: int | None  # the backend's HTTP status; None when it gave no answer
    response_body: bytes  # the backend's body
    answered_status: int  # what extproxy sent the scheduler
    answered_body: bytes | None = None  # only when extproxy answered other bytes than the backend's
    transport_error: str = ""
    timed_out: bool = False
    node_cache_capable: bool = False
    weight: int = 0
    form: str = "per-backend"
    verb_string: str = ""  # the verb as configured (may differ from `verb`, e.g. predicates/gpu)
    # semantics.Verdict when the hot path already judged the reply (combined). Not spooled:
    # the recorder process judges the bytes again, off the hot path.
    verdict: Any = None
    backend_calls: list["Trace"] = field(default_factory=list)
    call_id: str = field(default_factory=new_call_id)  # unique; becomes Call.call_id
    # Findings the hot path already knows ({"kind", "detail"}), e.g. reply-truncated: then
    # response_body is only the reply's first EXTPROXY_MAX_REPLY_BYTES and cannot be judged.
    findings: list[dict[str, Any]] = field(default_factory=list)
    # The call's slot in the serving process's tally of unsettled calls (unsettled.py); -1: none.
    # Not spooled.
    tally_slot: int = -1

    @property
    def truncated(self) -> bool:
        return any(f.get("kind") == "reply-truncated" for f in self.findings)

    @property
    def not_called(self) -> bool:
        """A combined call's part extproxy did not send (the finding `not-called`: no Node
        objects for a full-object backend, no full Pod for a victim): the backend was sent
        nothing, so the part has no latency to observe and no request to mirror. A loop rather
        than any() over a generator: the engine asks this of every part on the hot path."""
        for finding in self.findings:
            if finding.get("kind") == NOT_CALLED:
                return True
        return False

    def size(self) -> int:
        return len(self.request_body) + len(self.response_body) + sum(c.size() for c in self.backend_calls)


class _Spooled(msgspec.Struct, array_like=True):
    """The spooled form of a Trace: positional, so a record carries no field names."""

    verb: str
    backend: str
    url: str
    started_at: float
    finished_at: float
    request_body: bytes
    status: int | None
    response_body: bytes
    answered_status: int
    answered_body: bytes | None
    transport_error: str
    timed_out: bool
    node_cache_capable: bool
    weight: int
    form: str
    verb_string: str
    call_id: str
    findings: list[dict[str, Any]]
    backend_calls: list["_Spooled"]


class _Record(msgspec.Struct, array_like=True):
    format: int
    trace: _Spooled


def _spooled(t: Trace) -> _Spooled:
    return _Spooled(
        t.verb, t.backend, t.url, t.started_at, t.finished_at, bytes(t.request_body), t.status,
        bytes(t.response_body), t.answered_status, None if t.answered_body is None else bytes(t.answered_body),
        t.transport_error, t.timed_out, t.node_cache_capable, t.weight, t.form, t.verb_string, t.call_id,
        list(t.findings), [_spooled(c) for c in t.backend_calls],
    )


def _trace(s: _Spooled) -> Trace:
    return Trace(
        verb=s.verb, backend=s.backend, url=s.url, started_at=s.started_at, finished_at=s.finished_at,
        request_body=s.request_body, status=s.status, response_body=s.response_body,
        answered_status=s.answered_status, answered_body=s.answered_body, transport_error=s.transport_error,
        timed_out=s.timed_out, node_cache_capable=s.node_cache_capable, weight=s.weight, form=s.form,
        verb_string=s.verb_string, call_id=s.call_id, findings=s.findings,
        backend_calls=[_trace(c) for c in s.backend_calls],
    )


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_Record)


class UnreadableRecord(Exception):
    """A spooled record this recorder cannot turn back into a Trace."""


def encode_trace(trace: Trace, compress: bool = True, smallest: int = COMPRESS_MIN) -> bytes:
    """The spooled form of `trace`: packed, then deflated unless `compress` is off, it is
    smaller than `smallest` (or COMPRESS_MIN) packed, or it gains nothing. Deflated at ISA-L's
    level 0, because this runs on the serving core: names-mode calls
    shrink ~2.7x (N=100) to ~5x (N=1000), full-object calls 5-20x, so the spool holds that many
    more calls at its bound and the serving process writes that much less to the page cache
    (bench/README.md, "Fifth pass")."""
    packed = _encoder.encode(_Record(FORMAT, _spooled(trace)))
    if not compress or len(packed) < max(smallest, COMPRESS_MIN):
        return packed
    deflated = _deflate.compress(packed, 0, -15)
    if len(deflated) + _DEFLATED_HEAD.size >= len(packed):
        return packed
    return _DEFLATED_HEAD.pack(DEFLATED_START, len(packed)) + deflated


def record_size(data: bytes | memoryview) -> int:
    """The bytes a spooled record takes once decoded: what the recorder bounds its batches by."""
    if len(data) >= _DEFLATED_HEAD.size and data[0] == DEFLATED_START:
        return _DEFLATED_HEAD.unpack_from(data)[1]
    return len(data)


def inflate_record(data: bytes | memoryview) -> bytes | memoryview:
    """A spooled record's packed (msgpack) bytes: a deflated one inflated, others as they are.
    UnreadableRecord when they do not inflate to exactly the length its head names."""
    if not data or data[0] != DEFLATED_START:
        return data
    if len(data) < _DEFLATED_HEAD.size:
        raise UnreadableRecord("deflated spool record shorter than its head")
    size = _DEFLATED_HEAD.unpack_from(data)[1]
    inflater = _deflate.decompressobj(-15)
    try:
        # max_length: a damaged stream cannot inflate past what the head promised
        packed = inflater.decompress(memoryview(data)[_DEFLATED_HEAD.size :], size + 1)
    except _DeflateError as exc:
        raise UnreadableRecord(f"deflated spool record does not inflate: {exc}") from None
    if len(packed) != size or not inflater.eof:
        raise UnreadableRecord(f"deflated spool record inflates to {len(packed)} bytes, its head says {size}")
    return packed


def decode_trace(data: bytes | memoryview) -> Trace:
    data = inflate_record(data)
    try:
        record = _decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise UnreadableRecord(str(exc)) from None
    if record.format != FORMAT:
        raise UnreadableRecord(f"spool record format {record.format}, this recorder reads {FORMAT}")
    return _trace(record.trace)


# --- gap records ---------------------------------------------------------------------------


class Drops(msgspec.Struct, array_like=True):
    """Calls answered and not handed over for one reason, between two instants (epoch seconds:
    when the first and the last of them was dropped)."""

    reason: str
    calls: int
    first_at: float
    last_at: float


class _GapRecord(msgspec.Struct, array_like=True):
    format: int
    kind: str  # "gap": a third element, so a gap record is a 3-array and a call's is a 2-array
    drops: list[Drops]


GAP_RECORD_START = 0x93  # msgpack's fixarray of 3: what a gap record starts with (a Trace's: 0x92)
_gap_decoder = msgspec.msgpack.Decoder(_GapRecord)


def encode_gap(drops: list[Drops]) -> bytes:
    return _encoder.encode(_GapRecord(FORMAT, "gap", drops))


def decode_record(data: bytes | memoryview) -> Trace | list[Drops]:
    """A spooled record: a call's Trace, or a gap record's Drops."""
    if not data or data[0] != GAP_RECORD_START:  # gap records are never deflated (too small)
        return decode_trace(data)
    try:
        record = _gap_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise UnreadableRecord(str(exc)) from None
    if record.format != FORMAT or record.kind != "gap":
        raise UnreadableRecord(f"spool gap record format {record.format} {record.kind!r}, this recorder reads {FORMAT}")
    return record.drops
