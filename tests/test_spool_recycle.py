"""Recycled spool segments: the recorder keeps finished segments as free files and the writer
overwrites them (pages already cached) instead of filling new files. Whatever old bytes a
recycled file holds after its new data are never read as records nor counted as torn, by the
recorder's reader, the shadow's tail, a restarted writer or the status; the free files count
in the spool's bound; EXTPROXY_SPOOL_RECYCLE_SEGMENTS=0 deletes as before. A free file holds
zeros, not the stored calls' bodies as received, once EXTPROXY_SPOOL_SEGMENT_SECONDS passed
without its writer taking it, and a segment a trickle of calls would keep open is finished at
that age, so that it is retired too."""
from __future__ import annotations

import dataclasses
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from extproxy.recording.observe import spool_status
from extproxy.recording.spool import HEADER, SpoolSettings, free_files, scan_segment, segment_name, segments
from extproxy.recording.spool_reader import SpoolReader, SpoolTail
from extproxy.recording.spool_usage import disk_usage
from extproxy.recording.spool_writer import SpoolWriter
from tests.test_spool import for_calls

ROOT = Path(__file__).resolve().parent.parent


def settings(tmp_path, **kw) -> SpoolSettings:
    return SpoolSettings(root=tmp_path / "spool", **kw)


def payload(seq: int, size: int) -> bytes:
    """A record that says which sequence number it was written as."""
    return (seq.to_bytes(8, "little") * (size // 8 + 1))[: max(size, 8)]


def seq_of(data: bytes) -> int:
    assert data == payload(int.from_bytes(data[:8], "little"), len(data)), "a record mixed from two writes"
    return int.from_bytes(data[:8], "little")


def inode(path: Path) -> int:
    return os.stat(path).st_ino


def frame_bytes(*sizes: int) -> int:
    return sum(HEADER.size + n for n in sizes)


def test_a_committed_segment_is_overwritten_as_the_next_one_and_read_once(tmp_path):
    writer = SpoolWriter(settings(tmp_path, segment_bytes=10))
    writer.append([b"a" * 500, b"b" * 500])  # segment 1: old bytes for the reuse to leave behind
    writer.append([b"c" * 10])  # segment 3
    first = inode(writer.directory / segment_name(1))
    reader = SpoolReader(tmp_path / "spool")
    assert [e.payload for e in reader.read(100, 1 << 20).entries] == [b"a" * 500, b"b" * 500, b"c" * 10]
    reader.commit()  # past segment 1: it becomes a free file
    assert segments(writer.directory) == [3] and free_files(writer.directory) == [1]

    writer.append([b"d" * 20, b"e" * 30])  # segment 4: segment 1's file, its pages
    path = writer.directory / segment_name(4)
    assert inode(path) == first and free_files(writer.directory) == []
    assert os.path.getsize(path) == frame_bytes(500, 500)  # not truncated: the zeroed pages are still there
    result = reader.read(100, 1 << 20)
    assert [e.payload for e in result.entries] == [b"d" * 20, b"e" * 30] and result.torn == 0
    assert reader.read(100, 1 << 20).entries == []  # the old "b" frame after them is not read

    writer.append([b"f" * 40])  # segment 4 is full: left, cut to the end of its data
    assert os.path.getsize(path) == frame_bytes(20, 30)
    assert [e.payload for e in reader.read(100, 1 << 20).entries] == [b"f" * 40]
    writer.close()
    assert reader.read(100, 1 << 20).torn == 0


def test_every_record_written_into_recycled_segments_is_read_once_in_order_and_counted_right(tmp_path):
    rnd = random.Random(7)
    writer = SpoolWriter(settings(tmp_path, segment_bytes=4096))
    reader = SpoolReader(tmp_path / "spool")
    frames: dict[int, int] = {}  # seq -> bytes of its frame
    read: list[int] = []
    started: dict[int, bool] = {}  # segment -> written into a recycled file
    for _ in range(400):
        batch = [payload(writer.seq + 1 + i, rnd.choice((8, 40, 700, 3000))) for i in range(rnd.randint(1, 4))]
        assert all(writer.append(batch))
        frames.update((seq_of(p), HEADER.size + len(p)) for p in batch)
        started[writer.position[0]] = writer._segment.recycled
        if rnd.random() < 0.4:
            result = reader.read(rnd.randint(1, 20), 1 << 20)
            assert result.torn == 0
            read += [seq_of(e.payload) for e in result.entries]
            reader.commit()
            # From the disk alone (segments read through), and as the serving process sees it.
            for status in (spool_status(tmp_path / "spool"),
                           spool_status(tmp_path / "spool", {"serve": writer.seq}, {"serve": writer.position})):
                assert status.depth == len(frames) - len(read)
                assert status.bytes == sum(n for seq, n in frames.items() if seq > len(read))  # not the old bytes
    result = reader.read(100_000, 1 << 30)
    read += [seq_of(e.payload) for e in result.entries]
    assert result.torn == 0 and read == sorted(frames) == list(range(1, len(frames) + 1))
    assert sum(started.values()) > len(started) // 2  # most segments were old files overwritten
    writer.close()
    reader.commit()
    for first in segments(writer.directory):  # finished (and closed) segments end at their data
        path = writer.directory / segment_name(first)
        assert os.path.getsize(path) == scan_segment(path, first).end
    assert 0 < len(free_files(writer.directory)) <= 4  # EXTPROXY_SPOOL_RECYCLE_SEGMENTS' default


def test_an_intact_old_frame_where_the_data_ends_is_not_read(tmp_path):
    # The end marker normally stands there; without it (a power cut that lost its write, or
    # a write cut at a frame's boundary), an intact frame of the file's previous life is
    # found where the next frame would be, and its sequence number says it is not.
    writer = SpoolWriter(settings(tmp_path, segment_bytes=10))
    writer.append([b"x" * 100, b"y" * 100, b"z" * 100])  # segment 1: frames at 0, 128, 256
    writer.append([b"next"])  # segment 4
    old = (writer.directory / segment_name(1)).read_bytes()
    reader = SpoolReader(tmp_path / "spool")
    assert len(reader.read(10, 1 << 20).entries) == 4
    reader.commit()
    writer.append([b"n" * 100])  # segment 5, in segment 1's file: a frame at 0, the marker at 128
    path = writer.directory / segment_name(5)
    with open(path, "r+b") as f:
        f.seek(128)
        f.write(old[128:156])  # the marker gone: the old "y" frame (seq 2) is intact at 128
    tail = SpoolTail(tmp_path / "spool")
    assert [i.entry.payload for i in tail.read(100) if i.entry] == [b"next", b"n" * 100]
    result = reader.read(10, 1 << 20)
    assert [e.payload for e in result.entries] == [b"n" * 100] and result.torn == 0  # its writer lives: it waits
    reader.commit()
    status = spool_status(tmp_path / "spool")
    assert (status.depth, status.bytes) == (0, 0)
    tail.close()
    writer.close()


KILLED_WRITER = """
import os, sys, time
from pathlib import Path
from extproxy.recording.spool import SpoolSettings
from extproxy.recording.spool_writer import SpoolWriter
writer = SpoolWriter(SpoolSettings(root=Path(sys.argv[1]), segment_bytes=1 << 20, fsync="never"))
for n in range(int(sys.argv[2])):
    seq = writer.seq + 1
    writer.append([seq.to_bytes(8, "little") * (n + 2)])
print(writer.seq, writer.position[0], os.fstat(writer._segment.fd).st_ino, flush=True)
time.sleep(120)
"""


def test_a_writer_killed_in_a_recycled_segment_leaves_nothing_torn_and_its_restart_goes_on(tmp_path):
    spool = tmp_path / "spool"
    writer = SpoolWriter(settings(tmp_path, segment_bytes=10))
    for n in range(3):
        writer.append([payload(n + 1, 2000)])  # segments 1, 2, 3 of 2 KB each
    freed = {inode(writer.directory / segment_name(n)) for n in (1, 2, 3)}
    writer.close()  # a clean stop: an empty segment 4 after them
    reader = SpoolReader(spool)
    assert len(reader.read(10, 1 << 20).entries) == 3
    reader.commit()
    assert free_files(writer.directory) == [1, 2, 3] and segments(writer.directory) == [4]

    child = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(spool), "5"], cwd=ROOT,
                             stdout=subprocess.PIPE, text=True)
    try:
        last, segment, ino = (int(x) for x in child.stdout.readline().split())
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        child.stdout.close()
    path = writer.directory / segment_name(segment)
    assert (last, segment) == (8, 4) and ino in freed  # it wrote into a recycled file and died there
    data_end = scan_segment(path, segment).end
    assert os.path.getsize(path) > data_end  # the old bytes are still after its data

    status = spool_status(spool)
    assert status.depth == 5 and status.bytes == data_end
    result = reader.read(10, 1 << 20)
    assert [seq_of(e.payload) for e in result.entries] == [4, 5, 6, 7, 8] and result.torn == 0
    reader.commit()
    assert reader.read(10, 1 << 20).torn == 0  # its writer is gone: still nothing torn

    again = SpoolWriter(settings(tmp_path, segment_bytes=10))  # the restart
    assert again.seq == 8 and os.path.getsize(path) == data_end  # the old bytes are cut at the marker
    again.append([payload(9, 100)])
    assert segments(again.directory)[-1] == 9  # a new segment: never appends to an old one
    result = reader.read(10, 1 << 20)
    assert [seq_of(e.payload) for e in result.entries] == [9] and result.torn == 0
    again.close()
    reader.close()


KILLED_MID_WRITE = """
import random, sys
from pathlib import Path
from extproxy.recording.spool import SpoolSettings
from extproxy.recording.spool_writer import SpoolWriter
writer = SpoolWriter(SpoolSettings(root=Path(sys.argv[1]), segment_bytes=256 << 10, max_bytes=32 << 20,
                                   fsync="never"))
rnd = random.Random(int(sys.argv[2]))
print("started", flush=True)
while True:
    seq = writer.seq + 1
    writer.append([seq.to_bytes(8, "little") * rnd.randint(1, 40_000)])
"""


def test_a_writer_killed_anywhere_while_segments_are_recycled_loses_at_most_the_write_it_was_in(tmp_path):
    spool = tmp_path / "spool"
    child = subprocess.Popen([sys.executable, "-c", KILLED_MID_WRITE, str(spool), "3"], cwd=ROOT,
                             stdout=subprocess.PIPE, text=True)
    read: list[int] = []
    torn = 0
    try:
        assert child.stdout.readline().strip() == "started"
        reader = SpoolReader(spool)
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:  # the recorder's part: read, commit, recycle
            result = reader.read(50, 8 << 20)
            read += [seq_of(e.payload) for e in result.entries]
            torn += result.torn
            reader.commit()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        child.stdout.close()
    while (result := reader.read(1000, 1 << 30)).entries or result.torn:
        read += [seq_of(e.payload) for e in result.entries]
        torn += result.torn
        reader.commit()
    assert read == list(range(1, len(read) + 1)) and len(read) > 100
    assert torn <= 1  # the write it was killed in, if any
    assert free_files(spool / "serve")  # segments were recycled
    restarted = SpoolWriter(SpoolSettings(root=spool))
    assert restarted.seq >= len(read)
    restarted.append([payload(restarted.seq + 1, 10)])
    assert [seq_of(e.payload) for e in reader.read(10, 1 << 20).entries] == [restarted.seq]
    restarted.close()
    reader.close()


def test_the_shadow_tail_holding_a_segment_recycled_under_it_reads_each_record_once(tmp_path):
    # Records larger than the tail's read buffer: its next read goes to the file, not to bytes
    # it read before the file was recycled (those would be segment 1's own, rightly read).
    size = 64 << 10
    writer = SpoolWriter(settings(tmp_path, segment_bytes=10))
    writer.append([payload(1, size), payload(2, size)])  # segment 1
    writer.append([payload(3, size)])  # segment 3
    tail = SpoolTail(tmp_path / "spool")
    first = tail.read(1)
    assert [seq_of(i.entry.payload) for i in first if i.entry] == [1]  # it holds segment 1 open, at frame 2

    reader = SpoolReader(tmp_path / "spool")
    assert len(reader.read(10, 1 << 20).entries) == 3
    reader.commit()  # segment 1 becomes a free file
    # Segment 4 in segment 1's file: its second frame (seq 5) lies where the tail reads next.
    writer.append([payload(4, size), payload(5, size)])
    assert inode(writer.directory / segment_name(4)) == os.fstat(tail._open["serve"][1].fileno()).st_ino

    items = tail.read(100)
    entries = [seq_of(i.entry.payload) for i in items if i.entry]
    assert entries == [3, 4, 5]  # 5 once, as segment 4's; nothing of the new content as segment 1's
    assert sum(i.skipped for i in items) == 1  # record 2: recycled before the tail got to it
    tail.close()
    writer.close()
    reader.close()


def test_the_shadow_tail_at_the_end_of_a_recycled_segment_reads_what_its_writer_appends_next(tmp_path):
    # The tail reads up to the end marker after a recycled segment's data, old bytes behind it.
    # A read that kept those bytes (a buffered file) would find the marker there for good and
    # never see the frames written over it: the shadow process stopped following under load.
    big = 300 << 10
    writer = SpoolWriter(settings(tmp_path, segment_bytes=256 << 10))
    writer.append([payload(1, big)])  # segment 1
    writer.append([payload(2, big)])  # segment 2
    reader = SpoolReader(tmp_path / "spool")
    assert len(reader.read(10, 1 << 20).entries) == 2
    reader.commit()  # segment 1 becomes a free file
    writer.append([payload(3, 100)])  # segment 3, in segment 1's file: its old bytes follow the marker
    assert writer._segment.recycled and writer._segment.first == 3
    tail = SpoolTail(tmp_path / "spool")
    assert [seq_of(i.entry.payload) for i in tail.read(100) if i.entry] == [2, 3]

    for seq in (4, 5):
        writer.append([payload(seq, 100)])  # over the marker the tail stopped at
        assert [seq_of(i.entry.payload) for i in tail.read(100) if i.entry] == [seq]
    tail.close()
    writer.close()
    reader.close()


def test_the_shadow_tail_follows_a_writer_and_a_recycling_recorder_reading_no_record_twice(tmp_path):
    spool = tmp_path / "spool"
    writer = SpoolWriter(settings(tmp_path, segment_bytes=64 << 10, max_bytes=16 << 20, fsync="never"))
    writer.append([payload(1, 10)])
    tail = SpoolTail(spool)
    entries = [seq_of(i.entry.payload) for i in tail.read(1) if i.entry]  # it has a position from here on
    skipped = 0
    stop = threading.Event()
    problems: list[BaseException] = []

    def write():
        rnd = random.Random(11)
        try:
            while not stop.is_set():
                writer.append([payload(writer.seq + 1, rnd.randint(8, 30_000))])
                time.sleep(0.0001)
        except BaseException as exc:  # reported by the test
            problems.append(exc)

    def drain():
        reader = SpoolReader(spool)
        try:
            while not stop.is_set():
                assert reader.read(20, 1 << 20).torn == 0
                reader.commit()
        except BaseException as exc:
            problems.append(exc)
        finally:
            reader.close()

    threads = [threading.Thread(target=write), threading.Thread(target=drain)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 1.5
        rnd = random.Random(5)
        while time.monotonic() < deadline:
            for item in tail.read(rnd.randint(1, 5)):
                if item.entry is not None:
                    entries.append(seq_of(item.entry.payload))
                skipped += item.skipped
            time.sleep(0.001 * rnd.random())
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert not problems, problems
    assert entries == sorted(set(entries)) and len(entries) > 50  # in order, none twice
    assert len(entries) + skipped == entries[-1]  # every record up to the last one read: read or counted
    assert free_files(spool / "serve") or writer._segment.recycled  # segments were recycled meanwhile
    writer.close()
    tail.close()


def test_free_files_count_in_the_bound_and_are_given_back_at_it(tmp_path):
    frame = HEADER.size + 100
    writer = SpoolWriter(settings(tmp_path, segment_bytes=10, max_bytes=for_calls(5 * frame)))
    for n in range(3):
        assert writer.append([payload(n + 1, 100)]) == [True]  # segments 1, 2, 3
    reader = SpoolReader(tmp_path / "spool")
    assert len(reader.read(10, 1 << 20).entries) == 3
    reader.commit()
    assert free_files(writer.directory) == [1, 2]
    assert disk_usage(tmp_path / "spool") == (3 * frame, 2 * frame)
    assert spool_status(tmp_path / "spool").disk_bytes == 3 * frame  # the free files too

    time.sleep(0.25)  # at the bound, the writer measures the disk again at most every 0.2 s
    # 3 frames on disk and 3 more pass the bound of 5: the free files go first, then they fit.
    assert writer.append([payload(4, 100), payload(5, 100), payload(6, 100)]) == [True, True, True]
    assert free_files(writer.directory) == [] and disk_usage(tmp_path / "spool")[0] <= 5 * frame
    time.sleep(0.25)
    assert writer.append([payload(7, 100), payload(8, 100)]) == [True, False]  # full: nothing to give back
    assert disk_usage(tmp_path / "spool")[0] <= 5 * frame
    writer.close()
    reader.close()


def test_the_recorder_keeps_at_most_its_number_of_free_files_and_with_zero_deletes_as_before(tmp_path):
    writer = SpoolWriter(settings(tmp_path, segment_bytes=10))
    for n in range(8):
        writer.append([payload(n + 1, 50)])  # one segment each
    reader = SpoolReader(tmp_path / "spool", recycle=2)
    reader.read(4, 1 << 20)
    reader.commit()  # it stands in segment 4: 1, 2 and 3 are done; the newest two are kept
    assert segments(writer.directory) == [4, 5, 6, 7, 8] and free_files(writer.directory) == [2, 3]
    reader.close()

    plain = SpoolReader(tmp_path / "spool", recycle=0)  # EXTPROXY_SPOOL_RECYCLE_SEGMENTS=0
    plain.read(100, 1 << 20)
    plain.commit()
    assert segments(writer.directory) == [8] and free_files(writer.directory) == [2, 3]  # deleted, none added
    plain.close()
    writer.close()


def test_a_stored_segment_is_zeroed_before_it_becomes_a_free_file(tmp_path):
    secret = b"password=hunter2-in-a-pod-spec"
    writer = SpoolWriter(settings(tmp_path, segment_bytes=10))
    writer.append([secret * 40, secret])  # segment 1
    writer.append([b"next"])  # segment 3
    first = writer.directory / segment_name(1)
    size, ino = os.path.getsize(first), inode(first)
    assert secret in first.read_bytes()
    reader = SpoolReader(tmp_path / "spool")
    assert len(reader.read(10, 1 << 20).entries) == 3
    reader.commit()

    free = writer.directory / "00000000000000000001.free"
    assert free_files(writer.directory) == [1] and inode(free) == ino  # the same file, its pages kept
    assert free.read_bytes() == bytes(size)  # every byte zero: nothing of what was stored is left
    writer.append([payload(4, 30), payload(5, 30)])  # segment 4 in that file reads as any other
    assert [seq_of(e.payload) for e in reader.read(10, 1 << 20).entries] == [4, 5]
    writer.close()
    reader.close()


def test_a_free_file_is_zeroed_once_due_and_meanwhile_the_shadows_tail_still_reads_it(tmp_path):
    writer = SpoolWriter(settings(tmp_path, segment_bytes=10))
    writer.append([payload(1, 100), payload(2, 100)])  # segment 1
    writer.append([payload(3, 100)])  # segment 3
    tail = SpoolTail(tmp_path / "spool")
    assert [seq_of(i.entry.payload) for i in tail.read(1) if i.entry] == [1]  # it holds segment 1 open

    reader = SpoolReader(tmp_path / "spool", zero_after=60)  # EXTPROXY_SPOOL_SEGMENT_SECONDS
    assert len(reader.read(10, 1 << 20).entries) == 3
    reader.commit()
    free = writer.directory / "00000000000000000001.free"
    reader.zero_free()
    assert payload(2, 100) in free.read_bytes()  # not due yet
    assert [seq_of(i.entry.payload) for i in tail.read(1) if i.entry] == [2]  # the tail's slack

    reader.zeroer.zero_after = 0.05  # rather than a minute's wait: due once 0.05 s passed
    time.sleep(0.06)
    reader.zero_free()
    assert free.read_bytes() == bytes(frame_bytes(100, 100))
    assert [seq_of(i.entry.payload) for i in tail.read(10) if i.entry] == [3]
    for closing in (tail, writer, reader):
        closing.close()


def stored_two_segments(tmp_path, zero_after: float) -> tuple[SpoolWriter, SpoolReader]:
    """Segments 1 and 2 (one record of 100 bytes each) written, read and committed: 1 is a free file."""
    writer = SpoolWriter(settings(tmp_path, segment_bytes=10))
    writer.append([payload(1, 100)])
    writer.append([payload(2, 100)])
    reader = SpoolReader(tmp_path / "spool", zero_after=zero_after)
    assert len(reader.read(10, 1 << 20).entries) == 2
    reader.commit()
    assert free_files(writer.directory) == [1]
    return writer, reader


def test_a_free_file_its_writer_took_before_it_was_due_is_left_to_the_writer(tmp_path):
    writer, reader = stored_two_segments(tmp_path, zero_after=0.2)  # segment 1's file is not due
    writer.append([payload(3, 40), payload(4, 40)])  # segment 3, in that file
    assert free_files(writer.directory) == [] and writer._segment.recycled

    time.sleep(0.25)
    reader.zero_free()  # due, but taken: nothing of segment 3 is touched
    assert [seq_of(e.payload) for e in reader.read(10, 1 << 20).entries] == [3, 4]
    writer.close()
    reader.close()


def test_free_files_a_stopped_recorder_left_whole_or_half_zeroed_are_zeroed_by_the_next(tmp_path):
    writer, first = stored_two_segments(tmp_path, zero_after=3600)
    writer.append([payload(3, 100)])  # segment 3, in segment 1's file
    writer.append([payload(4, 100)])  # segment 4
    assert len(first.read(10, 1 << 20).entries) == 2
    first.commit()
    first.close()  # stopped before either new free file was due
    whole, half = writer.directory / "00000000000000000002.free", writer.directory / "00000000000000000003.free"
    assert payload(2, 100) in whole.read_bytes() and payload(3, 100) in half.read_bytes()
    aside = writer.directory / "00000000000000000003.zeroing"
    os.rename(half, aside)  # as the recorder leaves a file it was zeroing when killed
    assert disk_usage(tmp_path / "spool") == (3 * frame_bytes(100), 2 * frame_bytes(100))  # still counted free

    again = SpoolReader(tmp_path / "spool", zero_after=3600)
    assert not aside.exists() and half.read_bytes() == bytes(frame_bytes(100))  # finished as it starts
    again.zero_free()  # when the other was freed is not known: due at once
    assert whole.read_bytes() == bytes(frame_bytes(100))
    writer.append([payload(5, 100)])  # segment 5 takes one of them
    assert [seq_of(e.payload) for e in again.read(10, 1 << 20).entries] == [5]
    writer.close()
    again.close()


def test_a_segment_that_could_not_be_zeroed_is_deleted_not_kept(tmp_path, monkeypatch, caplog):
    from extproxy.recording import zeroing

    def refused(path, sync):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(zeroing, "zero_file", refused)
    writer = SpoolWriter(settings(tmp_path, segment_bytes=10))
    writer.append([b"a" * 100])  # segment 1
    writer.append([b"b" * 100])  # segment 2
    reader = SpoolReader(tmp_path / "spool")
    assert len(reader.read(10, 1 << 20).entries) == 2
    reader.commit()  # the batch is stored: the failure costs the file, never the commit
    assert segments(writer.directory) == [2] and free_files(writer.directory) == []
    assert sorted(p.name for p in writer.directory.iterdir()) == ["00000000000000000002.seg", "cursor", "writer.lock"]
    assert "could not zero a stored segment" in caplog.text
    writer.close()
    reader.close()


def test_a_segment_whose_first_record_is_old_enough_is_finished_and_retired_without_more_calls(tmp_path):
    writer = SpoolWriter(settings(tmp_path, segment_seconds=60))
    writer.append([b"secret-1"])
    writer.append([b"secret-2"])  # the same segment: neither full nor old
    reader = SpoolReader(tmp_path / "spool")
    assert [e.payload for e in reader.read(10, 1 << 20).entries] == [b"secret-1", b"secret-2"]
    reader.commit()
    writer.finish_aged()
    assert segments(writer.directory) == [1]  # not yet: its first record is younger than 60 s

    writer.settings = dataclasses.replace(writer.settings, segment_seconds=0.05)  # rather than a minute's wait
    time.sleep(0.06)
    writer.finish_aged()  # as the spool-writer does when it has nothing to append
    assert segments(writer.directory) == [1, 3]  # the next one starts now, numbered for the next record
    writer.finish_aged()
    assert segments(writer.directory) == [1, 3]  # the new one holds nothing: it does not age
    assert reader.read(10, 1 << 20).entries == []  # moves on to segment 3, nothing to read
    reader.commit()
    assert segments(writer.directory) == [3] and free_files(writer.directory) == [1]
    assert b"secret" not in (writer.directory / "00000000000000000001.free").read_bytes()

    writer.append([b"after"])  # numbered on, into the new segment
    result = reader.read(10, 1 << 20)
    assert [(e.seq, e.payload) for e in result.entries] == [(3, b"after")] and result.torn == 0
    writer.close()
    reader.close()


def test_a_segment_written_into_after_its_age_goes_to_a_new_one_and_zero_seconds_means_by_size_only(tmp_path):
    aged = SpoolWriter(settings(tmp_path, segment_seconds=0.2), name="aged")
    aged.append([b"one"])
    time.sleep(0.25)
    aged.append([b"two"])  # the old segment is finished at this write, not only when idle
    assert segments(aged.directory) == [1, 2]

    by_size = SpoolWriter(settings(tmp_path, segment_seconds=0), name="by-size")
    by_size.append([b"one"])
    time.sleep(0.25)
    by_size.finish_aged()
    by_size.append([b"two"])
    assert segments(by_size.directory) == [1]
    reader = SpoolReader(tmp_path / "spool")
    assert sorted((e.writer, e.payload) for e in reader.read(10, 1 << 20).entries) == [
        ("aged", b"one"), ("aged", b"two"), ("by-size", b"one"), ("by-size", b"two")]
    for w in (aged, by_size):
        w.close()
    reader.close()


def test_a_writer_restarted_after_finishing_a_segment_by_age_writes_the_empty_one_and_shows_no_phantom(tmp_path):
    spool = tmp_path / "spool"
    writer = SpoolWriter(settings(tmp_path, segment_seconds=0.1))
    writer.append([payload(1, 100)])
    time.sleep(0.15)
    writer.finish_aged()  # segment 2 starts, empty, and the process stops idle
    writer.close()
    reader = SpoolReader(spool)
    assert [seq_of(e.payload) for e in reader.read(10, 1 << 20).entries] == [1]
    reader.commit()  # it read on to the empty segment 2 and stands there; segment 1 is retired
    assert segments(writer.directory) == [2] and free_files(writer.directory) == [1]

    again = SpoolWriter(settings(tmp_path, segment_seconds=0.1))  # the restart
    assert again.seq == 1  # nothing torn there to step over: number 2 is not spent
    status = spool_status(spool, {"serve": again.seq}, {"serve": again.position})  # as /metrics reads it
    assert status.depth == 0
    again.append([payload(2, 100)])
    assert segments(again.directory) == [2]
    result = reader.read(10, 1 << 20)
    assert [seq_of(e.payload) for e in result.entries] == [2] and result.torn == 0
    reader.commit()
    assert spool_status(spool, {"serve": again.seq}, {"serve": again.position}).depth == 0
    again.close()
    reader.close()


def test_a_writer_that_wrote_nothing_ends_its_killed_predecessors_last_segment_at_its_stop(tmp_path):
    spool = tmp_path / "spool"
    killed = SpoolWriter(settings(tmp_path))
    killed.append([payload(1, 100), payload(2, 100)])
    os.close(killed._segment.fd)
    os.close(killed._lock_fd)  # killed: its segment stays the directory's last

    claimed = SpoolWriter(settings(tmp_path))  # the restart, or the recorder counting what it left
    assert claimed.seq == 2
    claimed.close()  # without a write
    assert segments(claimed.directory) == [1, 3] and os.path.getsize(claimed.directory / segment_name(3)) == 0
    reader = SpoolReader(spool)
    assert [seq_of(e.payload) for e in reader.read(10, 1 << 20).entries] == [1, 2]
    reader.commit()
    assert segments(claimed.directory) == [3] and free_files(claimed.directory) == [1]

    idle = SpoolWriter(settings(tmp_path))  # nothing left to end: it stops as it came
    assert idle.seq == 2
    idle.close()
    assert segments(idle.directory) == [3]
    reader.close()
