"""The serving side of the spool: `SpoolWriter` appends framed records to this process's
writer directory, starts each segment in a free file when the recorder left one (recycling,
see spool.py for the layout and its guarantees), and keeps the spool's byte bound.

Owns writing: the gathered writes at explicit offsets (gathered_write.py), the end markers after
data in a recycled segment, cutting a recycled segment to its data when leaving it, fsync by
policy, finishing a segment by age and at a clean stop, and the bound (free files counted and
given back at it: spool_usage.py). The format is spool.py's. Must not decode records or read
what the recorder reads.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from .gathered_write import SpoolWriteError, pwrite_all, whole_frames, whole_records
from .spool import (
    HEADER, SpoolSettings, end_marker, frame_head, free_files, free_name, read_cursor, scan_segment, segment_name,
    segments, try_lock,
)
from .spool_usage import disk_usage, drop_free_files, undrained_bytes

log = logging.getLogger(__name__)


BACKLOG_EVERY = 1.0  # seconds between readings of the recorder's cursors (SpoolWriter.backlog)


# --- serving side ------------------------------------------------------------------------


@dataclass
class _Segment:
    """The segment being written."""

    path: Path
    fd: int
    first: int
    recycled: bool  # a free file reused: old bytes may follow the data
    end: int = 0  # offset just past the last frame written
    size: int = 0  # the file's size
    failed: bool = False  # a write failed: part of it may follow the data; the next write starts a new segment
    born: float = 0.0  # time.monotonic() of its first record (0: none yet)


class SpoolWriter:
    """Appends framed records to this process's writer directory. One thread uses it."""

    def __init__(self, settings: SpoolSettings, name: str = "serve") -> None:
        self.settings = settings
        self.root = settings.root
        # The spool holds the scheduler's bodies before redaction (Pod specs, secrets and all):
        # for this user only, as the database's redacted copy need not be.
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock_fd, self.directory = self._claim(name)
        self.seq = self._resume(read_cursor(self.directory).seq)
        self.resumed = self.seq  # the last record a writer before this one left whole (unsettled.py)
        while _holds_bytes(self.directory / segment_name(self.seq + 1)):
            # That file holds only a torn first frame of a writer that died: never append after
            # a torn frame; skip its number so the next segment gets a new name. An empty one (a
            # segment started by age before the process stopped idle, or a recycled file it had
            # not written to: cut at its marker above) is written from its start, its number
            # not spent: a number skipped showed as a record never stored (depth 1) until the
            # next call was.
            self.seq += 1
        self._segment: _Segment | None = None
        self.position = (0, 0)  # (segment, end of its data): one tuple, read by other threads
        self._unsynced: list[_Segment] = []  # finished segments the next interval sync covers
        self._disk, self._free = disk_usage(self.root)
        self._disk_checked = time.monotonic()
        self._synced = time.monotonic()
        self._dirty = False
        self._backlog, self._backlog_at, self._appended = 0, float("-inf"), 0  # see backlog()

    def _claim(self, name: str) -> tuple[int, Path]:
        """This process's own directory: `name`, or `name-2`, ... when another writer holds it."""
        for n in range(1, 1000):
            directory = self.root / (name if n == 1 else f"{name}-{n}")
            directory.mkdir(exist_ok=True, mode=0o700)
            for _ in range(3):  # a reader's brief liveness probe may hold a shared lock
                fd = try_lock(directory / "writer.lock")
                if fd is not None:
                    return fd, directory
                time.sleep(0.01)
        raise RuntimeError(f"no free spool writer directory under {self.root}")

    def _resume(self, committed: int) -> int:
        """The last sequence number written here (by a writer before this one)."""
        segs = segments(self.directory)
        if not segs:
            return committed
        path = self.directory / segment_name(segs[-1])
        scan = scan_segment(path, segs[-1])
        if scan.marked:
            # A recycled segment its writer left without closing (killed): its data ends at the
            # marker. Cut the old bytes after it, so that it looks like any finished segment.
            os.truncate(path, scan.end)
        return max(scan.last, committed)

    @property
    def name(self) -> str:
        return self.directory.name

    def backlog(self) -> int:
        """Bytes of records the recorder has not stored yet, in every writer's directory: read
        from their cursors and segment sizes at most every BACKLOG_EVERY seconds, plus what
        this writer appended since. (Another writer's reused segment counts its old bytes
        after the data: at most a segment each.) Raises OSError when the spool cannot be read."""
        now = time.monotonic()
        if now - self._backlog_at >= BACKLOG_EVERY:
            self._backlog = undrained_bytes(self.root, {self.name: self.position})
            self._backlog_at, self._appended = now, 0
        return self._backlog + self._appended

    def append(self, payloads: list[bytes], bound: int | None = None) -> list[bool]:
        """Append records in one gathered write; False for each that did not fit under the bound.

        The bound: the calls' (SpoolSettings.calls_bound) unless given; gap records may use
        the reserve above it (dropcount.py). The payloads are not copied: each header and
        payload goes to the kernel as it is (pwritev), because a full-object call's record is
        megabytes and this runs beside the serving loop. Raises SpoolWriteError.
        """
        bound = self.settings.calls_bound if bound is None else bound
        now = time.time()
        self._refresh_disk(force=False)
        accepted: list[bool] = []
        buffers: list[bytes] = []
        first = self.seq + 1
        size = 0
        for payload in payloads:
            need = HEADER.size + len(payload)
            if self._disk + size + need > bound and not self._make_room(size + need, bound):
                accepted.append(False)
                continue
            self.seq += 1
            buffers += (frame_head(self.seq, payload, now), payload)
            size += need
            accepted.append(True)
        if buffers:
            try:
                self._write(buffers, size, first)
            except Exception as exc:
                # The numbers are spent (readers expect none missing within a segment, so the
                # next write goes to a new one), and what part of this write reached the file
                # is never overwritten while a reader may be reading it.
                if self._segment is not None:
                    self._segment.failed = True
                if isinstance(exc, OSError):
                    raise SpoolWriteError(exc, *whole_records(payloads, accepted, getattr(exc, "whole", 0))) from exc
                raise
        return accepted

    def _make_room(self, need: int, bound: int) -> bool:
        """At the bound: measure again (at most every 0.2 s), then give back the free files."""
        self._refresh_disk(force=True)
        if self._disk + need > bound and self._free:
            self._disk -= drop_free_files(self.root)
            self._free = 0
        return self._disk + need <= bound

    def _write(self, buffers: list[bytes], size: int, first_seq: int) -> None:
        seg = self._segment
        if seg is None or seg.failed or seg.end >= self.settings.segment_bytes or self._aged(seg):
            seg = self._rotate(first_seq)
        if seg.recycled:  # mark where the data ends: old bytes follow (overwritten by the next write)
            buffers = buffers + [end_marker(self.seq + 1)]
        try:
            pwrite_all(seg.fd, buffers, seg.end)  # into the kernel now: a SIGKILL after this loses nothing
        except OSError as exc:  # part of it may be in the file: its whole frames stay, and count as spooled
            exc.whole = whole_frames(buffers, getattr(exc, "written", 0))  # type: ignore[attr-defined]
            self._wrote(seg, exc.whole)  # type: ignore[attr-defined]
            raise
        self._wrote(seg, size)
        try:
            self.maybe_sync()
        except OSError as exc:  # the records are in the file (the recorder reads them): spooled
            exc.whole = size  # type: ignore[attr-defined]
            raise

    def _aged(self, seg: _Segment) -> bool:
        limit = self.settings.segment_seconds
        return bool(limit and seg.born and time.monotonic() - seg.born >= limit)

    def finish_aged(self) -> None:
        """Start the next segment now when the current one's first record is older than
        `segment_seconds` (the spool-writer calls it when it has nothing to append): the
        recorder retires a segment only once a newer one exists, and zeroes it as it does, so a
        segment left open would keep stored calls' bodies as received, secrets and all, on disk
        until it filled, hours at a trickle of calls. Raises OSError as a write would."""
        seg = self._segment
        if seg is not None and not seg.failed and self._aged(seg):
            self._rotate(self.seq + 1)

    def _wrote(self, seg: _Segment, size: int) -> None:
        if not seg.born and size:
            seg.born = time.monotonic()
        seg.end += size
        self._appended += size
        reach = seg.end + (HEADER.size if seg.recycled else 0)
        if reach > seg.size:  # the file grew (overwriting a recycled file's old bytes takes no more disk)
            self._disk += reach - seg.size
            seg.size = reach
        self.position = (seg.first, seg.end)
        self._dirty = True

    def _rotate(self, first_seq: int) -> _Segment:
        # Let go of the old segment first: should what follows fail (EMFILE, ENOSPC), the next
        # write tries a new segment again and never closes the old descriptor twice (by then
        # its number may be a client's socket).
        old, self._segment = self._segment, None
        if old is not None:
            self._retire(old)
        path = self.directory / segment_name(first_seq)
        seg = self._reuse(path, first_seq)
        if seg is None:
            seg = _Segment(path, os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), first_seq, recycled=False)
        self._segment = seg
        if self.settings.fsync != "never":
            _fsync_dir(self.directory)
        return seg

    def _retire(self, seg: _Segment) -> None:
        """Done writing `seg`: cut, then synced and closed now, or with the next interval's fsync."""
        self._leave(seg)
        if self.settings.fsync == "interval" and self._dirty:
            # Synced with the next interval's fsync, not now: a full-object record is about
            # one segment, and forcing each to disk at once cost the serving core ~10 ms a call.
            self._unsynced.append(seg)
            self._dirty = False
            return
        try:
            self._sync_finished()
            if self._dirty and self.settings.fsync != "never":
                os.fsync(seg.fd)
        finally:
            os.close(seg.fd)
            self._dirty = False
            self._synced = time.monotonic()

    def _reuse(self, path: Path, first_seq: int) -> _Segment | None:
        """A free file renamed to `path`, its data ending at 0, or None when there is none."""
        for number in reversed(free_files(self.directory)):  # the latest freed: its pages are likeliest cached
            free = self.directory / free_name(number)
            try:
                fd = os.open(free, os.O_WRONLY)  # no O_TRUNC: the point is to keep its pages
            except FileNotFoundError:
                continue
            try:
                # Marked empty before it gets the name: a writer killed before its first write
                # leaves an empty segment, not old frames under a new name.
                os.pwrite(fd, end_marker(first_seq), 0)
                os.rename(free, path)
            except FileNotFoundError:  # deleted at the bound meanwhile
                os.close(fd)
                continue
            except BaseException:  # EIO, ENOSPC: the write fails; the descriptor must not leak each time
                os.close(fd)
                raise
            size = os.fstat(fd).st_size
            self._free = max(0, self._free - size)
            return _Segment(path, fd, first_seq, recycled=True, size=size)
        return None

    def _leave(self, seg: _Segment) -> None:
        """Done writing `seg`: cut at the end of its data when something may follow it (a recycled
        file's marker and old bytes, a failed write's part), so that its size is its data."""
        if not (seg.recycled or seg.failed):
            return
        try:
            size = os.fstat(seg.fd).st_size
            if size > seg.end:
                os.ftruncate(seg.fd, seg.end)
                self._disk -= size - seg.end
        except OSError:  # left as it is, it is still read right (the marker ends it; a torn tail is counted)
            pass
        seg.size = seg.end

    def maybe_sync(self) -> None:
        policy = self.settings.fsync
        if not (self._dirty or self._unsynced) or policy == "never":
            return
        if policy == "always" or time.monotonic() - self._synced >= self.settings.fsync_interval:
            self.sync()

    def sync(self) -> None:
        self._sync_finished()
        if self._segment is not None and self._dirty and self.settings.fsync != "never":
            os.fsync(self._segment.fd)
        self._dirty = False
        self._synced = time.monotonic()

    def _refresh_disk(self, force: bool) -> None:
        # The recorder recycles and deletes finished segments; re-measure now and then (and
        # at the bound, at most every 0.2 s) instead of on every append.
        age = time.monotonic() - self._disk_checked
        if age >= 1.0 or (force and age >= 0.2):
            self._disk, self._free = disk_usage(self.root)
            self._disk_checked = time.monotonic()

    def _sync_finished(self) -> None:
        """fsync the finished segments written since the last sync, and close them. Each is taken
        off the list before its fsync: one that fails is closed, and never closed again."""
        while self._unsynced:
            seg = self._unsynced.pop(0)
            try:  # still under its name? Else the recorder has stored all of it (and recycled or deleted it)
                try:
                    kept = os.stat(seg.path).st_ino == os.fstat(seg.fd).st_ino
                except FileNotFoundError:
                    kept = False
                if kept:
                    os.fsync(seg.fd)
            finally:
                os.close(seg.fd)

    def close(self) -> None:
        try:
            self._finish_for_the_recorder()
            self._sync_finished()  # a clean stop leaves everything on disk
            seg, self._segment = self._segment, None
            if seg is not None:
                self._leave(seg)
                try:
                    if self._dirty:
                        os.fsync(seg.fd)
                finally:
                    os.close(seg.fd)
        finally:
            os.close(self._lock_fd)  # the next writer may claim this directory

    def _finish_for_the_recorder(self) -> None:
        """At a clean stop, start the next segment (left empty) after the directory's last one
        when that holds records, this writer's or, when it wrote none, its predecessor's (the
        recorder's claim of a killed process's directory, abandoned.py, ends that one so): the
        recorder retires a segment once a newer one exists, so the last one of a process that
        is not started again would keep its calls' bodies as received on disk for good. A
        restarted writer writes the empty one from its start (__init__)."""
        seg = self._segment
        if seg is not None and (seg.failed or not seg.end):
            return
        if seg is None:
            last = segments(self.directory)[-1:]
            if not last or not _holds_bytes(self.directory / segment_name(last[0])):
                return
        try:
            self._rotate(self.seq + 1)
        except OSError as exc:  # the disk: the segment stays as it is, read and stored all the same
            log.warning("spool %s: no next segment at the stop (%s): the last one stays until a writer comes back",
                        self.directory, exc)


def _holds_bytes(path: Path) -> bool:
    try:
        return os.path.getsize(path) > 0
    except FileNotFoundError:
        return False


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
