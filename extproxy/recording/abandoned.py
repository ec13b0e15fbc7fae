"""Spool writer directories that a killed serving process left and no serving process claims
again: their tally of unsettled calls (unsettled.py) is counted by the recorder process.

The next serving process to claim a directory counts what the killed one left. A directory that
no process claims again (a second worker since removed, a writer name since changed) kept its
count, and exports of the range said complete. The recorder checks every CHECK_SECONDS: a
directory with a tally and no live writer, seen so at two checks in a row (a restarting serving
process claims its directory within one), is claimed here as the next serving process would
claim it: what was left is counted `killed` and written down as a gap record in that directory's
spool, which the recorder then drains like any record. A writer that stops cleanly removes its
tally (handoff.SpoolRecorder.stop), so only a directory whose writer died holds one.
"""
from __future__ import annotations

import logging
import threading
from pathlib import Path

from .dropcount import DropCounter
from .spool import SpoolSettings, writer_alive
from .spool_writer import SpoolWriter
from .unsettled import FILE_NAME, Unsettled

log = logging.getLogger(__name__)

CHECK_SECONDS = 30.0


def abandoned(root: Path) -> set[str]:
    """The writer directories holding a tally whose writer is gone."""
    if not root.is_dir():
        return set()
    return {d.name for d in root.iterdir() if d.is_dir() and (d / FILE_NAME).exists() and not writer_alive(d)}


def count_left(settings: SpoolSettings, name: str) -> None:
    """Claim `name` as the next serving process would, count what its last writer left, let go.

    Only what that claim does, without a serving process's hand-off (handoff.SpoolRecorder),
    which would also make itself the source of this process's /metrics."""
    writer = SpoolWriter(settings, name)  # claims it (or, were it claimed meanwhile, a free one: nothing left there)
    try:
        tally = Unsettled(writer.directory, slots=1)  # holds no call of this process: only the drops
        drops = DropCounter()
        drops.attach(tally)
        for left in tally.left_behind(writer.resumed):
            log.warning("recorder: %d calls (%s) answered by the last process of spool directory %s never "
                        "reached the spool; counted as dropped", left.calls, left.reason, writer.name)
            drops.add(left.reason, left.calls, left.first_at, left.last_at)
        tally.take_place()  # only now: a kill before leaves the last tally, counted at the next check
        if drops.write_gap(writer, now_please=True):
            tally.remove()  # written down: nothing left for a next claim to count
            log.info("recorder: spool directory %s, left by a serving process that is gone, counted", writer.name)
        else:  # the spool refused it: the tally keeps the count, and the next check tries again
            tally.close()
    finally:
        writer.close()


class Reclaimer:
    """Checks the spool every `every` seconds in a thread of its own, until `stop` is set."""

    def __init__(self, settings: SpoolSettings, stop: threading.Event, every: float = CHECK_SECONDS) -> None:
        self.settings, self.stop, self.every = settings, stop, every
        self._seen: set[str] = set()  # gone at the last check
        self._thread = threading.Thread(target=self._run, name="extproxy-abandoned-spool", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def check(self) -> list[str]:
        """One check: the directories counted now (gone at this check and the last one)."""
        gone = abandoned(self.settings.root)
        due, self._seen = sorted(gone & self._seen), gone - self._seen
        for name in due:
            count_left(self.settings, name)
        return due

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            try:
                self.check()
            except Exception:  # noqa: BLE001 - the drain goes on; the next check tries again
                log.exception("recorder: checking the spool for directories of killed processes failed")
