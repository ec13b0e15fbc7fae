"""Replay runs outlive the process that held them: after the serving process is killed, a new
one marks the run that was running failed (with how far it got) and carries out the one that was
waiting, with the real serving and recorder processes and a real backend on loopback."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
import requests

from tests.conftest import fixture_bytes, pass_all
from tests.processes import ROOT, Installation, Postgres
from tests.test_replay import NAMES

pytestmark = pytest.mark.timeout(300)


def wait_run(session: requests.Session, inst: Installation, run: int, what, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = session.get(f"{inst.url}/api/replays/{run}/", timeout=10).json()
        except requests.ConnectionError:
            got = {}
        if got and what(got):
            return got
        assert time.monotonic() < deadline, f"run {run}: {got}\n{inst.serving.output() if inst.serving else ''}"
        time.sleep(0.1)


@pytest.fixture
def postgres():
    """A throwaway PostgreSQL server this test may stop (never the shared one)."""
    cluster = Postgres()
    yield cluster
    cluster.close()


def installation_with_admin(tmp_path, backend_url: str, database_url: str | None = None,
                            **env: str) -> tuple[Installation, requests.Session]:
    """A migrated, bootstrapped installation calling `backend_url`, and a session with the admin's token."""
    inst = Installation(tmp_path, f"backends:\n- name: gpu\n  urlPrefix: {backend_url}/scheduler\n  filterVerb: filter\n"
                                  "  nodeCacheCapable: true\n", database_url, **env)
    inst.manage("migrate", "--noinput", "-v", "0")
    inst.manage("bootstrap")
    token = subprocess.run([sys.executable, "manage.py", "token", "admin"], cwd=ROOT, env=inst.env, check=True,
                           capture_output=True, text=True).stdout.strip().split()[-1]
    session = requests.Session()
    session.headers["Authorization"] = f"Token {token}"
    return inst, session


def test_a_dead_processs_running_run_is_failed_and_its_waiting_run_taken_up(tmp_path, backend_server):
    backend = backend_server({"filter": pass_all})
    inst, session = installation_with_admin(tmp_path, backend.url, EXTPROXY_REPLAY_STALE_SECONDS="2")
    try:
        inst.start_recorder("--nice", "0")
        inst.start_serving()
        for _ in range(4):
            assert requests.post(f"{inst.url}/extender/gpu/filter", data=fixture_bytes(NAMES), timeout=10).status_code == 200
        inst.wait_drained()
        every = {"filters": {"backend": "gpu", "verb": "filter"}}
        running = session.post(f"{inst.url}/api/replays/", json={**every, "rate": 0.2}, timeout=10).json()["id"]
        waiting = session.post(f"{inst.url}/api/replays/", json={**every, "rate": 100}, timeout=10).json()["id"]
        wait_run(session, inst, running, lambda r: r["status"] == "running" and r["done"] >= 1)
        assert wait_run(session, inst, waiting, lambda r: True)["status"] == "queued"

        inst.serving.signal(signal.SIGKILL)  # the runs' process ends without a word
        inst.serving.wait(10)
        inst.start_serving()

        failed = wait_run(session, inst, running, lambda r: r["status"] != "running")
        done = wait_run(session, inst, waiting, lambda r: r["status"] not in ("queued", "running"))
    finally:
        inst.close()

    assert failed["status"] == "failed" and "stopped after" in failed["error"] and "of 4 calls" in failed["error"]
    assert 1 <= failed["done"] < 4
    assert (done["status"], done["total"], done["done"], done["errors"]) == ("done", 4, 4, 0)


def test_background_threads_say_once_that_the_database_is_down_then_work_again(tmp_path, backend_server, postgres):
    """A database outage is one warning line from each of the replay watcher (serving process)
    and the latency roll-up (recorder process), no traceback every beat; afterwards they work
    again (a replay run is carried out)."""
    backend = backend_server({"filter": pass_all})
    # The watcher waits for a pooled connection up to the pool's timeout: shorter than the outage.
    inst, session = installation_with_admin(tmp_path, backend.url, postgres.url, EXTPROXY_REPLAY_STALE_SECONDS="1",
                                            EXTPROXY_DB_POOL_TIMEOUT="1")
    try:
        inst.start_recorder("--nice", "0")
        inst.start_serving()
        time.sleep(1)
        postgres.stop()
        time.sleep(3)  # about twelve beats of 0.25 s, and three roll-up ticks, with the database down
        outage_log, recorder_log = inst.serving.output(), inst.recorder.output()
        postgres.start()
        assert requests.post(f"{inst.url}/extender/gpu/filter", data=fixture_bytes(NAMES), timeout=10).status_code == 200
        inst.wait_drained()
        run = session.post(f"{inst.url}/api/replays/", json={"filters": {"backend": "gpu"}}, timeout=10).json()["id"]
        done = wait_run(session, inst, run, lambda r: r["status"] not in ("queued", "running"))
    finally:
        inst.close()

    assert outage_log.count("replay: heartbeat or recovery failed, database unavailable") == 1, outage_log
    assert "Traceback" not in outage_log, outage_log
    assert recorder_log.count("latency roll-up failed, database unavailable") == 1, recorder_log  # it runs there
    assert "Traceback" not in recorder_log, recorder_log
    assert (done["status"], done["total"], done["errors"]) == ("done", 1, 0)
