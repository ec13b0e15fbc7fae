"""A call in flight as an export starts: it started before the export (so inside a range ending
"now") and is answered after it, by a slow backend. It is in neither the database, nor the
spool, nor any drop count while the export runs; the manifest must not call that range complete,
and must say up to when it is; a later export of the same range, once the call is stored, holds
it and is complete."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone as tz
from pathlib import Path

import pytest
import requests

from tests.conftest import fixture_bytes, pass_all
from tests.processes import ROOT, Installation
from tests.test_export_real_traffic import send, token_of

pytestmark = pytest.mark.timeout(300)

HTTP_TIMEOUT = 8  # seconds: longer than the export takes, so the held call is answered, not timed out
BODY_TIMEOUT = 2  # EXTPROXY_BODY_TIMEOUT: the proxy's own bound on a request arriving


def config(backend_url: str) -> str:
    return (f"backends:\n- name: gpu\n  urlPrefix: {backend_url}/scheduler\n  filterVerb: filter\n"
            f"  nodeCacheCapable: false\n  httpTimeout: {HTTP_TIMEOUT}s\n")


def parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class Hold:
    """A backend behaviour that passes every node; while not released, only once released
    (`waiting` counts the calls held)."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.waiting = threading.Semaphore(0)

    def __call__(self, handler, body: bytes) -> None:
        if not self.released.is_set():
            self.waiting.release()
            self.released.wait(60)
        pass_all(handler, body)


@pytest.fixture
def held(tmp_path, backend_server, installation_database):
    hold = Hold()
    backend = backend_server({"filter": hold})
    inst = Installation(tmp_path / "inst", config(backend.url), installation_database,
                        EXTPROXY_BODY_TIMEOUT=str(BODY_TIMEOUT))
    inst.manage("migrate", "--noinput", "-v", "0")
    inst.start_recorder()
    inst.start_serving()
    yield inst, hold
    hold.released.set()
    inst.close()


def api_export(inst: Installation, token: str, **params: str) -> tuple[list[dict], dict]:
    headers = {"Authorization": "Token " + token}
    answer = requests.get(f"{inst.url}/api/export/", params=dict(params, format="ndjson"), headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text
    manifest = requests.get(f"{inst.url}/api/export/{answer.headers['X-Export-Id']}/manifest/", headers=headers,
                            timeout=30)
    assert manifest.status_code == 200, manifest.text
    return [json.loads(line) for line in answer.content.splitlines()], manifest.json()


def cli_export(inst: Installation, out: Path, *filters: str) -> dict:
    done = subprocess.run([sys.executable, "manage.py", "export", "--format", "ndjson", "-o", str(out),
                           "--no-progress", *filters], cwd=ROOT, env=inst.env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(Path(f"{out}.manifest.json").read_text())


def test_a_call_in_flight_as_the_export_starts_leaves_the_range_open_until_it_lands(held, tmp_path):
    inst, hold = held
    token = token_of(inst, "auditor")
    since = datetime.now(tz.utc)
    hold.released.set()
    send(inst, 2)  # answered at once and stored
    hold.released.clear()
    body = fixture_bytes("filter-request.nodecache-false.json")
    answers: list[int] = []
    caller = threading.Thread(target=lambda: answers.append(
        requests.post(f"{inst.url}/extender/gpu/filter", data=body, timeout=60).status_code))
    caller.start()
    assert hold.waiting.acquire(timeout=30), "the backend never got the call"
    # The call is with the backend: started, not answered. An export of the range up to now:
    records, first = api_export(inst, token, since=since.isoformat())
    assert first["calls"] == 2 and len({r["call"] for r in records}) == 2
    assert first["complete"] is False, first  # was true: the spool was empty, the call in flight counted nowhere
    assert "in flight" in first["still_open"]["reason"]
    stored_up_to = parse(first["still_open"]["stored_up_to"])
    until = first["range"]["until"]
    assert stored_up_to < parse(until)
    # The whole span in which a call could still be in flight is open: at least the backend's timeout.
    assert (parse(first["exported_at"]) - stored_up_to).total_seconds() >= HTTP_TIMEOUT
    # The same range from the command line, another process: open as well.
    from_cli = cli_export(inst, tmp_path / "held.ndjson", "--since", since.isoformat(), "--until", until)
    assert from_cli["calls"] == 2 and from_cli["complete"] is False and "in flight" in from_cli["still_open"]["reason"]

    hold.released.set()
    caller.join(60)
    assert answers == [200]
    inst.wait_drained()
    # Once no call started in the range can still be in flight, the same range is complete, the call in it.
    bound = (parse(first["exported_at"]) - stored_up_to).total_seconds()
    time.sleep(max(0.0, (parse(until) - datetime.now(tz.utc)).total_seconds() + bound + 0.5))
    later = cli_export(inst, tmp_path / "later.ndjson", "--since", since.isoformat(), "--until", until)
    assert later["calls"] == 3 and later["complete"] is True and later["still_open"] is None, later
    done = subprocess.run([sys.executable, "manage.py", "verify_export", str(tmp_path / "later.ndjson")],
                          cwd=ROOT, env=inst.env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_killed_serving_processs_uncounted_calls_leave_the_range_open_until_counted(tmp_path, backend_server,
                                                                                      installation_database):
    """A serving process killed (SIGKILL) leaves the tally of the calls it answered and had not
    spooled; they are counted (`killed`) only when its spool directory is claimed again. Until
    then no process holds a writer there and the spool is empty: the range was called complete."""
    from tests.processes import stored_calls

    backend = backend_server({"filter": pass_all})
    inst = Installation(tmp_path / "inst", config(backend.url).replace(f"{HTTP_TIMEOUT}s", "1s"), installation_database,
                        EXTPROXY_BODY_TIMEOUT="1")
    try:
        inst.manage("migrate", "--noinput", "-v", "0")
        inst.start_recorder()
        inst.start_serving()
        since = datetime.now(tz.utc)
        send(inst, 2)
        until = datetime.now(tz.utc).isoformat()
        assert stored_calls(inst)[1] == 2
        assert inst.recorder is not None and inst.serving is not None
        inst.recorder.stop()  # not yet back to claim the killed process's directory
        inst.serving.stop()  # SIGKILL
        killed = cli_export(inst, tmp_path / "killed.ndjson", "--since", since.isoformat(), "--until", until)
        assert killed["calls"] == 2 and killed["complete"] is False, killed  # was complete: nothing looked there
        assert "ended without settling" in killed["still_open"]["reason"] and killed["still_open"]["stored_up_to"] is None
        checked = subprocess.run([sys.executable, "manage.py", "verify_export", str(tmp_path / "killed.ndjson")],
                                 cwd=ROOT, env=inst.env, capture_output=True, text=True)
        assert checked.returncode == 1 and "stored up to no point known yet" in checked.stdout + checked.stderr, checked
        inst.start_serving()  # claims its directory, counts what was left (nothing: every call was spooled)
        bound = 1 + 1 + 1.1  # httpTimeout, EXTPROXY_BODY_TIMEOUT and the proxy's margin, the ticks
        time.sleep(max(0.0, (datetime.fromisoformat(until) - datetime.now(tz.utc)).total_seconds() + bound))
        again = cli_export(inst, tmp_path / "again.ndjson", "--since", since.isoformat(), "--until", until)
        assert again["calls"] == 2 and again["complete"] is True, again
    finally:
        inst.close()
