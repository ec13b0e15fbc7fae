"""Which backend a replayed call goes to: `replaces` must name a configured backend; with it,
another backend's per-backend calls go to that backend as configured; a fixture set of several
backends, without a configuration, sends each call to the URL it recorded; a combined call needs
the configuration of its backends."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import fixture_bytes, pass_all
from tests.test_combined import backend as combined_backend
from tests.test_combined import failing
from tests.test_per_backend import post
from tests.test_replay import NAMES, recorded, user_client, wait_for
from tests.test_replay_command import ROOT, replay


def two_backends(gpu, net) -> dict:
    return {"backends": [
        {"name": "gpu", "urlPrefix": gpu.url, "filterVerb": "filter", "nodeCacheCapable": True, "httpTimeout": "2s"},
        {"name": "net", "urlPrefix": net.url, "filterVerb": "filter", "nodeCacheCapable": True, "httpTimeout": "2s"},
    ]}


@pytest.fixture
def gpu_and_net(backend_server, proxy, write_config, admin_client):
    """A proxy with backends gpu and net, and one per-backend filter call of each recorded."""
    gpu, net = backend_server({"filter": pass_all}), backend_server({"filter": pass_all})
    server = proxy(write_config(two_backends(gpu, net)))
    post(server, "/extender/gpu/filter", fixture_bytes(NAMES))
    post(server, "/extender/net/filter", fixture_bytes(NAMES))
    calls = recorded(server, admin_client)
    return gpu, net, server, {c["backend"]: c["id"] for c in calls}


def gate(tmp_path, fixtures, *extra: str) -> subprocess.CompletedProcess:
    """manage.py replay --fixtures in its own process, without a configuration."""
    env = dict(os.environ, EXTPROXY_DATA_DIR=str(tmp_path), EXTPROXY_CONFIG="")
    env.pop("EXTPROXY_SKIP_CONFIG_CHECK", None)
    return subprocess.run([sys.executable, "manage.py", "replay", "--fixtures", str(fixtures), "--json", *extra],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_replaces_must_name_a_configured_backend(gpu_and_net):
    _, _, server, calls = gpu_and_net
    target = {"kind": "url", "url": "http://127.0.0.1:9/", "replaces": "gpo"}
    response = user_client("developer").post(server.url + "/api/replays/", json={"call": calls["gpu"], "target": target})
    assert response.status_code == 400
    assert "target.replaces: no backend 'gpo' (configured: ['gpu', 'net'])" in response.json()["target"]


def test_with_replaces_another_backends_calls_go_to_that_backend(gpu_and_net, backend_server):
    gpu, net, server, calls = gpu_and_net
    candidate = backend_server({"filter": failing({"gpu-node-1": "gpu v2 says no"})})  # a new build of gpu's extender
    before = len(gpu.received), len(net.received)
    developer = user_client("developer")
    target = {"kind": "url", "url": candidate.url, "filterVerb": "filter", "replaces": "gpu"}

    started = developer.post(server.url + "/api/replays/", json={"filters": {"verb": "filter"}, "target": target})
    run = wait_for(developer, server, started.json()["id"])

    assert (run["status"], run["done"], run["errors"], run["changed"]) == ("done", 2, 0, 1), run
    kinds = {item["original"]: item["kinds"] for item in run["items"]}
    assert kinds == {calls["gpu"]: ["passed->failed"], calls["net"]: []}
    assert len(candidate.received) == 1
    assert (len(gpu.received), len(net.received)) == (before[0], before[1] + 1)


def test_a_fixture_set_of_two_backends_replays_each_call_to_the_url_it_recorded(gpu_and_net, admin_client, tmp_path):
    gpu, net, server, _ = gpu_and_net
    fixtures = tmp_path / "set.jsonl"
    fixtures.write_bytes(admin_client.get(server.url + "/api/fixtures/?verb=filter").content)
    before = len(gpu.received), len(net.received)

    same = gate(tmp_path, fixtures)

    assert same.returncode == 0, same.stdout + same.stderr
    assert json.loads(same.stdout)["replayed"] == 2
    assert (len(gpu.received), len(net.received)) == (before[0] + 1, before[1] + 1)

    misspelled = gate(tmp_path, fixtures, "--url", gpu.url, "--filter-verb", "filter", "--replaces", "gpo")
    assert misspelled.returncode == 2, misspelled.stdout + misspelled.stderr
    errors = json.loads(misspelled.stdout)["error_calls"]
    assert len(errors) == 2 and all("target.replaces: no backend 'gpo'" in e["error"] for e in errors)


def test_a_combined_fixture_without_the_configuration_is_an_error_not_a_change(
        backend_server, proxy, write_config, admin_client, tmp_path):
    one, two = backend_server({"filter": pass_all}), backend_server({"filter": pass_all})
    path = write_config({"backends": [combined_backend("one", one, filterVerb="filter", nodeCacheCapable=True),
                                      combined_backend("two", two, filterVerb="filter", nodeCacheCapable=True)]})
    server = proxy(path)
    post(server, "/extender/filter", fixture_bytes(NAMES))
    recorded(server, admin_client)
    fixtures = tmp_path / "combined.jsonl"
    fixtures.write_bytes(admin_client.get(server.url + "/api/fixtures/?backend=combined").content)

    alone = gate(tmp_path, fixtures)

    assert alone.returncode == 2, alone.stdout + alone.stderr
    [error] = json.loads(alone.stdout)["error_calls"]
    assert "--config" in error["error"]
    code, out, err = replay("--fixtures", str(fixtures), "--config", path)
    assert code == 0, out + err
