"""Zeroing the spool's free files: the recorder's finished segments kept for their writer to
reuse (spool.py, "Recycling" and "Zeroing").

Their records are bodies as the scheduler sent them, before redaction, already stored
(redacted) in the database; left alone they stay readable until a writer happens to overwrite
them, which may be never. A free file its writer has not taken `zero_after` seconds
(EXTPROXY_SPOOL_SEGMENT_SECONDS) after it was freed is overwritten with zeros in place: its
pages stay cached, which is why it was kept. The wait leaves the shadow process's tail, which
may read a segment after the recorder has stored it, the slack a writer's reuse always gave it.

While zeroed a file is named `<first seq>.zeroing`, so that no writer takes it half done; the
rename is the claim (a writer that took the file first renamed it away: nothing to do). A
recorder stopped meanwhile leaves that name, and the next one zeroes it first. Used by
spool_reader.SpoolReader only; must not read records.
"""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from .spool import free_files, free_name, zeroing_files, zeroing_name

log = logging.getLogger(__name__)

ZERO_CHUNK = bytes(1 << 20)


def zero_file(path: Path, sync: bool) -> None:
    """Overwrite the file with zeros in place, forced to disk when `sync`. Raises OSError
    (FileNotFoundError when it is gone)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        size = os.fstat(fd).st_size
        offset = 0
        while offset < size:
            offset += os.pwrite(fd, memoryview(ZERO_CHUNK)[: min(len(ZERO_CHUNK), size - offset)], offset)
        if sync and size:
            os.fdatasync(fd)
    finally:
        os.close(fd)


class FreeFileZeroer:
    """The spool's free files not zeroed yet, and when each was freed."""

    def __init__(self, root: Path, zero_after: float, sync: bool) -> None:
        self.zero_after = zero_after
        self.sync = sync
        # (writer directory, first seq) -> when freed (monotonic). When an earlier recorder
        # freed the files it left is not known: due at once.
        self._unzeroed: dict[tuple[Path, int], float] = {}
        for directory in (p for p in root.iterdir() if p.is_dir()):
            self._unzeroed.update(((directory, first), float("-inf")) for first in free_files(directory))
            for first in zeroing_files(directory):
                self._zero(directory, first, directory / zeroing_name(first))

    def freed(self, directory: Path, first: int) -> None:
        """Segment `first` of `directory` was renamed to a free file just now."""
        self._unzeroed[(directory, first)] = time.monotonic()

    def zero_due(self) -> None:
        """Zero the free files freed `zero_after` seconds ago or more that no writer has taken
        (those taken are being overwritten by their writer; those deleted at the bound are gone)."""
        if not self._unzeroed:
            return
        due = time.monotonic() - self.zero_after
        for key, freed in list(self._unzeroed.items()):
            if freed > due:
                continue
            del self._unzeroed[key]
            directory, first = key
            aside = directory / zeroing_name(first)
            try:  # out of the writer's reach first: renamed, it cannot take the file half zeroed
                os.rename(directory / free_name(first), aside)
            except FileNotFoundError:
                continue
            self._zero(directory, first, aside)

    def _zero(self, directory: Path, first: int, aside: Path) -> None:
        """Zero `aside` and make it a free file again; deleted instead when the disk refuses."""
        try:
            zero_file(aside, self.sync)
            os.rename(aside, directory / free_name(first))
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("spool %s: could not zero a stored segment (%s); deleted instead", aside, exc)
            try:
                os.unlink(aside)
            except OSError:
                pass
