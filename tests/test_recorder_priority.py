"""The recorder process runs under SCHED_IDLE by default (every thread of it), and the setting
or `--no-sched-idle` turns that off, leaving its niceness; the shadow process runs under
SCHED_IDLE at its niceness. Real `manage.py recorder` and `manage.py shadow` processes; the
policy is read from the kernel for each of their threads.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from tests.processes import Installation, Process

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is a Linux policy"),
]

CONFIG = "backends:\n- name: gpu\n  urlPrefix: http://127.0.0.1:9/scheduler\n  filterVerb: filter\n"
# main, parent watch, latency roll-up, heap trimmer, the check for spool directories of killed
# serving processes (recording/abandoned.py); with the Redis channel layer, also the loop that
# publishes live events straight to it (recording/live.py: LayerPublisher)
THREADS = 6 if os.environ.get("EXTPROXY_REDIS_URL") else 5


def draining(inst: Installation) -> tuple[int, list[int]]:
    """The recorder's pid and thread ids, once it logged that it drains (all its threads started)."""
    assert inst.recorder is not None
    deadline = time.monotonic() + 60
    while "recorder: draining" not in inst.recorder.output():
        assert inst.recorder.process.poll() is None, inst.recorder.output()
        assert time.monotonic() < deadline, inst.recorder.output()
        time.sleep(0.05)
    pid = inst.recorder.process.pid
    return pid, sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))


def niceness(tid: int) -> int:
    return int(Path(f"/proc/{tid}/stat").read_text().rsplit(")", 1)[1].split()[16])


@pytest.fixture
def installation(tmp_path):
    made: list[Installation] = []

    def make(**env: str) -> Installation:
        inst = Installation(tmp_path / f"i{len(made)}", CONFIG, **env)
        made.append(inst)
        inst.manage("migrate", "--noinput", "-v", "0")
        return inst

    yield make
    for inst in made:
        inst.close()


def test_the_recorder_runs_under_sched_idle_by_default(installation):
    inst = installation()
    inst.start_recorder("--exit-with-parent")  # a second thread: it watches the parent process
    pid, threads = draining(inst)
    assert len(threads) == THREADS  # the policy reaches threads started after it
    assert {os.sched_getscheduler(tid) for tid in threads} == {os.SCHED_IDLE}
    assert "SCHED_IDLE" in inst.recorder.output()


@pytest.mark.parametrize("how", ["setting", "option"])
def test_sched_idle_can_be_turned_off_and_the_niceness_stays(installation, how):
    inst = installation(EXTPROXY_RECORDER_SCHED_IDLE="0") if how == "setting" else installation()
    inst.start_recorder("--nice", "7", "--exit-with-parent", *(["--no-sched-idle"] if how == "option" else []))
    pid, threads = draining(inst)
    assert len(threads) == THREADS
    assert {os.sched_getscheduler(tid) for tid in threads} == {os.SCHED_OTHER}
    assert {niceness(tid) for tid in threads} == {os.getpriority(os.PRIO_PROCESS, 0) + 7}


def test_the_shadow_process_runs_under_sched_idle_with_its_niceness(installation):
    inst = installation()
    shadow = Process("shadow", [sys.executable, "manage.py", "shadow", "--nice", "5", "--exit-with-parent"],
                     inst.env, inst.workdir / "logs")
    try:
        deadline = time.monotonic() + 60
        while "shadow: no shadow backend configured" not in shadow.output():  # idles, its threads started
            assert shadow.process.poll() is None, shadow.output()
            assert time.monotonic() < deadline, shadow.output()
            time.sleep(0.05)
        threads = [int(t) for t in os.listdir(f"/proc/{shadow.process.pid}/task")]
        assert len(threads) == 3  # the parent watch and the heap trimmer, started after the policy was set
        assert {os.sched_getscheduler(tid) for tid in threads} == {os.SCHED_IDLE}
        assert {niceness(tid) for tid in threads} == {os.getpriority(os.PRIO_PROCESS, 0) + 5}
    finally:
        shadow.stop()
