"""Exports of traffic sent through a real extproxy (the serving process and the recorder
process) to a real loopback backend, counted: the calls sent in a known time range are exactly
the rows exported, and a range that has not ended yet is not called complete."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone as tz
from pathlib import Path

import pytest
import requests

from tests.conftest import fixture_bytes, pass_all
from tests.processes import ROOT, Installation

pytestmark = pytest.mark.timeout(300)


def config(backend_url: str) -> str:
    return (f"backends:\n- name: gpu\n  urlPrefix: {backend_url}/scheduler\n  filterVerb: filter\n"
            "  nodeCacheCapable: false\n")


@pytest.fixture
def installation(tmp_path, backend_server, installation_database):
    """A migrated installation on SQLite, or on a fresh PostgreSQL database on a PostgreSQL run,
    serving and recording; its backend passes every node of full Node objects."""
    backend = backend_server({"filter": pass_all})
    inst = Installation(tmp_path / "inst", config(backend.url), installation_database)
    inst.manage("migrate", "--noinput", "-v", "0")
    inst.start_recorder()
    inst.start_serving()
    yield inst
    inst.close()


def send(inst: Installation, calls: int) -> None:
    body = fixture_bytes("filter-request.nodecache-false.json")
    for _ in range(calls):
        assert requests.post(f"{inst.url}/extender/gpu/filter", data=body, timeout=10).status_code == 200
    inst.wait_drained()


def export(inst: Installation, out: Path, *filters: str) -> dict:
    """`manage.py export` as an auditor runs it; the manifest it wrote."""
    done = subprocess.run([sys.executable, "manage.py", "export", "--format", "ndjson", "-o", str(out),
                           "--no-progress", *filters], cwd=ROOT, env=inst.env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(Path(f"{out}.manifest.json").read_text())


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def test_a_range_that_ends_after_the_export_is_not_complete(installation, tmp_path):
    """Calls are still made in a range that has not ended: the export cannot hold them yet, so it
    must not say the range is complete (a later export of the same range holds more)."""
    start = datetime.now(tz.utc)
    send(installation, 3)
    until = iso(start + timedelta(hours=1))
    first = export(installation, tmp_path / "first.ndjson", "--since", iso(start), "--until", until)
    assert first["calls"] == 3
    assert first["complete"] is False and first["still_open"]["stored_up_to"] is not None
    send(installation, 2)  # made in the same range, after the first export
    second = export(installation, tmp_path / "second.ndjson", "--since", iso(start), "--until", until)
    assert second["calls"] == 5
    done = subprocess.run([sys.executable, "manage.py", "verify_export", str(tmp_path / "first.ndjson")],
                          cwd=ROOT, env=installation.env, capture_output=True, text=True)
    assert done.returncode == 1 and "NOT complete" in done.stderr and "has not ended" in done.stderr


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def test_the_range_holds_the_calls_started_from_since_up_to_before_until(installation, tmp_path):
    """since is inclusive, until exclusive (README, API): a range from one call's recorded time
    to another's holds the first and not the second, whatever offset the times are written in."""
    for _ in range(4):
        send(installation, 1)
        time.sleep(0.05)
    everything = tmp_path / "all.ndjson"
    assert export(installation, everything)["calls"] == 4
    times = list(dict.fromkeys(r["time"] for r in records(everything)))  # each call's, in order
    assert len(times) == 4
    edge = tmp_path / "edge.ndjson"
    manifest = export(installation, edge, "--since", times[1], "--until", times[3])
    assert manifest["calls"] == 2 and list(dict.fromkeys(r["time"] for r in records(edge))) == times[1:3]
    shifted = datetime.fromisoformat(times[1].replace("Z", "+00:00")).astimezone(tz(timedelta(hours=-5)))
    offset = tmp_path / "offset.ndjson"
    assert export(installation, offset, "--since", shifted.isoformat(), "--until", times[3])["calls"] == 2


@pytest.mark.parametrize("fmt", ["csv", "ndjson"])
def test_a_file_whose_line_endings_were_changed_is_named_as_such(installation, tmp_path, fmt):
    """A copy made in text mode on Windows (or saved by an editor) ends every line in CR LF: the
    records are altered, and the check says how, not that line 1 is no header or no record."""
    send(installation, 2)
    out = tmp_path / f"calls.{fmt}"
    done = subprocess.run([sys.executable, "manage.py", "export", "--format", fmt, "-o", str(out), "--no-progress"],
                          cwd=ROOT, env=installation.env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    out.write_bytes(out.read_bytes().replace(b"\n", b"\r\n"))
    done = subprocess.run([sys.executable, "manage.py", "verify_export", str(out)], cwd=ROOT, env=installation.env,
                          capture_output=True, text=True)
    assert done.returncode == 1 and "line 1: ends in CR LF" in done.stderr, done.stderr


def token_of(inst: Installation, role: str) -> str:
    subprocess.run([sys.executable, "manage.py", "user", "add", "audrey", "--role", role, "--password-stdin"],
                   cwd=ROOT, env=inst.env, input="pw-of-audrey-1", capture_output=True, text=True, check=True)
    done = subprocess.run([sys.executable, "manage.py", "token", "audrey"], cwd=ROOT, env=inst.env,
                          capture_output=True, text=True, check=True)
    return done.stdout.split()[-1]


def test_a_range_whose_until_is_before_its_since_is_refused(installation, tmp_path):
    """since and until swapped select nothing: a signed, verified 'complete' empty export of it
    told the auditor the range had no calls. Both faces refuse it, naming the fields."""
    start = datetime.now(tz.utc)
    send(installation, 2)
    end = datetime.now(tz.utc)
    done = subprocess.run([sys.executable, "manage.py", "export", "-o", str(tmp_path / "swapped.ndjson"),
                           "--no-progress", "--since", iso(end), "--until", iso(start)],
                          cwd=ROOT, env=installation.env, capture_output=True, text=True)
    assert done.returncode != 0 and "until is before since" in done.stderr, done.stderr
    assert not (tmp_path / "swapped.ndjson.manifest.json").exists()
    headers = {"Authorization": "Token " + token_of(installation, "auditor")}
    swapped = requests.get(f"{installation.url}/api/export/", params={"since": iso(end), "until": iso(start)},
                           headers=headers, timeout=30)
    assert swapped.status_code == 400 and "until is before since" in swapped.json()["until"][0]
    right = requests.get(f"{installation.url}/api/export/", params={"since": iso(start), "until": iso(end)},
                         headers=headers, timeout=30)
    assert right.status_code == 200 and len({json.loads(line)["call"] for line in right.content.splitlines()}) == 2
