"""What the spool takes on disk, as the serving side's bound needs it: every writer directory's
segment and free files, giving free files back at the bound, and the bytes the recorder has
not stored yet. Read from the disk (the cursors and file sizes), never from records.
"""
from __future__ import annotations

import os
from pathlib import Path

from .spool import files_usage, free_files, free_name, read_cursor, undrained_extents


def disk_usage(root: Path) -> tuple[int, int]:
    """Bytes of every segment and free file under the spool root, and of the free files alone."""
    try:
        with os.scandir(root) as entries:
            writers = [Path(e.path) for e in entries if e.is_dir()]
    except FileNotFoundError:
        return 0, 0
    total = free = 0
    for w in writers:
        w_total, w_free = files_usage(w)
        total, free = total + w_total, free + w_free
    return total, free


def drop_free_files(root: Path) -> int:
    """Delete every free file under the spool root (room for records at the bound); bytes freed."""
    freed = 0
    try:
        with os.scandir(root) as entries:
            writers = [e.path for e in entries if e.is_dir()]
    except FileNotFoundError:
        return 0
    for w in writers:
        for first in free_files(Path(w)):
            path = Path(w) / free_name(first)
            try:
                size = path.stat().st_size
                path.unlink()
            except FileNotFoundError:  # taken by its writer meanwhile
                continue
            freed += size
    return freed


def undrained_bytes(root: Path, known_end: dict[str, tuple[int, int]]) -> int:
    """Bytes of every writer directory's segments from its cursor on (not yet stored).
    `known_end`: a writer's own (segment, end of its data), so that its reused segment's old
    bytes after the data are not counted."""
    with os.scandir(root) as entries:
        writers = [Path(e.path) for e in entries if e.is_dir()]
    return sum(end - start for directory in writers
               for _, _, start, end in undrained_extents(directory, read_cursor(directory), known_end.get(directory.name)))
