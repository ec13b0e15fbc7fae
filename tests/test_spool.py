"""The spool on disk: framing, order across segments and restarts, the cursor, deletion of
what is committed, torn and corrupt tails, the byte bound, one writer/one reader per
directory, the fsync policies, and the status shown on /metrics and /readyz."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from extproxy.recording.observe import spool_status
from extproxy.recording.spool import HEADER, SpoolSettings, segment_name, segments
from extproxy.recording.gathered_write import IOV_MAX
from extproxy.recording.spool_writer import SpoolWriter
from extproxy.recording.spool_reader import SpoolBusy, SpoolReader


def settings(tmp_path, **kw) -> SpoolSettings:
    return SpoolSettings(root=tmp_path / "spool", **kw)


def read_all(reader: SpoolReader) -> list[bytes]:
    return [e.payload for e in reader.read(10_000, 1 << 30).entries]


def test_it_reads_back_in_order_across_segments_and_a_restart_of_the_writer(tmp_path):
    writer = SpoolWriter(settings(tmp_path, segment_bytes=100))
    writer.append([b"a" * 50, b"b" * 50])
    writer.append([b"c" * 50])  # past 100 bytes: a new segment
    writer.close()
    again = SpoolWriter(settings(tmp_path, segment_bytes=100))  # a restart: never appends to an old segment
    again.append([b"d"])
    assert again.seq == 4 and len(segments(again.directory)) == 3
    reader = SpoolReader(tmp_path / "spool")
    assert read_all(reader) == [b"a" * 50, b"b" * 50, b"c" * 50, b"d"]
    again.close()


def test_it_deletes_committed_segments_and_resumes_after_the_cursor(tmp_path):
    writer = SpoolWriter(settings(tmp_path, segment_bytes=10))
    for i in range(5):
        writer.append([f"r{i}".encode() * 10])  # one segment each
    reader = SpoolReader(tmp_path / "spool")
    assert len(reader.read(3, 1 << 20).entries) == 3
    reader.commit()
    assert segments(writer.directory)[0] == 3  # segments 1 and 2 done and deleted; 3 is where the cursor is
    reader.close()
    resumed = SpoolReader(tmp_path / "spool")  # a new recorder process
    assert read_all(resumed) == [b"r3" * 10, b"r4" * 10]
    resumed.commit()
    assert len(segments(writer.directory)) == 1  # the newest segment stays: its writer appends to it
    writer.close()


def test_it_reads_again_what_was_not_committed(tmp_path):
    writer = SpoolWriter(settings(tmp_path))
    writer.append([b"x", b"y"])
    reader = SpoolReader(tmp_path / "spool")
    assert read_all(reader) == [b"x", b"y"]
    reader.rewind()  # the batch was not stored
    assert read_all(reader) == [b"x", b"y"]
    writer.close()


def tear(writer: SpoolWriter, keep: int) -> None:
    """Append a frame cut after `keep` bytes, as a SIGKILL in the middle of a write leaves it."""
    path = writer.directory / segment_name(segments(writer.directory)[-1])
    full = HEADER.size + 100
    with open(path, "ab") as f:
        f.write((b"XPS1" + b"\xff" * full)[:keep])


def test_it_waits_at_a_partial_frame_while_its_writer_lives(tmp_path):
    writer = SpoolWriter(settings(tmp_path))
    writer.append([b"one"])
    tear(writer, 10)
    reader = SpoolReader(tmp_path / "spool")
    result = reader.read(10, 1 << 20)
    assert [e.payload for e in result.entries] == [b"one"] and result.torn == 0
    writer.close()


def test_it_skips_and_counts_a_torn_tail_once_the_writer_is_gone(tmp_path):
    writer = SpoolWriter(settings(tmp_path))
    writer.append([b"one"])
    tear(writer, 10)
    writer.close()  # the writer died
    reader = SpoolReader(tmp_path / "spool")
    result = reader.read(10, 1 << 20)
    assert [e.payload for e in result.entries] == [b"one"] and result.torn == 1
    restarted = SpoolWriter(settings(tmp_path))
    restarted.append([b"two"])
    assert read_all(reader) == [b"two"]
    restarted.close()


def test_it_skips_a_corrupt_frame_once_a_newer_segment_exists(tmp_path):
    writer = SpoolWriter(settings(tmp_path))
    writer.append([b"good", b"flipped"])
    path = writer.directory / segment_name(1)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # the second frame's payload no longer matches its CRC
    path.write_bytes(bytes(data))
    writer.close()
    again = SpoolWriter(settings(tmp_path))
    again.append([b"after"])
    reader = SpoolReader(tmp_path / "spool")
    result = reader.read(10, 1 << 20)
    assert [e.payload for e in result.entries] == [b"good", b"after"] and result.torn == 1
    again.close()


def for_calls(calls_bytes: int) -> int:
    """The max_bytes whose part for calls (all but the gap records' reserve) is calls_bytes."""
    max_bytes = calls_bytes
    while SpoolSettings(root=Path("/"), max_bytes=max_bytes).calls_bound < calls_bytes:
        max_bytes += 1
    return max_bytes


def test_it_refuses_what_passes_the_byte_bound_and_keeps_a_reserve_for_gap_records(tmp_path):
    frame = HEADER.size + 100
    writer = SpoolWriter(settings(tmp_path, max_bytes=64 * frame))  # a reserve of one frame
    assert writer.settings.gap_reserve == frame
    accepted = writer.append([b"z" * 100] * 65)
    assert accepted == [True] * 63 + [False] * 2
    assert writer.append([b"g" * 100], bound=writer.settings.max_bytes) == [True]  # a gap record: the reserve
    assert writer.append([b"g" * 100], bound=writer.settings.max_bytes) == [False]  # the reserve is spent
    reader = SpoolReader(tmp_path / "spool")
    assert len(read_all(reader)) == 64
    writer.close()
    assert SpoolSettings(root=tmp_path).gap_reserve == 1 << 20  # at the default 4 GiB: 1 MiB


def test_it_allows_one_reader_and_gives_each_writer_its_own_directory(tmp_path):
    first = SpoolWriter(settings(tmp_path))
    second = SpoolWriter(settings(tmp_path))
    assert (first.name, second.name) == ("serve", "serve-2")
    first.append([b"1"])
    second.append([b"2"])
    reader = SpoolReader(tmp_path / "spool")
    with pytest.raises(SpoolBusy):
        SpoolReader(tmp_path / "spool")
    assert sorted(read_all(reader)) == [b"1", b"2"]
    first.close()
    second.close()


# always: each of the 3 appends, plus the directory once when the segment file is created.
@pytest.mark.parametrize("policy, syncs", [("always", 3 + 1), ("never", 0)])
def test_it_fsyncs_as_its_policy_says(tmp_path, monkeypatch, policy, syncs):
    calls = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd)))
    writer = SpoolWriter(settings(tmp_path, fsync=policy))
    for _ in range(3):
        writer.append([b"r"])
    assert len(calls) == syncs
    writer.close()


def test_it_refuses_an_unknown_fsync_policy(tmp_path):
    with pytest.raises(ValueError, match="EXTPROXY_SPOOL_FSYNC"):
        SpoolSettings(root=tmp_path, fsync="sometimes")


def test_it_reports_depth_bytes_and_the_oldest_age(tmp_path):
    writer = SpoolWriter(settings(tmp_path))
    writer.append([b"a" * 10, b"b" * 20])
    status = spool_status(tmp_path / "spool")
    assert status.depth == 2 and status.bytes == 2 * HEADER.size + 30 and status.oldest_age >= 0
    reader = SpoolReader(tmp_path / "spool")
    reader.read(1, 1 << 20)
    reader.commit()
    status = spool_status(tmp_path / "spool")
    assert status.depth == 1 and status.bytes == HEADER.size + 20
    read_all(reader)
    reader.commit()
    assert spool_status(tmp_path / "spool").depth == 0 and spool_status(tmp_path / "spool").bytes == 0
    writer.close()


def test_its_frames_carry_zlibs_crc32_whichever_implementation_computed_it(tmp_path):
    # The on-disk format is the same with or without the faster CRC library.
    import struct
    import zlib

    writer = SpoolWriter(settings(tmp_path))
    payload = os.urandom(300_000)
    writer.append([payload])
    data = (writer.directory / segment_name(1)).read_bytes()
    magic, length, crc, seq, at = HEADER.unpack(data[: HEADER.size])
    assert (magic, length, seq, data[HEADER.size:]) == (b"XPS1", len(payload), 1, payload)
    assert crc == zlib.crc32(payload, zlib.crc32(struct.pack("<Qd", seq, at)))
    writer.close()


def test_it_writes_many_records_in_order_past_the_writev_bound_and_after_short_writes(tmp_path, monkeypatch):
    from extproxy.recording import spool_writer as spool

    real = os.pwritev
    shortened = []

    def short_pwritev(fd, buffers, offset):  # the kernel may take less than asked (a signal, a full disk)
        if len(shortened) < 3:
            data = b"".join(buffers)
            shortened.append(len(buffers))
            return os.pwrite(fd, data[: len(data) // 2 + 1], offset)
        return real(fd, buffers, offset)

    monkeypatch.setattr(spool.os, "pwritev", short_pwritev)
    writer = SpoolWriter(settings(tmp_path))
    records = [f"record-{i}".encode() * (i % 7) for i in range(IOV_MAX + 300)]  # empty ones too
    assert all(writer.append(records))
    writer.append([b"last"])
    assert shortened == [IOV_MAX] * 3  # a header and a payload per record, IOV_MAX per call
    assert read_all(SpoolReader(tmp_path / "spool")) == records + [b"last"]
    writer.close()


def test_interval_syncs_finished_segments_at_the_next_interval_and_skips_what_the_recorder_deleted(tmp_path, monkeypatch):
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd)))
    writer = SpoolWriter(settings(tmp_path, segment_bytes=10, fsync="interval", fsync_interval=3600))
    writer.append([b"a" * 20])
    writer.append([b"b" * 20])  # a new segment each: the first is finished, not synced yet
    writer.append([b"c" * 20])
    assert [p for p in synced if p.endswith(".seg")] == []
    reader = SpoolReader(tmp_path / "spool")
    reader.read(2, 1 << 20)
    reader.commit()  # the recorder stored two records and deleted the first one's segment
    assert segments(writer.directory)[0] == 2
    writer.sync()  # the interval's sync
    assert [os.path.basename(p) for p in synced if p.endswith(".seg")] == [segment_name(2), segment_name(3)]
    writer.close()
    assert read_all(reader) == [b"c" * 20]


def test_after_a_failed_write_it_goes_on_in_a_new_segment_and_the_part_written_is_cut(tmp_path, monkeypatch):
    import errno

    writer = SpoolWriter(settings(tmp_path))
    writer.append([b"before"])
    real = os.pwritev

    def disk_full(fd, buffers, offset):
        os.pwrite(fd, b"XPS1" + b"\xff" * 10, offset)  # part of the frame got there
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwritev", disk_full)
    with pytest.raises(OSError):
        writer.append([b"lost"])  # counted as spool-error by the hand-off
    monkeypatch.setattr(os, "pwritev", real)
    writer.append([b"after"])  # a new segment: readers expect no number missing within one
    assert segments(writer.directory) == [1, 3]
    assert (writer.directory / segment_name(1)).stat().st_size == HEADER.size + len(b"before")
    result = SpoolReader(tmp_path / "spool").read(10, 1 << 20)
    assert [e.payload for e in result.entries] == [b"before", b"after"] and result.torn == 0
    writer.close()


def test_the_spool_is_for_its_own_user_only(tmp_path):
    """It holds bodies before redaction: no other user may read them, whatever the umask."""
    old = os.umask(0o022)
    try:
        writer = SpoolWriter(settings(tmp_path))
        writer.append([b"a Pod with its secrets"])
    finally:
        os.umask(old)
    files = [writer.directory / segment_name(first) for first in segments(writer.directory)]
    modes = {path.name: path.stat().st_mode & 0o777 for path in [writer.root, writer.directory, *files]}
    writer.close()
    assert modes and all(mode & 0o077 == 0 for mode in modes.values()), modes
    assert len(modes) == 3


@pytest.mark.parametrize("fsync", ["interval", "always"])
def test_a_segment_that_cannot_be_opened_fails_that_write_only(tmp_path, monkeypatch, fsync):
    """EMFILE once while starting a new segment: that write fails (its calls are counted
    spool-error by the hand-off), the next one starts a segment and the old descriptor is
    closed once: closing it again would close whatever the process opened under its number."""
    from extproxy.recording import spool_writer

    writer = SpoolWriter(settings(tmp_path, segment_bytes=10, fsync=fsync))
    writer.append([b"one" * 5])
    real_open, real_close, failed = os.open, os.close, []
    live = {writer._segment.fd, writer._lock_fd}  # the writer's open descriptors

    def open_(path, *args, **kwargs):
        if str(path).endswith(".seg") and not failed:
            failed.append(path)
            raise OSError(24, "Too many open files")
        fd = real_open(path, *args, **kwargs)
        live.add(fd)
        return fd

    def close(fd):
        assert fd in live, f"descriptor {fd} closed, not open (closed before?)"
        live.remove(fd)
        real_close(fd)

    monkeypatch.setattr(spool_writer.os, "open", open_)
    monkeypatch.setattr(spool_writer.os, "close", close)
    with pytest.raises(OSError):
        writer.append([b"two" * 5])  # past the segment's size: a new one, which cannot be opened
    assert writer.append([b"three" * 3]) == [True] and writer.append([b"four" * 4]) == [True]
    writer.close()
    assert live == set()
    assert read_all(SpoolReader(tmp_path / "spool")) == [b"one" * 5, b"three" * 3, b"four" * 4]


@pytest.mark.parametrize("flipped", [(2,), (9,), (7, 8, 9)])  # the third record of ten, the last, the last three
@pytest.mark.parametrize("then", ["the writer went on", "its writer stopped", "a restarted writer", "its writer gone"])
def test_a_corrupt_record_costs_that_record_only_counted_torn(tmp_path, flipped, then):
    """A flipped byte in a record (a disk error, pages written back out of order): the reader
    goes on at the next intact record of the segment and counts the records in between. At the
    end of a segment: the records numbered up to the next segment's first (a writer that went
    on, or stopped cleanly: it starts an empty one); but a writer killed there and restarted
    numbers on from the last intact record, and a killed one's tail is unknown: one."""
    records = [f"record-{i}-".encode() * 20 for i in range(10)]
    frame = HEADER.size + len(records[0])
    writer = SpoolWriter(settings(tmp_path, segment_bytes=10 * frame))
    writer.append(records)
    path = writer.directory / segment_name(segments(writer.directory)[0])
    data = bytearray(path.read_bytes())
    for i in flipped:
        data[i * frame + HEADER.size + 5] ^= 0xFF
    path.write_bytes(bytes(data))
    if then == "the writer went on":
        writer.append([b"after"])  # in a new segment
    if then in ("the writer went on", "its writer stopped"):
        writer.close()
    else:  # killed
        os.close(writer._segment.fd)
        os.close(writer._lock_fd)
    if then == "a restarted writer":
        writer = SpoolWriter(settings(tmp_path))
        writer.append([b"after"])
        writer.close()
    reader = SpoolReader(tmp_path / "spool")
    result = reader.read(100, 1 << 20)
    assert [e.payload for e in result.entries] == [r for i, r in enumerate(records) if i not in flipped] + (
        [b"after"] if then in ("the writer went on", "a restarted writer") else [])
    counted = len(flipped) if then in ("the writer went on", "its writer stopped") or flipped == (2,) else 1
    assert result.torn == counted and [t.records for t in result.torn_tails] == [counted]
    assert reader.read(100, 1 << 20).torn == 0  # counted once


def test_a_torn_tail_after_a_restart_counts_one_record(tmp_path):
    """The writer was killed mid-frame and a new one took the directory: its first segment
    reuses the torn frame's number, so the count is the one record torn, not zero."""
    writer = SpoolWriter(settings(tmp_path))
    writer.append([b"one", b"two"])
    tear(writer, 10)
    os.close(writer._lock_fd)  # killed
    again = SpoolWriter(settings(tmp_path))
    again.append([b"three"])
    result = SpoolReader(tmp_path / "spool").read(100, 1 << 20)
    assert [e.payload for e in result.entries] == [b"one", b"two", b"three"]
    assert result.torn == 1
    again.close()


def test_a_frame_shaped_payload_past_a_torn_one_is_not_taken_for_a_record_numbered_far_ahead(tmp_path):
    """A payload may carry bytes shaped like a frame (a Pod annotation): read past a torn frame,
    one numbered beyond what the skipped bytes could hold is not a record, and is not counted."""
    from extproxy.recording.spool import frame_head

    forged_payload = b"forged"
    forged = frame_head(10**15, forged_payload, 1.0) + forged_payload
    writer = SpoolWriter(settings(tmp_path))
    writer.append([b"one"])
    tear(writer, 10)  # killed mid-frame, the frame's bytes below carrying a forged one
    path = writer.directory / segment_name(segments(writer.directory)[-1])
    with open(path, "ab") as f:
        f.write(b"\x00" * 40 + forged)
    os.close(writer._lock_fd)
    result = SpoolReader(tmp_path / "spool").read(100, 1 << 20)
    assert [e.payload for e in result.entries] == [b"one"] and result.torn == 1
    again = SpoolWriter(settings(tmp_path))  # a restarted writer numbers on from the last real record
    assert again.seq == 1
    again.close()


def test_a_free_file_that_cannot_be_taken_leaks_no_descriptor(tmp_path, monkeypatch):
    from extproxy.recording import spool_writer

    writer = SpoolWriter(settings(tmp_path, segment_bytes=10))
    for i in range(3):
        writer.append([f"r{i}".encode() * 10])  # a segment each
    reader = SpoolReader(tmp_path / "spool")
    assert len(reader.read(10, 1 << 20).entries) == 3
    reader.commit()  # the finished segments become free files for the writer to take
    real_rename = os.rename

    def rename(src, dst):
        if str(src).endswith(".free"):
            raise OSError(5, "Input/output error")
        return real_rename(src, dst)

    monkeypatch.setattr(spool_writer.os, "rename", rename)
    before = len(os.listdir("/proc/self/fd"))
    for i in range(5):
        with pytest.raises(OSError):
            writer.append([b"x" * 20])  # each rotation tries a free file, and fails
    assert len(os.listdir("/proc/self/fd")) == before
    monkeypatch.setattr(spool_writer.os, "rename", real_rename)
    assert writer.append([b"after"]) == [True]
    writer.close()
    reader.close()
