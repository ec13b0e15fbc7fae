"""What a killed serving process left in a spool directory that no serving process claims again
(a second worker since removed, a writer name since changed) is counted by the recorder: before,
only the next serving process of that directory counted it, so those calls were in no count and
exports of their range said complete. Real processes killed for real; the spool on disk."""
from __future__ import annotations

import threading

from extproxy.config import RecordingConfig
from extproxy.recording import SpoolRecorder
from extproxy.recording.abandoned import Reclaimer
from extproxy.recording.spool import SpoolSettings, segment_name, segments
from extproxy.recording.spool_reader import SpoolReader
from extproxy.recording.trace import Drops, Trace, decode_record
from extproxy.recording.unsettled import FILE_NAME, KILLED
from tests.test_unsettled import killed_serving_process
from tests.test_recording_processes import install  # noqa: F401 - the fixture


def spooled(settings: SpoolSettings) -> tuple[int, list[Drops]]:
    records = [decode_record(e.payload) for e in SpoolReader(settings.root).read(1000, 1 << 30).entries]
    return sum(isinstance(r, Trace) for r in records), [d for r in records if isinstance(r, list) for d in r]


def test_the_recorder_counts_what_a_killed_process_left_where_no_process_comes_back(tmp_path):
    settings = SpoolSettings(root=tmp_path / "spool")
    killed_serving_process(settings.root, "serve-2", answered=25, spooled=15)
    live = SpoolRecorder(RecordingConfig(), settings, writer_name="serve")  # the worker that stays
    live.start()
    try:
        reclaimer = Reclaimer(settings, threading.Event())
        assert reclaimer.check() == []  # seen gone once: a restarting process may be about to claim it
        assert reclaimer.check() == ["serve-2"]  # gone at two checks in a row: counted
        # ...and its last segment ended (an empty one after it), so that once stored it is retired.
        last = segments(settings.root / "serve-2")[-1]
        assert (settings.root / "serve-2" / segment_name(last)).stat().st_size == 0
        assert reclaimer.check() == []  # and once only
        assert not (settings.root / "serve-2" / FILE_NAME).exists()
        assert (settings.root / "serve" / FILE_NAME).exists()  # a live writer's tally is left alone
    finally:
        assert live.stop()
    calls, gaps = spooled(settings)
    assert calls == 15
    assert gaps == [Drops(KILLED, 10, 3015.0, 3024.0)]


def test_a_directory_claimed_again_between_two_checks_is_counted_by_its_new_writer_only(tmp_path):
    settings = SpoolSettings(root=tmp_path / "spool")
    killed_serving_process(settings.root, "serve", answered=12, spooled=4)
    reclaimer = Reclaimer(settings, threading.Event())
    assert reclaimer.check() == []
    restarted = SpoolRecorder(RecordingConfig(), settings, writer_name="serve")  # the container restarts
    restarted.start()
    try:
        assert restarted.drops.counts == {KILLED: 8}
        assert reclaimer.check() == []
    finally:
        assert restarted.stop()
    assert not (settings.root / "serve" / FILE_NAME).exists()  # stopped cleanly: no tally left
    assert reclaimer.check() == [] and reclaimer.check() == []  # nothing to count
    assert spooled(settings) == (4, [Drops(KILLED, 8, 3004.0, 3011.0)])


def test_the_recorder_process_writes_the_count_down_with_no_serving_process_running(install):
    """The real recorder process, the installation's own database: the gap row appears."""
    import time

    from tests.processes import recording_gaps, stored_calls

    inst = install(EXTPROXY_SPOOL_ABANDONED_SECONDS="0.3")
    killed_serving_process(inst.spool, "worker-b", answered=9, spooled=2)
    inst.start_recorder()
    deadline = time.monotonic() + 60
    while recording_gaps(inst).get(KILLED, 0) == 0:
        assert time.monotonic() < deadline, inst.recorder.output()
        time.sleep(0.2)
    assert recording_gaps(inst) == {KILLED: 7}
    inst.wait_drained()
    assert stored_calls(inst)[0] == 2


def test_counting_a_directory_leaves_the_recorder_process_without_a_serving_hand_off(tmp_path):
    """The recorder process counts a directory with the spool writer and the tally alone: a serving
    process's hand-off made for it would become the source of that process's /metrics."""
    from extproxy.recording.handoff import COLLECTOR

    settings = SpoolSettings(root=tmp_path / "spool")
    killed_serving_process(settings.root, "serve", answered=6, spooled=1)
    before = COLLECTOR.source
    reclaimer = Reclaimer(settings, threading.Event())
    assert reclaimer.check() == [] and reclaimer.check() == ["serve"]
    assert COLLECTOR.source is before
    assert spooled(settings) == (1, [Drops(KILLED, 5, 3001.0, 3005.0)])
