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


def gpu_truncated(text: str) -> float:
    found = re.search(r'extproxy_replies_truncated_total\{backend="gpu"\} (\S+)', text)
    return float(found.group(1)) if found else 0.0


def test_replays_truncated_replies_are_not_counted_as_the_backends(
    backend_server, proxy, write_config, admin_client, settings
):
    """A developer's build that answers a replay with a reply over EXTPROXY_MAX_REPLY_BYTES is
    not the production backend's: extproxy_replies_truncated_total{backend} stays as it was.
    The same reply to the scheduler's own call is counted (the test can see a count)."""
    from tests.test_reply_bound import streamed

    settings.EXTPROXY_MAX_REPLY_BYTES = 256 * 1024
    backend = backend_server({"filter": pass_all})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    post(server, "/extender/gpu/filter", fixture_bytes(NAMES))
    [call] = recorded(server, admin_client)
    before = gpu_truncated(admin_client.get(server.url + "/metrics").text)
    huge = streamed(100_000)[0]  # about 1.5 MB of node names
    build_under_test = backend_server({"filter": huge})
    backend.httpd.behaviours["filter"] = huge
    developer = user_client("developer")

    for target in ({"kind": "configured"}, {"kind": "url", "url": build_under_test.url + "/scheduler"}):
        run = replay_one(developer, server, call["id"], target=target)
        assert run["changed"] == 1, run  # the replay met the huge reply (an error now: too large to judge)

    assert gpu_truncated(admin_client.get(server.url + "/metrics").text) == before
    assert post(server, "/extender/gpu/filter", fixture_bytes(NAMES)).status_code == 200
    assert gpu_truncated(admin_client.get(server.url + "/metrics").text) == before + 1
