"""The durable local spool between the serving process and the recorder process.

Owns the on-disk format and both ends of it: `SpoolWriter` (serving side: appends records)
and `SpoolReader` (recorder side: reads in order, marks what is committed, deletes what is
done), plus `spool_status` (depth, bytes, oldest undrained age) for /metrics and /readyz.
Must not decode records, build rows or touch the database.

Why our own segment files and not a library: what is needed is small (append, read in order,
a cursor, delete finished files, a byte bound) and must hold under SIGKILL of either side,
with no server process and nothing to install; queue libraries on the package index either
keep everything in SQLite (a second database write per call) or do not survive a torn write.

Layout under the spool root (EXTPROXY_SPOOL_DIR, default <data dir>/spool):

    reader.lock               held by the one recorder draining this spool
    recorder.json             the recorder's counters (written after each batch)
    <writer>/writer.lock      held by the one serving process appending here
    <writer>/cursor           "<seq> <segment> <offset>": everything before is committed
    <writer>/<first seq>.seg  append-only segment files of framed records

A frame is a 28-byte header (magic, payload length, CRC-32, sequence number, append time)
and the payload. Sequence numbers run on across segments and restarts of a writer, so
depth is "last appended - last committed". A restarted writer never appends to an old
segment (its tail may be torn): it starts a new one, and the reader skips a torn tail once a
newer segment exists or the writer is gone, counting it (`torn`).

Durability (EXTPROXY_SPOOL_FSYNC): a record is in the spool once write() returned; a SIGKILL
of either process loses nothing written. What a power loss or kernel crash can lose:
`always` (fsync after each write, every ~10 ms): nothing written; `interval` (default,
fsync at most every EXTPROXY_SPOOL_FSYNC_INTERVAL seconds, segments finished meanwhile
included, except those the recorder has already deleted): up to that long; `never`: up
to the kernel's writeback delay (typically 30 s).
"""
from __future__ import annotations

import errno
import fcntl
import logging
import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

try:  # ISA-L's CRC-32 is zlib's checksum (same values), ~3.5x faster on large records (PCLMUL)
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - isal is in requirements.txt; zlib gives the same values
    from zlib import crc32

log = logging.getLogger(__name__)

MAGIC = b"XPS1"
HEADER = struct.Struct("<4sIIQd")  # magic, payload length, crc32, seq, appended_at (epoch)
MAX_PAYLOAD = 1 << 31  # a length above this is garbage: a torn or corrupt header
FSYNC_POLICIES = ("always", "interval", "never")
SEGMENT_SUFFIX = ".seg"


@dataclass(frozen=True)
class SpoolSettings:
    root: Path
    max_bytes: int = 1 << 30  # the whole spool on disk; appends beyond it are dropped (spool-full)
    segment_bytes: int = 8 << 20  # a segment is closed and a new one started past this size
    fsync: str = "interval"
    fsync_interval: float = 1.0

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
            fsync=settings.EXTPROXY_SPOOL_FSYNC,
            fsync_interval=settings.EXTPROXY_SPOOL_FSYNC_INTERVAL,
        )


def frame_head(seq: int, payload: bytes, at: float) -> bytes:
    """The header of the frame that carries `payload` (written before it, never joined to it)."""
    return HEADER.pack(MAGIC, len(payload), _crc(seq, at, payload), seq, at)


def _crc(seq: int, at: float, payload: bytes) -> int:
    return crc32(payload, crc32(struct.pack("<Qd", seq, at)))


def segment_name(first_seq: int) -> str:
    return f"{first_seq:020d}{SEGMENT_SUFFIX}"


def segments(directory: Path) -> list[int]:
    """First sequence numbers of the segments in a writer's directory, oldest first."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(int(n[: -len(SEGMENT_SUFFIX)]) for n in names if n.endswith(SEGMENT_SUFFIX) and n[:-4].isdigit())


@dataclass
class Frame:
    seq: int
    at: float
    payload: bytes
    end: int  # offset just past this frame


def read_frame(f, offset: int) -> Frame | None:
    """The complete, intact frame at `offset`, or None (end of data, torn or corrupt)."""
    f.seek(offset)
    head = f.read(HEADER.size)
    if len(head) < HEADER.size:
        return None
    magic, length, crc, seq, at = HEADER.unpack(head)
    if magic != MAGIC or length > MAX_PAYLOAD:
        return None
    payload = f.read(length)
    if len(payload) < length or _crc(seq, at, payload) != crc:
        return None
    return Frame(seq, at, payload, offset + HEADER.size + length)


def last_seq(directory: Path, fallback: int = 0) -> int:
    """The sequence number of the last intact frame in a writer's directory."""
    segs = segments(directory)
    if not segs:
        return fallback
    last = segs[-1] - 1
    with open(directory / segment_name(segs[-1]), "rb") as f:
        offset = 0
        while (found := read_frame(f, offset)) is not None:
            last, offset = found.seq, found.end
    return max(last, fallback)


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


def disk_bytes(root: Path) -> int:
    """Bytes of every segment file under the spool root."""
    total = 0
    try:
        writers = [e for e in os.scandir(root) if e.is_dir()]
    except FileNotFoundError:
        return 0
    for w in writers:
        try:
            total += sum(e.stat().st_size for e in os.scandir(w.path) if e.name.endswith(SEGMENT_SUFFIX))
        except FileNotFoundError:
            continue
    return total


# --- serving side ------------------------------------------------------------------------


class SpoolFull(Exception):
    pass


class SpoolWriter:
    """Appends framed records to this process's writer directory. One thread uses it."""

    def __init__(self, settings: SpoolSettings, name: str = "serve") -> None:
        self.settings = settings
        self.root = settings.root
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock_fd, self.directory = self._claim(name)
        self.seq = last_seq(self.directory, read_cursor(self.directory).seq)
        while (self.directory / segment_name(self.seq + 1)).exists():
            # That file holds only a torn first frame of a writer that died: never append
            # after a torn frame; skip its number so the next segment gets a new name.
            self.seq += 1
        self._file: BinaryIO | None = None
        self._unsynced: list[BinaryIO] = []  # finished segments the next interval sync covers
        self._segment_size = 0
        self._disk = disk_bytes(self.root)
        self._disk_checked = time.monotonic()
        self._synced = time.monotonic()
        self._dirty = False

    def _claim(self, name: str) -> tuple[int, Path]:
        """This process's own directory: `name`, or `name-2`, ... when another writer holds it."""
        for n in range(1, 1000):
            directory = self.root / (name if n == 1 else f"{name}-{n}")
            directory.mkdir(exist_ok=True)
            for _ in range(3):  # a reader's brief liveness probe may hold a shared lock
                fd = try_lock(directory / "writer.lock")
                if fd is not None:
                    return fd, directory
                time.sleep(0.01)
        raise RuntimeError(f"no free spool writer directory under {self.root}")

    @property
    def name(self) -> str:
        return self.directory.name

    def append(self, payloads: list[bytes]) -> list[bool]:
        """Append records in one gathered write; False for each that did not fit under the bound.

        The payloads are not copied: each header and payload goes to the kernel as it is
        (writev), because a full-object call's record is megabytes and this runs beside the
        serving loop.
        """
        now = time.time()
        self._refresh_disk(force=False)
        accepted: list[bool] = []
        buffers: list[bytes] = []
        first = self.seq + 1
        size = 0
        for payload in payloads:
            need = HEADER.size + len(payload)
            if self._disk + size + need > self.settings.max_bytes:
                self._refresh_disk(force=True)
                if self._disk + size + need > self.settings.max_bytes:
                    accepted.append(False)
                    continue
            self.seq += 1
            buffers += (frame_head(self.seq, payload, now), payload)
            size += need
            accepted.append(True)
        if buffers:
            self._write(buffers, size, first)
            self._disk += size
        return accepted

    def _write(self, buffers: list[bytes], size: int, first_seq: int) -> None:
        if self._file is None or self._segment_size >= self.settings.segment_bytes:
            self._rotate(first_seq)
        assert self._file is not None
        write_all(self._file.fileno(), buffers)  # into the kernel now: a SIGKILL after this loses nothing
        self._segment_size += size
        self._dirty = True
        self.maybe_sync()

    def _rotate(self, first_seq: int) -> None:
        if self._file is not None:
            if self.settings.fsync == "interval" and self._dirty:
                # Synced with the next interval's fsync, not now: a full-object record is about
                # one segment, and forcing each to disk at once cost the serving core ~10 ms a call.
                self._unsynced.append(self._file)
                self._dirty = False
            else:
                self.sync()
                self._file.close()
        self._file = open(self.directory / segment_name(first_seq), "ab", buffering=0)
        self._segment_size = 0
        if self.settings.fsync != "never":
            _fsync_dir(self.directory)

    def maybe_sync(self) -> None:
        policy = self.settings.fsync
        if not (self._dirty or self._unsynced) or policy == "never":
            return
        if policy == "always" or time.monotonic() - self._synced >= self.settings.fsync_interval:
            self.sync()

    def sync(self) -> None:
        self._sync_finished()
        if self._file is not None and self._dirty and self.settings.fsync != "never":
            os.fsync(self._file.fileno())
        self._dirty = False
        self._synced = time.monotonic()

    def _refresh_disk(self, force: bool) -> None:
        # The recorder deletes finished segments; re-measure now and then (and at the bound,
        # at most every 0.2 s) instead of on every append.
        age = time.monotonic() - self._disk_checked
        if age >= 1.0 or (force and age >= 0.2):
            self._disk = disk_bytes(self.root)
            self._disk_checked = time.monotonic()

    def _sync_finished(self) -> None:
        """fsync the finished segments written since the last sync, and close them."""
        for f in self._unsynced:
            if os.fstat(f.fileno()).st_nlink:  # deleted: the recorder has stored all of it
                os.fsync(f.fileno())
            f.close()
        self._unsynced.clear()

    def close(self) -> None:
        self._sync_finished()  # a clean stop leaves everything on disk
        if self._file is not None:
            if self._dirty:
                os.fsync(self._file.fileno())
            self._file.close()
            self._file = None
        os.close(self._lock_fd)


IOV_MAX = 1024  # buffers per writev (Linux's UIO_MAXIOV)


def write_all(fd: int, buffers: list[bytes]) -> None:
    """Write every buffer, in order, with as few writev calls as the kernel allows."""
    i = 0
    while i < len(buffers):
        group = buffers[i : i + IOV_MAX]
        written = os.writev(fd, group)
        for buf in group:  # a short write (a full disk, a signal): go on where it stopped
            if written >= len(buf):
                written -= len(buf)
                i += 1
                continue
            rest = memoryview(buf)[written:]
            while rest:
                rest = rest[os.write(fd, rest):]
            i += 1
            break


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
