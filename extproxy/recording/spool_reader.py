"""The recorder's end of the spool: read every writer directory in order, mark what is stored.

Owns `SpoolReader` (one per spool: it holds reader.lock), the in-memory read positions, the
cursor files it writes after each committed batch, the deletion of finished segments, and
skipping (and counting) torn or corrupt tails. The on-disk format is spool.py's. Must not
decode records or touch the database.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from .spool import Cursor, Frame, read_cursor, read_frame, segment_name, segments, try_lock, write_cursor, writer_alive

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
class ReadResult:
    entries: list[Entry] = field(default_factory=list)
    torn: int = 0  # torn or corrupt segment tails skipped during this read


class SpoolReader:
    """Reads every writer directory in order; `commit` marks what was read as stored."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        fd = try_lock(root / "reader.lock")
        if fd is None:
            raise SpoolBusy(f"another recorder is draining {root}")
        self._lock_fd = fd
        self._positions: dict[str, _Position] = {}

    def _position(self, directory: Path) -> _Position:
        pos = self._positions.get(directory.name)
        if pos is None:
            cursor = read_cursor(directory)
            pos = _Position(directory, cursor, cursor.seq, cursor.segment, cursor.offset)
            self._positions[directory.name] = pos
        return pos

    def read(self, max_records: int, max_bytes: int) -> ReadResult:
        result = ReadResult()
        size = 0
        for directory in sorted(p for p in self.root.iterdir() if p.is_dir()):
            pos = self._position(directory)
            while len(result.entries) < max_records and size < max_bytes:
                found = self._next(pos, result)
                if found is None:
                    break
                result.entries.append(Entry(directory.name, found.seq, found.at, found.payload))
                size += len(found.payload)
        return result

    def _next(self, pos: _Position, result: ReadResult) -> Frame | None:
        segs = segments(pos.directory)
        while True:
            current = [s for s in segs if s >= pos.segment]
            if not current:
                return None
            if current[0] != pos.segment:  # the cursor's segment is gone (or was 0): the oldest left
                pos.segment, pos.offset = current[0], 0
            path = pos.directory / segment_name(pos.segment)
            try:
                with open(path, "rb") as f:
                    found = read_frame(f, pos.offset)
                    size = os.fstat(f.fileno()).st_size
            except FileNotFoundError:
                segs = segments(pos.directory)
                continue
            if found is not None:
                pos.seq, pos.offset = found.seq, found.end
                return found
            newer = len(current) > 1
            if not newer:
                if size > pos.offset and not writer_alive(pos.directory):
                    result.torn += 1  # the writer died mid-frame and has not come back
                    log.warning("spool %s: torn tail of %d bytes skipped (its writer is gone)", path, size - pos.offset)
                    pos.offset = size
                return None
            if size > pos.offset:
                result.torn += 1
                log.warning("spool %s: torn or corrupt tail of %d bytes skipped", path, size - pos.offset)
            pos.segment, pos.offset = current[1], 0

    def commit(self) -> None:
        """Everything read so far is stored: move the cursors, delete finished segments."""
        for pos in self._positions.values():
            cursor = Cursor(pos.seq, pos.segment, pos.offset)
            if cursor == pos.cursor:
                continue
            write_cursor(pos.directory, cursor)
            pos.cursor = cursor
            for first in segments(pos.directory):
                if first < pos.segment:
                    try:
                        os.unlink(pos.directory / segment_name(first))
                    except FileNotFoundError:
                        pass

    def rewind(self) -> None:
        """Forget what was read and not committed (it is read again)."""
        for pos in self._positions.values():
            pos.seq, pos.segment, pos.offset = pos.cursor.seq, pos.cursor.segment, pos.cursor.offset

    def close(self) -> None:
        os.close(self._lock_fd)
