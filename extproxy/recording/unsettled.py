"""What a killed serving process leaves uncounted: the calls it answered that had not yet reached
the spool, kept in a memory-mapped file in its spool writer directory, so that the next writer
to claim that directory counts them as drops (reason `killed`) and exports of their time range
say they are incomplete.

Why a file in memory: a SIGKILL ends the process between any two instructions, so nothing it
would do at exit runs. Stores into a shared mapping land in the page cache, which the kernel
keeps when the process dies (not when the machine does: then the spool's own fsync policy is
the bound too). Each call costs two stores into the mapping, no system call.

What counts as settled: a call's record appended whole to the spool, or its drop counted and
mirrored here (DropCounter keeps its drops not yet written down in this file as well). A call
is tallied when the engine has its answer (`answered`), before its record is built: the record
of a per-backend call is built up to aside.RUN_WITHIN later (aside.py), and those calls count
too. A call answered at the instant of the kill may be tallied and never reach the scheduler:
the count is then one too high, never too low.

The file (native byte order, one writer: the process holding the directory's writer.lock):
  header: magic, slots, batch, batch_first_seq, batch_calls, gap_seq
  drops:  PENDING then IN_FLIGHT, DROP_SLOTS each: reason (32 bytes), calls, first_at, last_at
  ring:   starts[slots] (float: a call's start, 0.0 when settled), states[slots] (int: 0
          waiting; else the number of the spool write it is in)
A spool write (one batch of records) is announced in the header before its records are marked
and written, and retired after: at recovery the records of the announced batch found in the
spool (`resumed`, the last sequence number the new writer found) are the ones that landed.
Records torn by the kill are counted here and may also be counted `torn` by the recorder:
too high, never too low. A new process makes its tally beside the last one (`unsettled.new`)
and puts it in place only once it holds what the last one left: killed in between, the next
process counts the same calls again, and none of them was written down yet.

Must not touch the database or the spool's files other than its own.
"""
from __future__ import annotations

import itertools
import mmap
import os
import struct
from pathlib import Path

from .trace import Drops

FILE_NAME = "unsettled"
NEW_NAME = "unsettled.new"  # the next tally, until it holds what the last one left (take_place)
MAGIC = 0x3173_6C74_7473_6E75  # "unsttls1" read little-endian: a file of this format
HEADER = struct.Struct("=QQQQQQ")  # magic, slots, batch, batch_first_seq, batch_calls, gap_seq
DROP_SLOTS = 8  # reasons mirrored (dropcount.py has fewer); more fold into the last slot
DROP = struct.Struct("=32sQdd")  # reason, calls, first_at, last_at
DROPS_AT = HEADER.size
IN_FLIGHT_AT = DROPS_AT + DROP_SLOTS * DROP.size
RING_AT = IN_FLIGHT_AT + DROP_SLOTS * DROP.size  # a multiple of 8: the ring's arrays align

KILLED = "killed"


def slots_for(queue_size: int) -> int:
    """Ring slots for a hand-off of `queue_size` calls: more than can be unsettled at once (the
    hand-off, the spool write taking a batch of it, the calls put aside: aside.MAX_WAITING),
    so that a slot is never taken again while its call is unsettled."""
    from ..aside import MAX_WAITING

    return 2 * queue_size + 2 * MAX_WAITING


class Unsettled:
    """The tally of one writer directory. `answered` runs on the serving loop (and the heavy
    lane's thread); everything else in the spool-writer thread, or under DropCounter's lock."""

    def __init__(self, directory: Path, slots: int) -> None:
        self.path = directory / FILE_NAME
        self._new: Path | None = directory / NEW_NAME
        self.slots = slots
        self._left: tuple[int, bytes] | None = None  # what a writer before this one left: (its slots, its bytes)
        self._map = self._open()
        self._header = memoryview(self._map)[:HEADER.size].cast("Q")
        ring = memoryview(self._map)[RING_AT:]
        self._starts = ring[:8 * slots].cast("d")
        self._states = ring[8 * slots:16 * slots].cast("q")
        self._next = itertools.count()  # next() is atomic under the GIL: two threads never share a slot
        self._batch = 0
        self._batch_slots: list[int] = []

    def _open(self) -> mmap.mmap:
        """The last tally read whole, and a new one made beside it: the last one stays in place
        until the new one holds what it left (take_place), so a kill in between counts it again."""
        try:
            with open(self.path, "rb") as f:
                old = f.read()
        except FileNotFoundError:
            old = b""
        if len(old) >= RING_AT:
            magic, slots = HEADER.unpack_from(old)[:2]
            if magic == MAGIC and len(old) >= RING_AT + 16 * slots:
                self._left = (slots, old)
        assert self._new is not None
        fd = os.open(self._new, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, RING_AT + 16 * self.slots)  # zeros throughout
            mapped = mmap.mmap(fd, RING_AT + 16 * self.slots)
        finally:
            os.close(fd)
        HEADER.pack_into(mapped, 0, MAGIC, self.slots, 0, 0, 0, 0)
        return mapped

    def take_place(self) -> None:
        """The new tally becomes the directory's (after what the last one left is counted in it)."""
        if self._new is not None:
            os.replace(self._new, self.path)
            self._new = None

    # --- what a writer before this one left ---------------------------------------------

    def left_behind(self, resumed: int) -> list[Drops]:
        """The calls the directory's last writer answered and never settled, as drops: `killed`
        for the calls, and its drops not yet written down under their own reasons. `resumed`:
        the last sequence number found in the spool (what reached it). Read once."""
        left, self._left = self._left, None
        if left is None:
            return []
        slots, data = left
        _, _, batch, first, calls, gap_seq = HEADER.unpack_from(data)
        starts = memoryview(data)[RING_AT:RING_AT + 8 * slots].cast("d")
        states = memoryview(data)[RING_AT + 8 * slots:RING_AT + 16 * slots].cast("q")
        lost: list[float] = []
        in_batch = 0
        for start, state in zip(starts, states):
            if start == 0.0:
                continue
            if state == 0:
                lost.append(start)
            elif calls and state == batch:  # in the spool write under way; some may have landed
                lost.append(start)
                in_batch += 1
            # else: in a spool write that finished (settled by it)
        landed = max(0, min(in_batch, resumed - first + 1)) if calls else 0
        found = [Drops(KILLED, len(lost) - landed, min(lost), max(lost))] if len(lost) > landed else []
        found += _drops_at(data, DROPS_AT)
        if gap_seq and gap_seq > resumed:  # the gap record being written never landed
            found += _drops_at(data, IN_FLIGHT_AT)
        return found

    # --- the hot path ---------------------------------------------------------------------

    def answered(self, started: float) -> int:
        """Tally a call answered (its start, epoch seconds); its slot, for `settle` and `batch`."""
        slot = next(self._next) % self.slots
        self._states[slot] = 0  # first: a kill between the two stores leaves a stale start, never a stale state
        self._starts[slot] = started or 1e-9  # 0.0 is "settled"
        return slot

    def settle(self, slot: int) -> None:
        """The call's drop is counted (and mirrored): it is not unsettled any more."""
        if slot >= 0:
            self._starts[slot] = 0.0

    # --- the spool-writer thread ----------------------------------------------------------

    def writing(self, slots: list[int], first_seq: int) -> None:
        """A spool write of these calls' records, the first numbered `first_seq`, is to begin:
        announced before its calls are marked, so that a kill while marking counts them all."""
        self._batch += 1
        header = self._header
        header[3], header[4] = first_seq, len(slots)
        header[2] = self._batch
        for slot in slots:
            if slot >= 0:
                self._states[slot] = self._batch
        self._batch_slots = slots

    def written(self) -> None:
        """The announced write is over: its records are in the spool, or their drops counted."""
        self._header[4] = 0  # first: its calls are settled by it, whatever is left in the ring
        for slot in self._batch_slots:
            if slot >= 0:
                self._starts[slot] = 0.0
        self._batch_slots = []

    # --- DropCounter's mirror ---------------------------------------------------------------

    def drops_pending(self, pending: dict[str, list]) -> None:
        """Drops counted and not yet in a gap record: reason -> [calls, first, last]."""
        _put_drops(self._map, DROPS_AT, [Drops(r, n, f, last) for r, (n, f, last) in pending.items()])

    def gap_writing(self, taken: list[Drops], seq: int) -> None:
        """A gap record carrying `taken` is to be written as record `seq`."""
        _put_drops(self._map, IN_FLIGHT_AT, taken)
        self._header[5] = seq

    def gap_written(self) -> None:
        self._header[5] = 0

    def close(self) -> None:
        for view in (self._header, self._starts, self._states):
            view.release()
        self._map.close()

    def remove(self) -> None:
        """Closed, and its file gone: every call settled, nothing for a next writer to count. Only
        a writer that died leaves a tally behind, which is how the recorder finds it (abandoned.py)."""
        self.close()
        self.path.unlink(missing_ok=True)


def _put_drops(into: mmap.mmap, at: int, drops: list[Drops]) -> None:
    rows = list(drops[:DROP_SLOTS - 1])
    rest = drops[DROP_SLOTS - 1:]
    if rest:  # folded into one row: the count stays whole, under the first reason's name
        rows.append(Drops(rest[0].reason, sum(d.calls for d in rest), min(d.first_at for d in rest),
                          max(d.last_at for d in rest)))
    for i in range(DROP_SLOTS):
        if i < len(rows):
            d = rows[i]
            DROP.pack_into(into, at + i * DROP.size, d.reason.encode()[:32], d.calls, d.first_at, d.last_at)
        else:
            DROP.pack_into(into, at + i * DROP.size, b"", 0, 0.0, 0.0)


def _drops_at(data: bytes, at: int) -> list[Drops]:
    found = []
    for i in range(DROP_SLOTS):
        reason, calls, first, last = DROP.unpack_from(data, at + i * DROP.size)
        if calls:
            found.append(Drops(reason.rstrip(b"\0").decode(errors="replace"), calls, first, last))
    return found
