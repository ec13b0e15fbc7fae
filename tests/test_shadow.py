"""Shadow backends: a copy of each call after the answer, diffed against the primary; a slow or
dead shadow changes nothing the scheduler sees; the queue's bound; config validation."""
from __future__ import annotations

import json
import time

import pytest
import requests

from extproxy.config import ConfigError, parse_config
from tests.conftest import fixture_bytes, hang_up, pass_all, reply, slow
from tests.test_combined import backend as combined_backend
from tests.test_combined import failing, scores
from tests.test_replay import FULL, NAMES, PRIORITIZE, user_client
from tests.test_per_backend import config_for, post


def with_shadow(primary_url: str, shadow_url: str, **shadow_fields) -> dict:
    config = config_for(primary_url, nodeCacheCapable=True)
    shadow = {"name": "gpu-next", "shadowOf": "gpu", "urlPrefix": f"{shadow_url}/scheduler", "filterVerb": "filter",
              "prioritizeVerb": "prioritize", "bindVerb": "bind", "preemptVerb": "preempt", "weight": 2,
              "nodeCacheCapable": True, "httpTimeout": "1s"}
    shadow.update(shadow_fields)
    config["backends"].append(shadow)
    return config


def stats(server) -> dict:
    assert server.engine.mirror.wait_idle(20), "the shadows did not catch up"
    return server.engine.mirror.stats["gpu-next"].to_json()


def test_it_keeps_shadows_out_of_the_schedulers_chain_and_checks_the_primary():
    config = parse_config(with_shadow("http://a:1", "http://b:2"), "<test>")
    assert [b.name for b in config.backends] == ["gpu"]
    assert [(s.name, s.shadow_of) for s in config.shadows] == [("gpu-next", "gpu")]

    with pytest.raises(ConfigError) as bad:
        parse_config(with_shadow("http://a:1", "http://b:2", shadowOf="gpu-old"), "<test>")
    assert "backends[1].shadowOf" in str(bad.value) and "'gpu-old'" in str(bad.value)
    with pytest.raises(ConfigError) as only:
        parse_config({"backends": [{"name": "a", "urlPrefix": "http://a:1", "filterVerb": "f", "shadowOf": "a"}]}, "<test>")
    assert "shadowOf" in str(only.value)


def test_it_mirrors_each_call_and_diffs_it_against_the_primary(backend_server, proxy, write_config, transactional_db):
    primary = backend_server({"filter": pass_all})
    shadow = backend_server({"filter": failing({"gpu-node-1": "new version: no room"})})
    server = proxy(write_config(with_shadow(primary.url, shadow.url)))
    answers = [post(server, "/extender/gpu/filter", fixture_bytes(NAMES)) for _ in range(4)]

    got = stats(server)

    assert all(json.loads(a.content)["FailedNodes"] == {} for a in answers)  # the primary's answer
    assert [path for path, _ in shadow.received] == ["/scheduler/filter"] * 4
    assert got["calls"] == 4 and got["different"] == 4 and got["different_rate"] == 1.0 and got["dropped"] == 0
    assert got["kinds"] == {"passed->failed": 4}
    assert got["examples"][0]["nodes"][0] == {"node": "gpu-node-1", "backend": "gpu", "kind": "passed->failed",
                                              "before": None, "after": "new version: no room"}
    text = requests.get(server.url + "/metrics", timeout=5).text
    assert 'extproxy_shadow_calls_total{result="different",shadow="gpu-next"} 4.0' in text


def test_it_counts_calls_the_shadow_decides_alike(backend_server, proxy, write_config, transactional_db):
    primary = backend_server({"prioritize": scores({"gpu-node-1": 5})})
    shadow = backend_server({"prioritize": scores({"gpu-node-1": 5})})
    server = proxy(write_config(with_shadow(primary.url, shadow.url)))
    for _ in range(3):
        post(server, "/extender/gpu/prioritize", fixture_bytes(PRIORITIZE))

    got = stats(server)

    assert got["calls"] == 3 and got["different"] == 0 and got["examples"] == []


def test_it_sends_the_shadow_its_own_mode(backend_server, proxy, write_config, transactional_db):
    primary = backend_server({"filter": pass_all})
    shadow = backend_server({"filter": pass_all})
    config = with_shadow(primary.url, shadow.url)
    config["backends"][0]["nodeCacheCapable"] = False  # the primary gets full Node objects
    server = proxy(write_config(config))
    post(server, "/extender/gpu/filter", fixture_bytes(FULL))

    got = stats(server)

    sent = json.loads(shadow.received[-1][1])
    assert sent["Nodes"] is None and len(sent["NodeNames"]) == 4  # names, for a nodeCacheCapable shadow
    assert got["calls"] == 1 and got["different"] == 0


@pytest.mark.parametrize("behaviour", [slow(3, pass_all), hang_up], ids=["slow", "down"])
def test_it_answers_the_scheduler_the_same_whatever_the_shadow_does(
    backend_server, proxy, write_config, transactional_db, behaviour
):
    primary = backend_server({"filter": pass_all, "prioritize": reply(200, b'[{"Host":"gpu-node-1","Score":7}]')})
    shadow = backend_server({"*": behaviour})
    server = proxy(write_config(with_shadow(primary.url, shadow.url)))
    expected = {
        "filter": requests.post(primary.url + "/scheduler/filter", data=fixture_bytes(NAMES), timeout=5),
        "prioritize": requests.post(primary.url + "/scheduler/prioritize", data=fixture_bytes(PRIORITIZE), timeout=5),
    }

    for _ in range(3):
        for verb, body in (("filter", NAMES), ("prioritize", PRIORITIZE)):
            got = post(server, f"/extender/gpu/{verb}", fixture_bytes(body))
            assert (got.status_code, got.content) == (expected[verb].status_code, expected[verb].content)

    got = stats(server)
    assert got["calls"] == 6 and got["different"] == 6  # the shadow timed out or failed each time
    assert set(got["kinds"]) <= {"outcome:ok->timeout", "outcome:ok->error"}


def test_it_drops_and_counts_what_does_not_fit_when_the_shadow_is_behind(
    backend_server, proxy, write_config, transactional_db, monkeypatch
):
    from extproxy import shadow as shadow_module

    monkeypatch.setattr(shadow_module, "QUEUE_SIZE", 2)
    monkeypatch.setattr(shadow_module, "CONCURRENCY", 1)
    primary = backend_server({"filter": pass_all})
    shadow = backend_server({"filter": slow(0.5, pass_all)})
    server = proxy(write_config(with_shadow(primary.url, shadow.url)))

    answers = [post(server, "/extender/gpu/filter", fixture_bytes(NAMES)) for _ in range(12)]

    assert all(a.status_code == 200 for a in answers)
    got = stats(server)
    assert got["dropped"] >= 6 and got["calls"] + got["dropped"] == 12
    text = requests.get(server.url + "/metrics", timeout=5).text
    assert f'extproxy_shadow_dropped_total{{shadow="gpu-next"}} {float(got["dropped"])}' in text


def test_it_never_mirrors_a_bind(backend_server, proxy, write_config, transactional_db):
    primary = backend_server({"bind": reply(200, b'{"Error":""}')})
    shadow = backend_server({"*": reply(200, b'{"Error":""}')})
    server = proxy(write_config(with_shadow(primary.url, shadow.url)))
    post(server, "/extender/gpu/bind", fixture_bytes("captured-kube-scheduler-1.24/bind-request.nodecache-true.json"))

    assert stats(server)["calls"] == 0 and shadow.received == []


def test_it_mirrors_each_backends_part_of_a_combined_call(backend_server, proxy, write_config, transactional_db):
    one = backend_server({"filter": pass_all})
    shadow = backend_server({"filter": failing({"gpu-node-2": "cordoned"})})
    server = proxy(write_config({"backends": [
        combined_backend("gpu", one, filterVerb="filter", nodeCacheCapable=True),
        {"name": "gpu-next", "shadowOf": "gpu", "urlPrefix": shadow.url, "filterVerb": "filter", "nodeCacheCapable": True},
    ]}))
    post(server, "/extender/filter", fixture_bytes(NAMES))

    got = stats(server)

    assert got["calls"] == 1 and got["kinds"] == {"passed->failed": 1}


def test_it_shows_the_shadows_on_the_dashboard(backend_server, proxy, write_config, transactional_db):
    primary = backend_server({"filter": pass_all})
    shadow = backend_server({"filter": failing({"gpu-node-1": "<i>no</i>"})})
    server = proxy(write_config(with_shadow(primary.url, shadow.url)))
    for _ in range(2):
        post(server, "/extender/gpu/filter", fixture_bytes(NAMES))
    stats(server)
    viewer = user_client("viewer")
    session = requests.Session()
    login = session.get(server.url + "/accounts/login/")
    session.post(server.url + "/accounts/login/", data={
        "username": viewer.username, "password": "pw", "csrfmiddlewaretoken": login.cookies["csrftoken"]})

    page = session.get(server.url + "/shadows/").text
    api = viewer.get(server.url + "/api/shadows/").json()

    assert "gpu-next" in page and "100.0%" in page and "&lt;i&gt;no&lt;/i&gt;" in page and "<i>no</i>" not in page
    assert api["results"][0]["shadow"] == "gpu-next" and api["results"][0]["different"] == 2
