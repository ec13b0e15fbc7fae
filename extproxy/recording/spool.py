"""The durable local spool between the serving process and the recorder process.

Owns the on-disk format (frames, end markers, segment and free file names, the cursor, the
locks) and reading it (a frame at an offset, a segment to its end), which all three ends
are built on: spool_writer.py (`SpoolWriter`: the serving side appends), spool_reader.py
(`SpoolReader`: the recorder reads in order, marks what is committed, recycles or deletes
what is done; `SpoolTail`: the shadow process follows), and observe.py (`spool_status`:
depth, bytes, oldest undrained age for /metrics and /readyz). Must not decode records, build
rows or touch the database.

Why our own segment files and not a library: what is needed is small (append, read in order,
a cursor, recycle finished files, a byte bound) and must hold under SIGKILL of either side,
with no server process and nothing to install; queue libraries on the package index either
keep everything in SQLite (a second database write per call) or do not survive a torn write.

Layout under the spool root (EXTPROXY_SPOOL_DIR, default <data dir>/spool):

    reader.lock               held by the one recorder draining this spool
    recorder.json             the recorder's counters (written after each batch)
    <writer>/writer.lock      held by the one serving process appending here
    <writer>/cursor           "<seq> <segment> <offset>": everything before is committed
    <writer>/<first seq>.seg  segment files of framed records, written in order
    <writer>/<first seq>.free finished segments kept for reuse (at most
                              EXTPROXY_SPOOL_RECYCLE_SEGMENTS per directory)

A frame is a 28-byte header (magic, payload length, CRC-32, sequence number, append time)
and the payload. Sequence numbers run on across segments and restarts of a writer, so
depth is "last appended - last committed". A restarted writer never appends to an old
segment (its tail may be torn): it starts a new one, and the reader skips a torn tail once a
newer segment exists or the writer is gone, counting it (`torn`).

Recycling: the recorder renames a segment it has stored to `.free` instead of deleting it
(up to EXTPROXY_SPOOL_RECYCLE_SEGMENTS, default 4, per writer directory), and the writer's
next segment is such a file renamed back, overwritten from its start. Writing into pages
already in the page cache costs the serving process a fraction of what filling new ones does
(6 MB: 0.25 ms of kernel CPU against 1.7 ms, 16 ms on a fresh VM). What guards the old bytes
after the new data:
- each write into a recycled segment ends with an end marker (a header with magic XPSE and
  the sequence number the next frame will carry), which the next write overwrites. Readers
  take a marker that names the expected number as the clean end of the data: not torn. (Not
  zero bytes: zeros are what a power cut can leave where a new file grew, a torn tail as
  before; and an old marker names an old number.)
- every reader takes a frame only with the sequence number it expects (the first of a
  segment: the number in its name; then the previous one + 1), so an intact old frame is
  never read, and a reader holding a file that was recycled under it (the shadow's tail)
  finds no frame of its segment there and moves on.
- a writer leaving a recycled segment (next segment, close) truncates it to the end of its
  last frame, and a restarted writer truncates a recycled segment left by a killed one at
  its marker, so finished segments look like new ones: their size is their data.
The free files count in the spool's bound (EXTPROXY_SPOOL_MAX_BYTES); a writer at the bound
deletes them before it refuses a record.

Zeroing: the records are bodies before redaction, and once stored they must not stay readable
until a writer happens to overwrite them, which may be never. The recorder overwrites a free
file that no writer took within EXTPROXY_SPOOL_SEGMENT_SECONDS with zeros (renamed
`<first seq>.zeroing` meanwhile, so that no writer takes it half done; zeroing.py): the
wait leaves the shadow's tail, which may read a stored segment after the recorder, the slack a
writer's reuse always left it. A writer finishes a segment whose first record is that old, full
or not (SpoolSettings.segment_seconds), so that a trickle of calls does not keep stored records
in an open segment for hours, and at a clean stop (nothing waits for it to come back), its own
last segment or, when it wrote none, its predecessor's (a killed one's). The segment it starts
then is empty; a restarted writer writes it from its start.

Durability (EXTPROXY_SPOOL_FSYNC): a record is in the spool once write() returned; a SIGKILL
of either process loses nothing written. What a power loss or kernel crash can lose:
`always` (fsync after each write, every ~10 ms): nothing written; `interval` (default,
fsync at most every EXTPROXY_SPOOL_FSYNC_INTERVAL seconds, segments finished meanwhile
included, except those the recorder has already stored and recycled or deleted): up to that
long; `never`: up to the kernel's writeback delay (typically 30 s). After a power loss, a
recycled segment can also hold old bytes where new ones were not yet on disk: they are not
read (wrong sequence numbers or CRC) and count as a torn tail.
"""
from __future__ import annotations

import errno
import fcntl
import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:  # ISA-L's CRC-32 is zlib's checksum (same values), ~3.5x faster on large records (PCLMUL)
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - isal is in requirements.txt; zlib gives the same values
    from zlib import crc32

log = logging.getLogger(__name__)

MAGIC = b"XPS1"
END_MAGIC = b"XPSE"  # the end marker of the data in a recycled segment: what follows is old
HEADER = struct.Struct("<4sIIQd")  # magic, payload length, crc32, seq, appended_at (epoch)
MAX_PAYLOAD = 1 << 31  # a length above this is garbage: a torn or corrupt header
FSYNC_POLICIES = ("always", "interval", "never")
SEGMENT_SUFFIX = ".seg"
FREE_SUFFIX = ".free"
ZEROING_SUFFIX = ".zeroing"  # a free file the recorder is overwriting with zeros (no writer takes it)
# A record this large (packed) is deflated even while the recorder keeps up, as is a full-object
# call's of any size: written plain, the 5-20x more bytes cost the serving core more (copied to
# the page cache and written back) than deflating them does (bench/README.md, "Nineteenth pass").
ALWAYS_DEFLATED = 256 << 10
GAP_RESERVE = 1 << 20  # see SpoolSettings.gap_reserve
DEFAULT_RECYCLE = 4  # EXTPROXY_SPOOL_RECYCLE_SEGMENTS: free files the recorder keeps per writer directory


@dataclass(frozen=True)
class SpoolSettings:
    root: Path
    max_bytes: int = 4 << 30  # the whole spool on disk, free files included; beyond it: spool-full drops
    segment_bytes: int = 8 << 20  # a segment is closed and a new one started past this size
    # ...or once its first record is this many seconds old (0: by size only), so that a slow
    # trickle of calls does not keep stored bodies in an open segment for hours (spool_writer.py).
    segment_seconds: float = 60.0
    fsync: str = "interval"
    fsync_interval: float = 1.0
    compress: bool = True  # deflate call records (trace.encode_trace); the reader takes both forms
    # ...all of them once the recorder has this many bytes of the spool still to store (or an
    # eighth of max_bytes, if less): it is behind, and the spool's room counts. Until then only
    # full-object calls and records of ALWAYS_DEFLATED bytes or more, and the serving core is
    # spared deflating the others (24 us of a names call with 1,000 nodes). 0: every record.
    compress_above: int = 32 << 20

    def __post_init__(self) -> None:
        if self.fsync not in FSYNC_POLICIES:
            raise ValueError(f"EXTPROXY_SPOOL_FSYNC={self.fsync!r}: expected one of {', '.join(FSYNC_POLICIES)}")

    @classmethod
    def from_django(cls) -> "SpoolSettings":
        from django.conf import settings

        return cls(
            root=Path(settings.EXTPROXY_SPOOL_DIR),
            max_bytes=settings.EXTPROXY_SPOOL_MAX_BYTES,
            segment_bytes=settings.EXTPROXY_SPOOL_SEGMENT_BYTES,
            segment_seconds=settings.EXTPROXY_SPOOL_SEGMENT_SECONDS,
            fsync=settings.EXTPROXY_SPOOL_FSYNC,
            fsync_interval=settings.EXTPROXY_SPOOL_FSYNC_INTERVAL,
            compress=settings.EXTPROXY_SPOOL_COMPRESS,
            compress_above=settings.EXTPROXY_SPOOL_COMPRESS_ABOVE,
        )

    @property
    def gap_reserve(self) -> int:
        """The part of max_bytes only gap records may use: at the bound, the drops are still
        written down (a gap record of a reason or two is ~100 bytes, one a second at most: the
        default 1 MiB lasts about three hours of drops with nothing freed)."""
        return min(GAP_RESERVE, self.max_bytes // 64)

    @property
    def calls_bound(self) -> int:
        return self.max_bytes - self.gap_reserve

    def smallest_deflated(self, backlog: int, trace: Any) -> int:
        """The packed size from which `trace`'s record is deflated (with `compress` on), while
        the recorder has `backlog` bytes of the spool still to store: every record once behind,
        a full-object call's always, others from ALWAYS_DEFLATED."""
        if backlog >= min(self.compress_above, self.max_bytes // 8) or not trace.node_cache_capable:
            return 0
        return ALWAYS_DEFLATED


def frame_head(seq: int, payload: bytes, at: float) -> bytes:
    """The header of the frame that carries `payload` (written before it, never joined to it)."""
    return HEADER.pack(MAGIC, len(payload), _crc(seq, at, payload), seq, at)


def end_marker(next_seq: int) -> bytes:
    """What follows the last frame in a recycled segment: the data ends here, `next_seq` is next."""
    return HEADER.pack(END_MAGIC, 0, 0, next_seq, 0.0)


def _crc(seq: int, at: float, payload: bytes) -> int:
    return crc32(payload, crc32(struct.pack("<Qd", seq, at)))


def segment_name(first_seq: int) -> str:
    return f"{first_seq:020d}{SEGMENT_SUFFIX}"


def free_name(first_seq: int) -> str:
    return f"{first_seq:020d}{FREE_SUFFIX}"


def zeroing_name(first_seq: int) -> str:
    return f"{first_seq:020d}{ZEROING_SUFFIX}"


def segments(directory: Path) -> list[int]:
    """First sequence numbers of the segments in a writer's directory, oldest first."""
    return _numbered(directory, SEGMENT_SUFFIX)


def free_files(directory: Path) -> list[int]:
    """The numbers of a writer directory's free files (recycled segments), oldest first."""
    return _numbered(directory, FREE_SUFFIX)


def zeroing_files(directory: Path) -> list[int]:
    """The numbers of free files the recorder was zeroing when it stopped (zeroing.py)."""
    return _numbered(directory, ZEROING_SUFFIX)


def undrained_extents(directory: Path, cursor: Cursor, data_end: tuple[int, int] | None = None
                      ) -> list[tuple[int, Path, int, int]]:
    """The segments of a writer directory not yet stored, from `cursor` on: (first sequence
    number, path, offset where the unstored data begins, end of the data). `data_end`: a
    segment whose data is known to end before its size (segment, offset): a reused file's old
    bytes follow its data. A segment freed meanwhile is left out."""
    extents = []
    for first in segments(directory):
        if first < cursor.segment:
            continue
        path = directory / segment_name(first)
        try:
            size = path.stat().st_size
        except FileNotFoundError:  # stored and freed by the recorder since the listing
            continue
        if data_end is not None and data_end[0] == first:
            size = min(size, data_end[1])
        start = cursor.offset if first == cursor.segment else 0
        extents.append((first, path, start, max(start, size)))
    return extents


def files_usage(directory: Path) -> tuple[int, int]:
    """Bytes of a writer directory's segment and free files, and of the free files alone (a
    file renamed meanwhile, recycled or reused, is counted under its other name or not at all)."""
    total = free = 0
    try:
        with os.scandir(directory) as entries:
            for e in entries:
                is_free = e.name.endswith(FREE_SUFFIX) or e.name.endswith(ZEROING_SUFFIX)
                if not (is_free or e.name.endswith(SEGMENT_SUFFIX)):
                    continue
                try:
                    size = e.stat().st_size
                except FileNotFoundError:
                    continue
                total += size
                free += size if is_free else 0
    except FileNotFoundError:
        pass
    return total, free


def _numbered(directory: Path, suffix: str) -> list[int]:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(int(n[: -len(suffix)]) for n in names if n.endswith(suffix) and n[: -len(suffix)].isdigit())


@dataclass
class Frame:
    seq: int
    at: float
    payload: bytes
    end: int  # offset just past this frame


class _End:
    def __repr__(self) -> str:
        return "END"


END = _End()  # read_frame found the end marker: the data ends cleanly here (nothing torn)


def expected_seq(segment: int, offset: int, last_read: int) -> int:
    """The sequence number the frame at `offset` of `segment` must carry: the segment's first
    at its start, else the one after the frame read last (which ended at `offset`)."""
    return last_read + 1 if offset else segment


def read_frame(f, offset: int, expected: int) -> Frame | _End | None:
    """The complete, intact frame at `offset` carrying sequence number `expected`; END at an
    end marker naming `expected`; else None (end of file, a torn, corrupt or old frame)."""
    f.seek(offset)
    head = f.read(HEADER.size)
    if len(head) < HEADER.size:
        return None
    magic, length, crc, seq, at = HEADER.unpack(head)
    if seq != expected:  # an old frame of a recycled file (or garbage): not this segment's
        return None
    if magic == END_MAGIC:
        return END if head == end_marker(expected) else None
    if magic != MAGIC or length > MAX_PAYLOAD:
        return None
    payload = f.read(length)
    if len(payload) < length or _crc(seq, at, payload) != crc:
        return None
    return Frame(seq, at, payload, offset + HEADER.size + length)


RESYNC_CHUNK = 1 << 20  # read at a time while looking past a corrupt frame


def next_intact_frame(f, start: int, end: int, after: int, below: int | None) -> Frame | None:
    """The first intact frame between `start` and `end` whose sequence number is above `after`
    (and below `below`, the next segment's first): where reading goes on past a corrupt frame.
    A recycled file's old frames carry lower numbers, so none of them is taken; nor is a frame
    numbered beyond what the bytes skipped could hold (a header each at least): a record's
    payload may carry bytes shaped like a frame (a Pod's annotation), not a number past them."""
    chunk = start
    while chunk < end:
        f.seek(chunk)
        data = f.read(min(RESYNC_CHUNK, end - chunk) + HEADER.size)  # a header across chunks is seen whole
        i = data.find(MAGIC)
        while 0 <= i < RESYNC_CHUNK:
            head = data[i : i + HEADER.size]
            if len(head) == HEADER.size:
                seq = HEADER.unpack(head)[3]
                room = (chunk + i - start + 1) // HEADER.size  # records the skipped bytes could hold
                if after < seq <= after + 1 + room and (below is None or seq < below):
                    found = read_frame(f, chunk + i, seq)
                    if isinstance(found, Frame):
                        return found
            i = data.find(MAGIC, i + 1)
        chunk += RESYNC_CHUNK
    return None


@dataclass
class Scan:
    last: int  # sequence number of the last intact frame (the segment's first - 1: none)
    end: int  # offset just past it
    marked: bool  # an end marker follows it (a recycled segment's data ends there)


def scan_segment(path: Path, first: int) -> Scan:
    """Where the data of a segment ends: every frame read, in order, and past a corrupt one
    from the next intact frame on, so that a writer resuming after it never reuses the
    numbers of the records beyond it."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        last, offset = first - 1, 0
        while True:
            found = read_frame(f, offset, last + 1)
            if found is None and offset < size:
                found = next_intact_frame(f, offset + 1, size, last, None)
            if not isinstance(found, Frame):
                return Scan(last, offset, found is END)
            last, offset = found.seq, found.end


# --- the cursor: what the recorder has committed -----------------------------------------


@dataclass
class Cursor:
    seq: int = 0  # last committed sequence number
    segment: int = 0  # first seq of the segment the next frame is read from (0: the oldest)
    offset: int = 0


def read_cursor(directory: Path) -> Cursor:
    try:
        seq, segment, offset = (int(x) for x in (directory / "cursor").read_text().split())
        return Cursor(seq, segment, offset)
    except (FileNotFoundError, ValueError):
        return Cursor()  # unreadable: start from the oldest segment (the database ignores repeats)


def write_cursor(directory: Path, cursor: Cursor) -> None:
    # No fsync: a cursor lost to a power cut only makes the recorder re-read records the
    # database already has, and it ignores them by call_id.
    tmp = directory / "cursor.tmp"
    tmp.write_text(f"{cursor.seq} {cursor.segment} {cursor.offset}\n")
    os.replace(tmp, directory / "cursor")


def try_lock(path: Path, shared: bool = False) -> int | None:
    """An flock on `path` (its fd), or None when another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            return None
        raise
    return fd


def writer_alive(directory: Path) -> bool:
    fd = try_lock(directory / "writer.lock", shared=True)
    if fd is None:
        return True
    os.close(fd)
    return False
