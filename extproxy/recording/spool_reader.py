"""The readers of the spool: the recorder's (`SpoolReader`: read in order, mark what is stored,
recycle or delete finished segments) and the shadow process's (`SpoolTail`: follow without
deleting).

Owns `SpoolReader` (one per spool: it holds reader.lock), the in-memory read positions, the
cursor files it writes after each committed batch, the recycling (renaming to free files,
which zeroing.py zeroes once due) or deletion of finished segments, and skipping (and
counting) torn or corrupt tails. The on-disk format is spool.py's. Must not decode records or
touch the database.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .spool import (
    DEFAULT_RECYCLE, END, Cursor, Frame, expected_seq, free_files, free_name, next_intact_frame, read_cursor,
    read_frame, segment_name, segments, try_lock, write_cursor, writer_alive,
)
from .zeroing import FreeFileZeroer

log = logging.getLogger(__name__)


class SpoolBusy(Exception):
    """Another recorder already drains this spool."""


@dataclass
class Entry:
    writer: str
    seq: int
    at: float
    payload: bytes


@dataclass
class _Position:
    directory: Path
    cursor: Cursor  # committed
    seq: int  # last read
    segment: int  # where the next read starts
    offset: int
    torn: int = 0


@dataclass
class TornTail:
    at: float  # its segment's last write (epoch)
    where: str  # "writer/segment/offset": the same tail found again after a restart says the same
    records: int = 1  # records lost with it: at least one


@dataclass
class ReadResult:
    entries: list[Entry] = field(default_factory=list)
    torn: int = 0  # torn or corrupt segment tails skipped during this read
    torn_tails: list[TornTail] = field(default_factory=list)


def _skipped_torn(result: ReadResult, pos: _Position, mtime: float, records: int = 1) -> None:
    result.torn += records
    result.torn_tails.append(TornTail(mtime, f"{pos.directory.name}/{pos.segment}/{pos.offset}", records))


def _read_on(pos: _Position, result: ReadResult, f, size: int, mtime: float, below: int | None) -> Frame | None:
    """Past a corrupt frame: the next intact one in the segment, counting the records between
    as torn (their numbers are known from it). None when there is none."""
    expected = expected_seq(pos.segment, pos.offset, pos.seq)
    found = next_intact_frame(f, pos.offset + 1, size, expected - 1, below)
    if found is None:
        return None
    lost = found.seq - expected
    log.warning("spool %s: corrupt bytes at %d skipped, %d records with them; reading on at record %d",
                pos.directory / segment_name(pos.segment), pos.offset, lost, found.seq)
    if lost:
        _skipped_torn(result, pos, mtime, lost)
    pos.seq, pos.offset = found.seq, found.end
    return found


class _Listing:
    """A writer directory's segments as listed at the start of one read, listed again at most
    once more when the read reaches the end of what it knew (or at once when a segment is gone),
    and the one segment file being read, kept open for the read. Unbuffered: a recycled
    segment's old bytes read ahead must not be taken for what its writer writes over them."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.segments = segments(directory)
        self._relisted = False
        self._open: tuple[int, object] | None = None

    def refresh(self, force: bool = False) -> bool:
        """List again (once per read unless forced); whether the listing changed."""
        if self._relisted and not force:
            return False
        self._relisted = True
        before, self.segments = self.segments, segments(self.directory)
        return self.segments != before

    def open(self, segment: int):
        if self._open is not None and self._open[0] == segment:
            return self._open[1]
        self.close()
        f = open(self.directory / segment_name(segment), "rb", buffering=0)
        self._open = (segment, f)
        return f

    def close(self) -> None:
        if self._open is not None:
            self._open[1].close()  # type: ignore[attr-defined]
            self._open = None


class SpoolReader:
    """Reads every writer directory in order; `commit` marks what was read as stored.

    `recycle`: finished segments kept per writer directory as free files for its writer to
    overwrite (EXTPROXY_SPOOL_RECYCLE_SEGMENTS); the rest are deleted. A free file its writer
    has not taken `zero_after` seconds after it was freed is overwritten with zeros, forced to
    disk when `sync` (zeroing.py; at each commit and `zero_free`)."""

    def __init__(self, root: Path, recycle: int = DEFAULT_RECYCLE, sync: bool = True, zero_after: float = 0.0) -> None:
        self.root = root
        self.recycle = recycle
        root.mkdir(parents=True, exist_ok=True, mode=0o700)  # bodies before redaction: see SpoolWriter
        fd = try_lock(root / "reader.lock")
        if fd is None:
            raise SpoolBusy(f"another recorder is draining {root}")
        self._lock_fd = fd
        self._positions: dict[str, _Position] = {}
        self.zeroer = FreeFileZeroer(root, zero_after, sync)

    def _position(self, directory: Path) -> _Position:
        pos = self._positions.get(directory.name)
        if pos is None:
            cursor = read_cursor(directory)
            pos = _Position(directory, cursor, cursor.seq, cursor.segment, cursor.offset)
            self._positions[directory.name] = pos
        return pos

    def read(self, max_records: int, max_bytes: int, size_of: Callable[[bytes], int] = len) -> ReadResult:
        """Up to `max_records` records, and no more once `max_bytes` are reached, each record
        weighing `size_of(payload)` (the recorder passes what a record takes once decoded)."""
        result = ReadResult()
        size = 0
        for directory in sorted(p for p in self.root.iterdir() if p.is_dir()):
            pos = self._position(directory)
            # One listing and one open file per directory and read, not per record: at a few
            # thousand records a second both were a tenth of the recorder's time.
            listing = _Listing(directory)
            try:
                while len(result.entries) < max_records and size < max_bytes:
                    found = self._next(pos, result, listing)
                    if found is None:
                        break
                    result.entries.append(Entry(directory.name, found.seq, found.at, found.payload))
                    size += size_of(found.payload)
            finally:
                listing.close()
        return result

    def _next(self, pos: _Position, result: ReadResult, listing: "_Listing") -> Frame | None:
        while True:
            current = [s for s in listing.segments if s >= pos.segment]
            if not current:
                if listing.refresh():
                    continue
                return None
            if current[0] != pos.segment:  # the cursor's segment is gone (or was 0): the oldest left
                pos.segment, pos.offset = current[0], 0
            try:
                f = listing.open(pos.segment)
                found = read_frame(f, pos.offset, expected_seq(pos.segment, pos.offset, pos.seq))
            except FileNotFoundError:
                listing.refresh(force=True)
                continue
            if isinstance(found, Frame):
                pos.seq, pos.offset = found.seq, found.end
                return found
            # Past the data: nothing (the file ends), the end marker of a recycled segment (old
            # bytes follow: not torn), or bytes that are no frame of this segment (torn).
            if len(current) == 1 and listing.refresh():
                continue  # the listing is from the start of this read: a newer segment may exist now
            stat = os.fstat(f.fileno())
            size = stat.st_size
            torn = found is not END and size > pos.offset
            newer = len(current) > 1
            path = pos.directory / segment_name(pos.segment)
            if not newer:
                if torn and not writer_alive(pos.directory):  # the writer died mid-frame and has not come back
                    again = _read_on(pos, result, f, size, stat.st_mtime, None)
                    if again is not None:
                        return again
                    _skipped_torn(result, pos, stat.st_mtime)
                    log.warning("spool %s: torn tail of %d bytes skipped (its writer is gone)", path, size - pos.offset)
                    pos.offset = size
                return None
            if torn:
                again = _read_on(pos, result, f, size, stat.st_mtime, current[1])
                if again is not None:
                    return again
                # The records numbered up to the next segment's first (numbers a failed write
                # spent, counted spool-error, among them: rare), or the torn one at least.
                lost = max(1, current[1] - expected_seq(pos.segment, pos.offset, pos.seq))
                _skipped_torn(result, pos, stat.st_mtime, lost)
                log.warning("spool %s: torn or corrupt tail of %d bytes skipped, %d records", path,
                            size - pos.offset, lost)
            pos.segment, pos.offset = current[1], 0

    @property
    def moved(self) -> bool:
        """Whether any read position is past its committed cursor."""
        return any(Cursor(p.seq, p.segment, p.offset) != p.cursor for p in self._positions.values())

    def commit(self) -> None:
        """Everything read so far is stored: move the cursors, recycle or delete finished segments."""
        for pos in self._positions.values():
            cursor = Cursor(pos.seq, pos.segment, pos.offset)
            if cursor == pos.cursor:
                continue
            write_cursor(pos.directory, cursor)
            pos.cursor = cursor
            done = [first for first in segments(pos.directory) if first < pos.segment]
            if done:
                self._retire(pos.directory, done)

    def _retire(self, directory: Path, done: list[int]) -> None:
        """Finished segments become free files for the writer to overwrite, up to `recycle` of
        them in the directory (the newest first: their pages are likeliest still cached); the
        rest are deleted. A free file is zeroed once due (zeroing.py)."""
        room = self.recycle - len(free_files(directory)) if self.recycle else 0
        for first in reversed(done):
            path = directory / segment_name(first)
            try:
                if room > 0:
                    os.rename(path, directory / free_name(first))
                    self.zeroer.freed(directory, first)
                    room -= 1
                else:
                    os.unlink(path)
            except FileNotFoundError:
                pass
        self.zeroer.zero_due()

    def zero_free(self) -> None:
        """Zero the free files that are due (FreeFileZeroer.zero_due): the recorder calls it when idle."""
        self.zeroer.zero_due()

    def rewind(self) -> None:
        """Forget what was read and not committed (it is read again)."""
        for pos in self._positions.values():
            pos.seq, pos.segment, pos.offset = pos.cursor.seq, pos.cursor.segment, pos.cursor.offset

    def close(self) -> None:
        os.close(self._lock_fd)


# --- a second reader: the shadow process's tail ----------------------------------------------


@dataclass
class TailItem:
    """One step of a tail: a record, or records it could no longer reach (`skipped`)."""

    writer: str
    position: Cursor  # where the tail stands once this item is done
    entry: Entry | None = None
    skipped: int = 0


class SpoolTail:
    """Follows every writer directory in order from positions its owner keeps (the shadow
    process stores them with its figures): never locks the spool, writes no cursor file and
    deletes nothing, so the recorder drains and cleans the spool whether a tail runs or not.

    The recorder recycles or deletes a segment once it has stored it, whatever the tail's
    position (the choice that keeps the spool's bound the recorder's alone). The tail keeps the
    segment it is reading open, so a segment deleted under it is still read to its end (at
    most one deleted segment per writer stays on disk until the tail moves on), and a recycled
    one until its writer overwrites it or the recorder zeroes it (EXTPROXY_SPOOL_SEGMENT_SECONDS
    after it was freed): from then the tail finds no frame with the sequence number it expects
    there, takes nothing of what is there, and moves on. When the tail's next segment is gone,
    it goes on at the oldest segment left and reports the records in between as `skipped`,
    from the gap in sequence numbers. A writer the tail has no position for is followed from
    its oldest segment, nothing counted as skipped.
    """

    def __init__(self, root: Path, positions: dict[str, Cursor] | None = None) -> None:
        self.root = root
        self.positions: dict[str, Cursor] = dict(positions or {})
        self._open: dict[str, tuple[int, object]] = {}  # writer -> (segment, file) being read

    def read(self, max_records: int) -> list[TailItem]:
        items: list[TailItem] = []
        try:
            directories = sorted(p for p in self.root.iterdir() if p.is_dir())
        except FileNotFoundError:
            return items
        for directory in directories:
            while sum(1 for i in items if i.entry is not None) < max_records:
                item = self._next(directory)
                if item is None:
                    break
                items.append(item)
        return items

    def _file(self, writer: str, directory: Path, segment: int):
        held = self._open.get(writer)
        if held is not None and held[0] == segment:
            return held[1]
        self._close(writer)
        try:
            # Unbuffered, as _Listing's: a buffer would keep the end marker the tail stopped at
            # (and the recycled file's old bytes after it) and hide the frames written over it.
            f = open(directory / segment_name(segment), "rb", buffering=0)
        except FileNotFoundError:
            return None
        self._open[writer] = (segment, f)
        return f

    def _close(self, writer: str) -> None:
        held = self._open.pop(writer, None)
        if held is not None:
            held[1].close()  # type: ignore[attr-defined]

    def _next(self, directory: Path) -> TailItem | None:
        writer = directory.name
        pos = self.positions.get(writer)
        known = pos is not None
        pos = pos or Cursor()
        f = self._file(writer, directory, pos.segment) if pos.segment else None
        if f is not None and (item := self._take(writer, f, pos)) is not None:
            return item
        # At the end of the segment (or it is gone, or there is none yet): the next one, if any.
        segs = segments(directory)
        later = [s for s in segs if s > pos.segment]
        if not later:
            if known and segs and pos.segment not in segs and f is None:
                log.warning("spool %s: the tail's segment %d is older than all (writer reset?)", directory, pos.segment)
                later = segs[:1]
            else:
                return None  # the writer appends to this segment still (or a torn tail waits for its next one)
        elif f is not None and (item := self._take(writer, f, pos)) is not None:
            # Its writer finished this segment before starting the next: read again, a frame
            # that was being written at the first read is complete now.
            return item
        self._close(writer)
        skipped = max(0, later[0] - (pos.seq + 1)) if known else 0
        moved = Cursor(later[0] - 1, later[0], 0)
        self.positions[writer] = moved
        return TailItem(writer, moved, skipped=skipped)

    def _take(self, writer: str, f, pos: Cursor) -> TailItem | None:
        """The frame at the tail's position, if it is the next of its segment."""
        found = read_frame(f, pos.offset, expected_seq(pos.segment, pos.offset, pos.seq))
        if not isinstance(found, Frame):
            return None
        moved = Cursor(found.seq, pos.segment, found.end)
        self.positions[writer] = moved
        return TailItem(writer, moved, entry=Entry(writer, found.seq, found.at, found.payload))

    def close(self) -> None:
        for writer in list(self._open):
            self._close(writer)
