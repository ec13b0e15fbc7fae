"""Two replicas, one database, each with its own spool (deploy/ runs two pods, each with an emptyDir).

An export served by one replica saw only its own spool: while the other replica's recorder was
stopped with calls in its spool, the manifest said `complete: true` for a range that held more
calls once that recorder was back. Each recorder now reports its spool's stored-up-to point to
the database (extproxy/spool_reports.py); every export takes every replica's. Counted, not timed.
"""
from __future__ import annotations

import subprocess
import sys
import time
from datetime import datetime, timezone as tz
from pathlib import Path

import pytest
import requests

from tests.conftest import fixture_bytes, pass_all
from tests.processes import ROOT, Installation, _query, stored_calls, terminate
from tests.test_export_inflight import api_export, cli_export
from tests.test_export_real_traffic import send, token_of

pytestmark = pytest.mark.timeout(300)

# A short bound on a call's way to the spool (httpTimeout 1 s, EXTPROXY_BODY_TIMEOUT 1 s, the
# proxy's margin and ticks: about 3.1 s), so that a range can be past it within the test.
BOUND = 3.5


def config(backend_url: str) -> str:
    return (f"backends:\n- name: gpu\n  urlPrefix: {backend_url}/scheduler\n  filterVerb: filter\n"
            "  nodeCacheCapable: false\n  httpTimeout: 1s\n")


@pytest.fixture
def replicas(tmp_path, backend_server, installation_database):
    """Replicas A and B on one database: each its own serving process, recorder and spool."""
    backend = backend_server({"filter": pass_all})
    a = Installation(tmp_path / "a", config(backend.url), installation_database, EXTPROXY_BODY_TIMEOUT="1")
    b = Installation(tmp_path / "b", config(backend.url), installation_database, EXTPROXY_BODY_TIMEOUT="1")
    if installation_database is None:  # SQLite: B writes A's file
        b.env["EXTPROXY_SQLITE_PATH"] = a.env["EXTPROXY_SQLITE_PATH"]
    try:
        a.manage("migrate", "--noinput", "-v", "0")
        for replica in (a, b):
            replica.start_recorder()
            replica.start_serving()
        yield a, b
    finally:
        a.close()
        b.close()


def post(inst: Installation, calls: int) -> None:
    """Calls answered by `inst`, not waited for into the database."""
    body = fixture_bytes("filter-request.nodecache-false.json")
    for _ in range(calls):
        assert requests.post(f"{inst.url}/extender/gpu/filter", data=body, timeout=10).status_code == 200
    inst.wait_spooled()


def parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def past_the_bound(when: datetime) -> None:
    time.sleep(max(0.0, (when - datetime.now(tz.utc)).total_seconds() + BOUND))


def replica_named(inst: Installation) -> str:
    """The replica as spool_reports names it, read from what `forget_replica` lists."""
    listed = forget_replica(inst)
    spool = str(Path(inst.env["EXTPROXY_SPOOL_DIR"]).resolve())
    names = [line.split("\t")[0] for line in listed.stdout.splitlines() if line.split("\t")[0].endswith(":" + spool)]
    assert len(names) == 1, listed.stdout
    return names[0]


def forget_replica(inst: Installation, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", "forget_replica", *args], cwd=ROOT, env=inst.env,
                          capture_output=True, text=True)


def test_a_range_another_replica_has_not_stored_is_open_until_it_has(replicas, tmp_path):
    a, b = replicas
    since = datetime.now(tz.utc)
    send(a, 2)
    send(b, 2)
    assert b.recorder is not None
    b.recorder.stop()  # SIGKILL: its last report stays as it was
    post(b, 3)  # answered by B, waiting in B's spool
    until = datetime.now(tz.utc)
    past_the_bound(until)  # no call of the range can still be in flight on either replica
    assert stored_calls(a)[1] == 4

    first = cli_export(a, tmp_path / "first.ndjson", "--since", since.isoformat(), "--until", until.isoformat())
    assert first["calls"] == 4
    assert first["complete"] is False, first  # was true: A's spool was empty, B's was never looked at
    reason = first["still_open"]["reason"]
    assert replica_named(b) in reason and "stored up to" in reason, reason
    assert first["still_open"]["stored_up_to"] is not None
    assert parse(first["still_open"]["stored_up_to"]) < until
    # Served by replica A's API, the same.
    records, served = api_export(a, token_of(a, "auditor"), since=since.isoformat(), until=until.isoformat())
    assert len({r["call"] for r in records}) == 4 and served["complete"] is False, served

    b.start_recorder()  # B's recorder back: drains its spool and reports
    b.wait_drained()
    deadline = time.monotonic() + 30
    while True:
        again = cli_export(a, tmp_path / "again.ndjson", "--since", since.isoformat(), "--until", until.isoformat())
        if again["complete"] or time.monotonic() > deadline:
            break
        time.sleep(0.5)  # its first report after the drain: within a second of it
    assert again["calls"] == 7 and again["complete"] is True and again["still_open"] is None, again
    checked = subprocess.run([sys.executable, "manage.py", "verify_export", str(tmp_path / "again.ndjson")],
                             cwd=ROOT, env=a.env, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_replica_stopped_cleanly_holds_nothing_open_and_one_gone_is_forgotten_with_its_calls_counted(
        replicas, tmp_path):
    from extproxy.recording.observe import spool_status

    a, b = replicas
    since = datetime.now(tz.utc)
    send(b, 1)
    assert b.serving is not None and b.recorder is not None
    assert terminate(b.serving, 30) is not None and terminate(b.recorder, 30) is not None  # a rolling update's stop
    listed = forget_replica(a)
    assert listed.returncode == 0 and "\tended" in listed.stdout, listed.stdout
    until = datetime.now(tz.utc)
    past_the_bound(until)
    clean = cli_export(a, tmp_path / "clean.ndjson", "--since", since.isoformat(), "--until", until.isoformat())
    assert clean["calls"] == 1 and clean["complete"] is True, clean

    # B again, then gone for good with 2 calls in its spool (its pod deleted, its emptyDir with it).
    b.start_recorder()
    b.start_serving()
    post(b, 1)
    b.wait_drained()
    time.sleep(1.2)  # its report after that batch, then none more often than every second
    assert b.recorder is not None and b.serving is not None
    b.recorder.stop()
    posted_at = datetime.now(tz.utc)
    post(b, 2)
    assert spool_status(Path(b.env["EXTPROXY_SPOOL_DIR"])).depth == 2
    b.serving.stop()
    name = replica_named(b)
    until = datetime.now(tz.utc)
    past_the_bound(until)
    held = cli_export(a, tmp_path / "held.ndjson", "--since", since.isoformat(), "--until", until.isoformat())
    assert held["calls"] == 2 and held["complete"] is False and name in held["still_open"]["reason"], held

    assert forget_replica(a, "no-such-replica").returncode != 0
    reported = [line for line in forget_replica(a).stdout.splitlines() if line.startswith(name + "\t")]
    assert len(reported) == 1 and "0 calls in its spool" in reported[0], reported  # its last report: before them
    forgot = forget_replica(a, name)
    assert forgot.returncode == 0 and "may be lost" in forgot.stdout, forgot.stdout + forgot.stderr
    after = cli_export(a, tmp_path / "after.ndjson", "--since", since.isoformat(), "--until", until.isoformat())
    # No longer held open by B, and not called complete: the span B's calls may be missing from
    # is a gap of the range, counting what B's spool held when it last reported (at least that many).
    assert after["still_open"] is None, after
    assert after["complete"] is False and after["calls"] == 2
    assert [(g["reason"], g["calls"]) for g in after["gaps"]] == [("replica-forgotten", 0)], after["gaps"]
    gap = after["gaps"][0]
    assert parse(gap["first_at"]) < posted_at and parse(gap["last_at"]) > until, gap
    assert name not in forget_replica(a).stdout
    events = _query(a, "SELECT actor, target FROM extproxy_auditevent WHERE action = 'replica-forgotten'")
    assert [target for _, target in events] == [name] and events[0][0].startswith("cli"), events
