"""Recording end to end with the real two processes: the serving process (uvicorn) and the
recorder process (`manage.py recorder`), under load and through faults. Counts are asserted:
every call answered is in the database or in a drop counter with its reason.

PostgreSQL faults use a throwaway cluster the test owns (tests/processes.py), never the shared
server.
"""
from __future__ import annotations

import json
import signal
import time

import pytest
import requests

from tests.conftest import fixture_bytes
from tests.processes import Installation, Load, Postgres, stored_calls, terminate
from tests.test_recorder import UNDECODABLE

pytestmark = pytest.mark.timeout(600)

GRACE_PERIOD = 30  # the Deployment's terminationGracePeriodSeconds
OUTAGE_SECONDS = 30  # how long the database is down in the outage test (issue 8's figure)


def names_body(n: int = 100) -> bytes:
    args = json.loads(fixture_bytes("filter-request.nodecache-true.json"))
    args["NodeNames"] = [f"node-{i:03d}" for i in range(n)]
    return json.dumps(args).encode()


def config(backend_url: str, **recording) -> str:
    text = (f"backends:\n- name: gpu\n  urlPrefix: {backend_url}/scheduler\n  filterVerb: filter\n"
            "  nodeCacheCapable: true\n")
    if recording:
        text += "recording:\n" + "".join(f"  {k}: {v}\n" for k, v in recording.items())
    return text


@pytest.fixture
def install(tmp_path, backend_server):
    """An installation (migrated) whose backend passes every node; closes its processes after."""
    from tests.conftest import pass_all

    backend = backend_server({"filter": pass_all})
    made: list[Installation] = []

    def make(database_url: str | None = None, recording: dict | None = None, **env: str) -> Installation:
        inst = Installation(tmp_path / f"i{len(made)}", config(backend.url, **(recording or {})), database_url, **env)
        made.append(inst)
        inst.manage("migrate", "--noinput", "-v", "0")
        return inst

    yield make
    for inst in made:
        inst.close()


@pytest.fixture
def postgres():
    cluster = Postgres()
    yield cluster
    cluster.close()


def dropped(inst: Installation) -> dict[str, float]:
    prefix = 'extproxy_recorder_dropped_total{reason="'
    return {k[len(prefix):-2]: v for k, v in inst.metrics().items() if k.startswith(prefix) and v}


def test_it_records_every_call_answered_under_load(install):
    inst = install()
    inst.start_recorder("--nice", "5")
    inst.start_serving()
    load = Load(f"{inst.url}/extender/gpu/filter", names_body(), concurrency=8).run(3000)
    inst.wait_drained()
    assert load.failed == 0
    assert dropped(inst) == {}
    assert stored_calls(inst) == (load.answered, load.answered)
    metrics = inst.metrics()
    assert metrics["extproxy_spool_depth"] == 0 and metrics['extproxy_calls_total{backend="gpu",outcome="ok",verb="filter"}'] == load.answered


def test_it_counts_what_the_full_spool_refused_and_keeps_serving(install):
    # No recorder yet and a spool of ~60 calls: the rest is refused, counted, and still answered.
    inst = install(EXTPROXY_SPOOL_MAX_BYTES=str(60 * 6000))
    inst.start_serving()
    load = Load(f"{inst.url}/extender/gpu/filter", names_body(), concurrency=4).run(400)
    assert load.failed == 0
    inst.wait_spooled()
    refused = dropped(inst)
    assert set(refused) == {"spool-full"} and refused["spool-full"] > 0
    assert inst.metrics()["extproxy_spool_full"] == 1
    inst.start_recorder()
    inst.wait_drained()
    rows, distinct = stored_calls(inst)
    assert rows == distinct and rows + refused["spool-full"] == load.answered


def test_it_counts_what_a_killed_serving_process_had_not_spooled(install):
    """SIGKILL of the serving process under load: the calls it answered and had not spooled (put
    aside, in the hand-off, being written) are counted by the next serving process of the same
    spool directory as dropped `killed`, and kept as a gap. Every call answered is stored or
    counted. Counted one too many at most for each call in flight at the kill: tallied when its
    answer was ready, killed before the client read it."""
    concurrency = 8
    inst = install()
    inst.start_recorder()
    inst.start_serving()
    load = Load(f"{inst.url}/extender/gpu/filter", names_body(), concurrency=concurrency).start()
    load.wait_answered(1500)
    inst.serving.signal(signal.SIGKILL)
    inst.serving.wait(10)
    inst.start_serving()  # same spool directory: it appends after what the killed one left
    load.wait_answered(load.answered + 1000)
    answered = load.stop()
    inst.wait_drained()
    rows, distinct = stored_calls(inst)
    assert rows == distinct
    drops = dropped(inst)  # the new process's counters
    assert set(drops) <= {"killed"}
    assert 0 <= rows + drops.get("killed", 0) - answered <= concurrency
    from tests.processes import recording_gaps

    assert recording_gaps(inst) == ({"killed": drops["killed"]} if drops else {})
    # An auditor's export of the whole range says what is missing, and that it is not complete.
    out = inst.workdir / "calls.ndjson"
    inst.manage("export", "-o", str(out), "--no-progress")
    manifest = json.loads(out.with_name("calls.ndjson.manifest.json").read_text())
    assert manifest["calls"] == rows
    assert {g["reason"]: g["calls"] for g in manifest["gaps"]} == recording_gaps(inst)
    assert manifest["complete"] is not drops


def test_a_clean_stop_leaves_nothing_for_the_next_process_to_count(install):
    """SIGTERM settles every call it tallied, in both forms: the next process finds nothing
    left (a call counted `killed` here would be a call stored and counted lost)."""
    inst = install()
    inst.start_recorder()
    inst.start_serving()
    answered = Load(f"{inst.url}/extender/gpu/filter", names_body(), concurrency=8).run(600).answered
    answered += Load(f"{inst.url}/extender/filter", names_body(), concurrency=8).run(300).answered
    assert terminate(inst.serving, GRACE_PERIOD) is not None
    inst.start_serving()
    answered += Load(f"{inst.url}/extender/gpu/filter", names_body(), concurrency=2).run(10).answered
    inst.wait_drained()
    from tests.processes import recording_gaps

    assert dropped(inst) == {} and recording_gaps(inst) == {}
    assert stored_calls(inst) == (answered, answered)


def test_it_loses_nothing_when_the_recorder_is_killed(install):
    inst = install()
    inst.start_recorder()
    inst.start_serving()
    load = Load(f"{inst.url}/extender/gpu/filter", names_body(), concurrency=8).start()
    load.wait_answered(1000)
    inst.recorder.signal(signal.SIGKILL)
    inst.recorder.wait(10)
    load.wait_answered(load.answered + 1000)  # answered meanwhile: into the spool only
    inst.start_recorder()
    load.wait_answered(load.answered + 500)
    answered = load.stop()
    inst.wait_drained()
    assert dropped(inst) == {}
    assert stored_calls(inst) == (answered, answered)


def test_it_loses_nothing_through_a_30_second_postgresql_outage(install, postgres):
    inst = install(postgres.url)
    inst.start_recorder()
    inst.start_serving()
    load = Load(f"{inst.url}/extender/gpu/filter", names_body(), concurrency=8).start()
    load.wait_answered(1000)
    postgres.stop()
    before = load.answered
    time.sleep(OUTAGE_SECONDS)  # the outage, under the closed-loop load as fast as it is served
    during = load.answered - before
    # Served meanwhile and waiting in the spool (less the last ~10 ms, which may be in the hand-off still).
    assert during > 1000 and inst.spool_status().depth > during // 2
    postgres.start()
    load.wait_answered(load.answered + 500)
    answered = load.stop()
    inst.wait_drained(timeout=300)  # tens of thousands of calls held back
    assert load.failed == 0 and dropped(inst) == {}
    assert stored_calls(inst) == (answered, answered)  # all drained, none twice
    assert inst.metrics()["extproxy_recorder_write_errors_total"] > 0  # the outage was seen


def test_it_keeps_calls_in_the_spool_through_sigterm_with_the_database_down(install, postgres):
    inst = install(postgres.url)
    inst.start_recorder()
    inst.start_serving()
    postgres.stop()
    answered = Load(f"{inst.url}/extender/gpu/filter", names_body(), concurrency=8).run(1000).answered
    assert terminate(inst.serving, GRACE_PERIOD) is not None
    assert terminate(inst.recorder, GRACE_PERIOD) is not None  # gives up draining within the grace period
    assert inst.spool_status().depth == answered  # every call, on disk
    postgres.start()
    inst.start_recorder()
    inst.wait_drained()
    assert stored_calls(inst) == (answered, answered)


def test_it_records_undecodable_requests_raw_and_counts_them(install):
    inst = install()
    inst.start_recorder()
    inst.start_serving()
    for case in sorted(UNDECODABLE):
        response = requests.post(f"{inst.url}/extender/gpu/filter", data=UNDECODABLE[case](), timeout=10)
        assert response.status_code in (200, 500)  # answered, whatever the backend made of it
    inst.wait_drained()
    assert stored_calls(inst) == (len(UNDECODABLE), len(UNDECODABLE))
    assert inst.metrics()["extproxy_recorder_raw_total"] == len(UNDECODABLE)
    import sqlite3

    with sqlite3.connect(inst.env["EXTPROXY_SQLITE_PATH"]) as conn:
        findings = [json.loads(f)[0] for (f,) in conn.execute("SELECT findings FROM extproxy_call")]
        empty_pods = conn.execute("SELECT count(*) FROM extproxy_call WHERE pod_name = '' AND outcome = 'error'").fetchone()[0]
    assert {f["kind"] for f in findings} == {"undecodable-request"} and all(f["detail"] for f in findings)
    assert empty_pods == len(UNDECODABLE)


def readyz(inst: Installation) -> dict:
    """/readyz, which must answer 200 whatever the database does: it puts the pod in the Service
    kube-scheduler calls."""
    response = requests.get(f"{inst.url}/readyz", timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def wait_database(inst: Installation, ok: bool, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while (ready := readyz(inst))["recording"]["database"]["ok"] is not ok:
        assert time.monotonic() < deadline, ready
        time.sleep(0.2)
    return ready


def test_it_stays_ready_through_a_postgresql_outage_and_says_the_database_fails(install, postgres):
    inst = install(postgres.url)
    inst.start_recorder()
    inst.start_serving()
    wait_database(inst, ok=True)  # the recorder reached it when it started
    postgres.stop()
    # No call comes meanwhile: the idle recorder's heartbeat finds the outage.
    down = wait_database(inst, ok=False)
    assert down["ready"] is True and down["recording"]["database"]["error"]
    assert down["recording"]["database"]["failing_since"] <= time.time()
    metrics = inst.metrics()
    assert metrics["extproxy_recorder_database_up"] == 0 and metrics["extproxy_recorder_database_failing_seconds"] > 0
    load = Load(f"{inst.url}/extender/gpu/filter", names_body(), concurrency=4).run(300)
    answered = load.answered
    assert answered >= 300 and load.failed == 0  # served meanwhile, into the spool
    assert readyz(inst)["recording"]["database"]["ok"] is False  # the batch's failed write says so too
    postgres.start()
    wait_database(inst, ok=True)
    inst.wait_drained()
    assert stored_calls(inst) == (answered, answered)
    metrics = inst.metrics()
    assert metrics["extproxy_recorder_database_up"] == 1 and metrics["extproxy_recorder_database_failing_seconds"] == 0
