"""manage.py replay as a regression gate: exit 0 unchanged, 1 changed, 2 errors; table, --json,
progress on stderr; from the database and from an exported fixture set (a real subprocess)."""
from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from extproxy.models import Call, ReplayRun
from tests.conftest import fixture_bytes, pass_all
from tests.test_combined import failing
from tests.test_per_backend import config_for, post
from tests.test_replay import NAMES, recorded

ROOT = Path(__file__).resolve().parent.parent


def replay(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("replay", *args, stdout=out, stderr=err)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    except CommandError as exc:  # from the command line, Django exits with exc.returncode
        code, err = exc.returncode, io.StringIO(str(exc))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def three_filters(backend_server, proxy, write_config, admin_client):
    backend = backend_server({"filter": pass_all})
    path = write_config(config_for(backend.url, nodeCacheCapable=True))
    server = proxy(path)
    for _ in range(3):
        post(server, "/extender/gpu/filter", fixture_bytes(NAMES))
    calls = recorded(server, admin_client)
    return backend, server, path, calls


def test_it_exits_0_when_nothing_changed_and_1_when_decisions_changed(three_filters):
    backend, _, path, calls = three_filters

    code, out, err = replay("--config", path, "--verb", "filter")
    assert code == 0, out + err
    assert re.search(r"^changed +0$", out, re.M) and re.search(r"^replayed +3$", out, re.M)
    assert "3/3" in err  # the progress bar

    backend.httpd.behaviours["filter"] = failing({"gpu-node-1": "maintenance"})
    code, out, _ = replay("--config", path, "--verb", "filter")
    assert code == 1
    assert re.search(r"^changed +3$", out, re.M) and re.search(r"^  passed->failed +3$", out, re.M)
    assert f"changed: call {calls[0]['id']} (filter gpu): passed->failed x1" in out
    assert ReplayRun.objects.count() == 2 and Call.objects.filter(is_replay=True).count() == 6


def test_it_reports_as_json_and_can_leave_replays_unrecorded(three_filters):
    backend, _, path, calls = three_filters
    backend.httpd.behaviours["filter"] = failing({"gpu-node-2": "cordoned"})

    code, out, _ = replay("--config", path, "--call", str(calls[0]["id"]), "--json", "--no-record")

    summary = json.loads(out)
    assert code == 1 and summary["exit_status"] == 1
    assert summary["total"] == summary["changed"] == 1 and summary["counts"] == {"passed->failed": 1}
    assert summary["changed_calls"][0]["call"] == calls[0]["id"]
    assert Call.objects.filter(is_replay=True).count() == 0 and ReplayRun.objects.count() == 0


def test_it_exits_2_when_a_call_cannot_be_replayed_or_the_arguments_are_wrong(three_filters, write_config):
    _, _, path, calls = three_filters
    Call.objects.filter(pk=calls[0]["id"]).update(backend="retired")

    code, out, _ = replay("--config", path, "--verb", "filter")
    assert code == 2 and "error: call" in out and "retired" in out

    assert replay("--config", path, "--verb", "dance")[0] == 2
    assert replay("--config", path, "--url", "ftp://nowhere")[0] == 2
    assert replay("--config", path, "--url", "http://x", "--policy", "p")[0] == 2


def test_it_gates_a_ci_run_from_an_exported_fixture_set(three_filters, admin_client, tmp_path):
    backend, server, _, _ = three_filters
    fixtures = tmp_path / "fixtures.jsonl"
    fixtures.write_bytes(admin_client.get(server.url + "/api/fixtures/?verb=filter").content)
    assert len(fixtures.read_text().splitlines()) == 3
    env = dict(os.environ, EXTPROXY_DATA_DIR=str(tmp_path), EXTPROXY_CONFIG="")
    env.pop("EXTPROXY_SKIP_CONFIG_CHECK", None)

    def gate(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "manage.py", "replay", "--fixtures", str(fixtures), *extra],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)

    # No configuration: each fixture goes to the backend URL it recorded.
    same = gate()
    assert same.returncode == 0, same.stdout + same.stderr
    assert "3 call(s)" in same.stderr

    backend.httpd.behaviours["filter"] = failing({"gpu-node-3": "too small"})
    changed = gate("--json")
    assert changed.returncode == 1, changed.stdout + changed.stderr
    assert json.loads(changed.stdout)["counts"] == {"passed->failed": 3}

    broken = gate("--url", "http://127.0.0.1:9/", "--filter-verb", "")  # a target without the verb
    assert broken.returncode == 2, broken.stdout + broken.stderr
