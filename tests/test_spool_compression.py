"""Deflated spool records (recording/trace.py): what is deflated, that it reads back as it was,
that a damaged one is refused rather than misread, that a spool holding both forms drains
whole, and that the recorder's batch bound counts what a record takes once decoded."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from extproxy.config import RecordingConfig, RedactionConfig
from extproxy.bodies import response_of
from extproxy.models import Call
from extproxy.recording import SpoolRecorder, Trace
from extproxy.recording.spool import ALWAYS_DEFLATED, SpoolSettings
from extproxy.recording.spool_reader import SpoolReader
from extproxy.recording.spool_writer import SpoolWriter
from extproxy.recording.trace import (
    COMPRESS_MIN, DEFLATED_START, UnreadableRecord, decode_record, decode_trace, encode_trace, record_size,
)
from extproxy.recording.writer import Drainer
from tests.conftest import fixture_bytes

NAMES_REQUEST = fixture_bytes("filter-request.nodecache-true.json")
NAMES_REPLY = fixture_bytes("filter-result.nodecache-true.json")
FULL_REQUEST = fixture_bytes("filter-request.nodecache-false.json")


def trace(request: bytes = NAMES_REQUEST, reply: bytes = NAMES_REPLY, **fields) -> Trace:
    now = time.time()
    values = dict(verb="filter", backend="gpu", url="http://gpu/scheduler", started_at=now, finished_at=now + 0.002,
                  request_body=request, status=200, response_body=reply, answered_status=200,
                  node_cache_capable=True, weight=1, findings=[{"kind": "slow", "detail": "x"}])
    values.update(fields)
    return Trace(**values)


def fields(t: Trace) -> dict:
    return {name: getattr(t, name) for name in Trace.__slots__ if name != "verdict"}


@pytest.mark.parametrize("request_body", [NAMES_REQUEST, FULL_REQUEST], ids=["names", "full-objects"])
def test_a_call_is_spooled_deflated_and_reads_back_exactly_as_it_was(request_body):
    original = trace(request_body, backend_calls=[trace(request_body, backend="b2")], form="combined")
    packed = encode_trace(original, compress=False)
    deflated = encode_trace(original)
    assert packed[0] == 0x92 and deflated[0] == DEFLATED_START
    assert len(deflated) * 2 < len(packed)
    assert record_size(deflated) == record_size(packed) == len(packed)
    for record in (packed, deflated):
        assert fields(decode_trace(record)) == fields(original)
        assert fields(decode_record(memoryview(record))) == fields(original)


def test_what_deflate_cannot_shrink_or_is_tiny_is_spooled_as_packed():
    noise = trace(os.urandom(20_000), os.urandom(20_000))
    tiny = trace(b"{}", b"{}", findings=[])
    for t in (noise, tiny):
        record = encode_trace(t)
        assert record[0] == 0x92 and record == encode_trace(t, compress=False)
        assert fields(decode_trace(record)) == fields(t)
    assert len(encode_trace(tiny)) < COMPRESS_MIN


def damaged() -> dict[str, bytes]:
    good = encode_trace(trace())
    head, stream = good[:5], good[5:]
    size = int.from_bytes(head[1:5], "little")
    return {
        "stream cut short": good[: len(good) // 2],
        "head claims more": bytes([DEFLATED_START]) + (size + 1).to_bytes(4, "little") + stream,
        "head claims less": bytes([DEFLATED_START]) + (size - 1).to_bytes(4, "little") + stream,
        "not deflate": head + b"\xff" * 64,
        "only a head byte": bytes([DEFLATED_START, 1]),
        "inflates to garbage": bytes([DEFLATED_START]) + (3).to_bytes(4, "little") + bytes.fromhex("4b4c4a0600"),
    }


@pytest.mark.parametrize("name", list(damaged()))
def test_a_damaged_deflated_record_is_refused_not_misread(name):
    record = damaged()[name]
    with pytest.raises(UnreadableRecord):
        decode_trace(record)
    with pytest.raises(UnreadableRecord):
        decode_record(record)


def test_a_spool_written_before_and_after_compression_drains_whole(transactional_db, tmp_path):
    """An upgrade finds packed records in the spool; the new serving process adds deflated ones."""
    spooled: list[Trace] = []
    for compress in (False, True):
        # compress_above=0: every record deflated, as the spool's backlog rule does once behind
        recorder = SpoolRecorder(RecordingConfig(), SpoolSettings(root=tmp_path / "spool", compress=compress,
                                                                  compress_above=0))
        recorder.start()
        for i in range(5):
            t = trace(response_body=NAMES_REPLY.replace(b"}", b" }", i))  # distinct replies, to compare below
            spooled.append(t)
            assert recorder.submit(t)
        assert recorder.stop()
    reader = SpoolReader(tmp_path / "spool")
    forms = [entry.payload[0] == DEFLATED_START for entry in reader.read(100, 1 << 30).entries]
    reader.close()
    assert forms == [False] * 5 + [True] * 5
    drainer = Drainer(tmp_path / "spool", RecordingConfig(), RedactionConfig())
    drainer.run(until_idle=True)
    drainer.close()
    assert drainer.counters.written == 10 and drainer.counters.raw == 0 and drainer.counters.dropped == {}
    stored = {c.call_id: c for c in Call.objects.all()}
    assert sorted(stored) == sorted(t.call_id for t in spooled)
    for t in spooled:
        assert response_of(stored[t.call_id]).data == t.response_body
        assert stored[t.call_id].pod_name == "trainer-7d9c5b6f8-b4x2s"  # read from the request


def spooled_forms(root) -> list[bool]:
    """Whether each record in the spool, in order, is deflated."""
    reader = SpoolReader(root)
    try:
        return [entry.payload[0] == DEFLATED_START for entry in reader.read(10_000, 1 << 30).entries]
    finally:
        reader.close()


def test_records_are_deflated_only_while_the_recorder_is_behind(transactional_db, tmp_path):
    """Deflating costs the serving core; it pays only once the recorder is behind (the spool's
    room then counts). Plain while less than compress_above waits to be stored, deflated from
    there, plain again once the recorder has stored it, though its segment is still there."""
    plain = len(encode_trace(trace(), compress=False))
    settings = SpoolSettings(root=tmp_path / "spool", compress_above=10 * plain, fsync="never")
    recorder = SpoolRecorder(RecordingConfig(), settings)
    recorder.start()
    for _ in range(30):  # one a round, as calls come
        assert recorder.submit(trace())
        assert recorder.flush(20)
    forms = spooled_forms(settings.root)
    assert forms == [False] * 10 + [True] * 20, forms  # at 10 records waiting, behind: deflated
    drainer = Drainer(settings.root, RecordingConfig(), RedactionConfig())
    drainer.run(until_idle=True)  # stored; the one segment they are in stays, being written
    drainer.close()
    assert drainer.counters.written == 30
    time.sleep(1.1)  # the writer reads the recorder's cursor again at most every second
    for _ in range(3):
        assert recorder.submit(trace())
        assert recorder.flush(20)
    assert spooled_forms(settings.root) == [False] * 3  # caught up: plain again
    drainer = Drainer(settings.root, RecordingConfig(), RedactionConfig())
    drainer.run(until_idle=True)
    drainer.close()
    recorder.stop()
    assert Call.objects.count() == 33


def test_an_unreadable_spool_deflates_and_another_writers_backlog_counts(tmp_path, monkeypatch, caplog):
    from extproxy.recording import spool_writer

    plain = len(encode_trace(trace(), compress=False))
    settings = SpoolSettings(root=tmp_path / "spool", compress_above=10 * plain, fsync="never")
    recorder = SpoolRecorder(RecordingConfig(), settings)
    recorder.start()

    def unreadable(*args):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(spool_writer, "undrained_bytes", unreadable)
    assert recorder.submit(trace()) and recorder.flush(20)  # spooled all the same, deflated to save room
    monkeypatch.undo()
    assert recorder.submit(trace()) and recorder.flush(20)  # the thread goes on; the backlog is small
    assert spooled_forms(settings.root) == [True, False]
    assert recorder.spooled == 2 and "spool not readable: OSError: [Errno 24] Too many open files" in caplog.text

    other = SpoolWriter(settings, "serve-2")  # a second serving process, its calls not yet stored
    assert other.append([encode_trace(trace(), compress=False)] * 12) == [True] * 12
    other.close()
    time.sleep(1.1)  # the writer reads the cursors again at most every second
    assert recorder.submit(trace()) and recorder.flush(20)
    recorder.stop()
    assert spooled_forms(settings.root) == [True, False, True] + [False] * 12  # by directory: serve, serve-2


def test_a_small_spool_deflates_every_record_from_an_eighth_of_its_bound():
    settings = SpoolSettings(root=Path("unused"), max_bytes=8000, compress_above=32 << 20)
    names, full = trace(), trace(FULL_REQUEST, node_cache_capable=False)
    assert settings.smallest_deflated(999, names) == ALWAYS_DEFLATED and settings.smallest_deflated(1000, names) == 0
    assert settings.smallest_deflated(0, full) == 0
    assert SpoolSettings(root=Path("unused"), compress_above=0).smallest_deflated(0, names) == 0


def test_full_object_and_large_records_are_deflated_even_while_the_recorder_keeps_up(tmp_path):
    """Written plain, their bytes cost the serving core more than deflating them."""
    many = json.loads(NAMES_REQUEST)
    many["NodeNames"] = [f"node-{i:05d}" for i in range(30_000)]
    large = trace(json.dumps(many).encode())
    assert len(encode_trace(large, compress=False)) >= ALWAYS_DEFLATED > len(encode_trace(trace(), compress=False))
    full = trace(FULL_REQUEST, node_cache_capable=False)  # a small cluster's: still deflated
    settings = SpoolSettings(root=tmp_path / "spool", fsync="never")
    recorder = SpoolRecorder(RecordingConfig(), settings)
    recorder.start()
    for t in (trace(), full, large):
        assert recorder.submit(t) and recorder.flush(20)
    recorder.stop()
    assert spooled_forms(settings.root) == [False, True, True]
    off = SpoolRecorder(RecordingConfig(), SpoolSettings(root=tmp_path / "off", fsync="never", compress=False))
    off.start()
    assert off.submit(full) and off.submit(large) and off.flush(20)
    off.stop()
    assert spooled_forms(tmp_path / "off") == [False, False]


def test_at_the_same_bound_the_spool_holds_more_than_twice_the_calls(tmp_path):
    bound = 40 * len(encode_trace(trace(), compress=False))
    held = {}
    for compress in (False, True):
        recorder = SpoolRecorder(RecordingConfig(), SpoolSettings(root=tmp_path / str(compress), max_bytes=bound,
                                                                  compress=compress))
        recorder.start()
        for _ in range(200):
            assert recorder.submit(trace())
        assert recorder.flush(20)
        held[compress] = recorder.spooled
        assert recorder.spooled + recorder.drops.counts["spool-full"] == 200  # the rest counted, none lost
        recorder.stop()
    assert held[False] < 40 and held[True] > 2 * held[False]


def test_the_recorders_batch_bound_counts_records_as_decoded(tmp_path):
    """A batch of deflated full-object records must not inflate to many times BATCH_BYTES."""
    record = encode_trace(trace(FULL_REQUEST))
    writer = SpoolWriter(SpoolSettings(root=tmp_path / "spool", fsync="never"))
    writer.append([record] * 3)
    writer.close()
    decoded = record_size(record)
    assert decoded > 2 * len(record)
    reader = SpoolReader(tmp_path / "spool")
    try:
        assert len(reader.read(100, decoded + 1, record_size).entries) == 2  # stops once the bound is reached
        reader.rewind()
        assert len(reader.read(100, decoded + 1).entries) == 3  # by spooled length: all three
    finally:
        reader.close()


def test_the_recorder_reads_a_batch_of_deflated_calls_by_their_decoded_size(transactional_db, tmp_path, monkeypatch):
    """Through the Drainer itself: its batch stops at BATCH_BYTES of decoded records."""
    from extproxy.recording import writer as writer_module

    record = encode_trace(trace(FULL_REQUEST, node_cache_capable=False))
    spool = SpoolWriter(SpoolSettings(root=tmp_path / "spool", fsync="never"))
    spool.append([encode_trace(trace(FULL_REQUEST, node_cache_capable=False)) for _ in range(3)])
    spool.close()
    monkeypatch.setattr(writer_module, "BATCH_BYTES", record_size(record) + 1)
    drainer = Drainer(tmp_path / "spool", RecordingConfig(), RedactionConfig())
    try:
        assert drainer.drain_batch() == 2 and drainer.drain_batch() == 1 and drainer.drain_batch() == 0
    finally:
        drainer.close()
    assert Call.objects.count() == 3
