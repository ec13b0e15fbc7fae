"""The tally of calls answered and not yet settled in the spool (recording/unsettled.py): what
the next writer of a directory counts after its last writer was killed.

The ordering cases are tested on the file as a kill would leave it at each step (a second tally
opened on the same directory while the first one stops mid-way: the mapping is shared, so the
second reads exactly what the page cache holds). A real SIGKILL of a process in the middle of
answering is tested below it, and under load with the real serving process in
tests/test_recording_processes.py.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from extproxy.recording.trace import Drops
from extproxy.recording.unsettled import KILLED, Unsettled

STARTS = [1000.0 + i for i in range(10)]


def in_place(directory, slots: int = 64) -> Unsettled:
    """A tally that has become its directory's, as the serving process's does at start."""
    tally = Unsettled(directory, slots)
    tally.take_place()
    return tally


def killed(drops: list[Drops]) -> tuple[int, float, float] | None:
    found = [d for d in drops if d.reason == KILLED]
    assert len(found) <= 1
    return (found[0].calls, found[0].first_at, found[0].last_at) if found else None


def test_calls_answered_and_never_written_are_counted_with_their_start_times(tmp_path):
    tally = in_place(tmp_path)
    slots = [tally.answered(s) for s in STARTS[:5]]
    tally.settle(slots[1])  # its drop was counted: not the tally's any more
    assert killed(Unsettled(tmp_path, 64).left_behind(resumed=0)) == (4, 1000.0, 1004.0)


def test_nothing_is_counted_after_a_clean_write(tmp_path):
    tally = in_place(tmp_path)
    slots = [tally.answered(s) for s in STARTS[:5]]
    tally.writing(slots, first_seq=11)
    tally.written()
    assert Unsettled(tmp_path, 64).left_behind(resumed=15) == []


def test_a_write_under_way_counts_the_records_that_did_not_land(tmp_path):
    tally = in_place(tmp_path)
    slots = [tally.answered(s) for s in STARTS[:5]]
    tally.answered(STARTS[7])  # answered meanwhile: waiting, not in the write
    tally.writing(slots, first_seq=11)
    # Killed during the write: records 11 and 12 landed whole, 13-15 not.
    assert killed(Unsettled(tmp_path, 64).left_behind(resumed=12))[0] == 3 + 1


def test_a_write_announced_and_not_begun_counts_all_its_calls_once(tmp_path):
    tally = in_place(tmp_path)
    slots = [tally.answered(s) for s in STARTS[:5]]
    tally.writing(slots, first_seq=11)
    assert killed(Unsettled(tmp_path, 64).left_behind(resumed=10))[0] == 5


def test_a_kill_while_a_write_is_retired_counts_none_of_it(tmp_path):
    """written() ends the write in the header before it clears the calls one by one: a kill in
    between leaves calls marked with a finished write, which are settled."""
    tally = in_place(tmp_path)
    slots = [tally.answered(s) for s in STARTS[:5]]
    tally.writing(slots, first_seq=11)
    tally._header[4] = 0  # the first store of written(), and no more
    assert Unsettled(tmp_path, 64).left_behind(resumed=15) == []


def test_drops_not_yet_written_down_are_counted_under_their_own_reasons(tmp_path):
    tally = in_place(tmp_path)
    tally.drops_pending({"queue-full": [7, 1000.0, 1003.0]})
    tally.gap_writing([Drops("spool-full", 2, 990.0, 991.0)], seq=21)
    left = Unsettled(tmp_path, 64).left_behind(resumed=20)  # the gap record did not land
    assert left == [Drops("queue-full", 7, 1000.0, 1003.0), Drops("spool-full", 2, 990.0, 991.0)]


def test_a_gap_record_that_landed_is_not_counted_again(tmp_path):
    tally = in_place(tmp_path)
    tally.gap_writing([Drops("spool-full", 2, 990.0, 991.0)], seq=21)
    assert Unsettled(tmp_path, 64).left_behind(resumed=21) == []


def test_it_reads_a_tally_of_another_size_and_starts_a_new_one(tmp_path):
    tally = in_place(tmp_path, 16)
    for s in STARTS[:3]:
        tally.answered(s)
    bigger = Unsettled(tmp_path, 256)  # recording.queueSize changed between the two processes
    assert killed(bigger.left_behind(resumed=0))[0] == 3
    assert bigger.left_behind(resumed=0) == []  # read once
    bigger.take_place()
    assert Unsettled(tmp_path, 256).left_behind(resumed=0) == []  # the new tally is empty


def test_a_process_killed_while_it_takes_over_leaves_the_count_in_place(tmp_path):
    """Until the new tally holds what the last one left, the last one stays the directory's:
    a process killed before that point is followed by one that counts the same calls."""
    tally = in_place(tmp_path)
    for s in STARTS[:3]:
        tally.answered(s)
    Unsettled(tmp_path, 64).left_behind(resumed=0)  # read, and killed before take_place
    assert killed(Unsettled(tmp_path, 64).left_behind(resumed=0))[0] == 3


def test_what_a_sigkilled_process_answered_is_counted_by_the_next_one(tmp_path):
    """A real SIGKILL: the process answers 30 calls and hands 20 of them to the spool; the next
    SpoolRecorder of the same spool directory counts the other 10 as dropped (killed), writes
    them down as a gap record, and the records of the 20 are in the spool."""
    killed_serving_process(tmp_path / "spool", "serve", answered=30, spooled=20, first=2000.0)

    from extproxy.config import RecordingConfig
    from extproxy.recording import SpoolRecorder
    from extproxy.recording.spool import SpoolSettings
    from extproxy.recording.spool_reader import SpoolReader
    from extproxy.recording.trace import Trace, decode_record

    settings = SpoolSettings(root=tmp_path / "spool")
    recorder = SpoolRecorder(RecordingConfig(), settings)
    recorder.start()
    try:
        assert recorder.drops.counts == {KILLED: 10}
    finally:
        assert recorder.stop()
    records = [decode_record(e.payload) for e in SpoolReader(settings.root).read(1000, 1 << 30).entries]
    calls = [r for r in records if isinstance(r, Trace)]
    gaps = [d for r in records if isinstance(r, list) for d in r]
    assert len(calls) == 20
    assert gaps == [Drops(KILLED, 10, 2020.0, 2029.0)]


def killed_serving_process(root: Path, name: str, answered: int, spooled: int, first: float = 3000.0) -> None:
    """A real process that writes into spool directory `name`, answers `answered` calls (started
    at `first`, `first` + 1, ...), hands the first `spooled` to the spool, and is SIGKILLed."""
    script = textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        import django
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "extproxy.settings")
        django.setup()
        from extproxy.config import RecordingConfig
        from extproxy.recording import SpoolRecorder
        from extproxy.recording.spool import SpoolSettings
        from tests.test_recorder import make_trace

        recorder = SpoolRecorder(RecordingConfig(), SpoolSettings(root=Path({str(root)!r})), writer_name={name!r})
        recorder.start()
        for i in range({answered}):
            slot = recorder.answered({first} + i)
            if i < {spooled}:
                trace = make_trace()
                trace.started_at, trace.tally_slot = {first} + i, slot
                recorder.submit(trace)
        assert recorder.flush(10)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=os.getcwd(), capture_output=True, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]
