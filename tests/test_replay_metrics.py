"""Replays are not the production backends' traffic: a replay to a developer's build, under the
replaced backend's name, leaves /metrics' backend latency figures as they were."""
from __future__ import annotations

import re

from tests.conftest import fixture_bytes, pass_all, slow
from tests.test_per_backend import config_for, post
from tests.test_replay import NAMES, recorded, replay_one, user_client


def gpu_filter_latency(text: str) -> tuple[float, float]:
    count = re.search(r'extproxy_backend_duration_seconds_count\{backend="gpu",verb="filter"\} (\S+)', text)
    total = re.search(r'extproxy_backend_duration_seconds_sum\{backend="gpu",verb="filter"\} (\S+)', text)
    assert count and total, text[:2000]
    return float(count.group(1)), float(total.group(1))


def test_replays_are_not_counted_in_the_backends_latency(backend_server, proxy, write_config, admin_client):
    backend = backend_server({"filter": pass_all})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    post(server, "/extender/gpu/filter", fixture_bytes(NAMES))
    [call] = recorded(server, admin_client)
    before = gpu_filter_latency(admin_client.get(server.url + "/metrics").text)
    build_under_test = backend_server({"filter": slow(0.3, pass_all)})
    developer = user_client("developer")

    for target in ({"kind": "configured"}, {"kind": "url", "url": build_under_test.url + "/scheduler"}):
        replay_one(developer, server, call["id"], target=target)

    assert gpu_filter_latency(admin_client.get(server.url + "/metrics").text) == before
