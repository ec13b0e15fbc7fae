"""Replaying against a new build by URL: a backend that fails the same way on both builds is no
change. The error text of a non-200 answer names the URL it was posted to (the scheduler's
words, "failed filter with extender at URL <url>, code 500"), which is the target's by design,
so comparing the texts as they are showed every such call as an `error` change. Real backends
on loopback, real database, through the API."""
from __future__ import annotations

from tests.conftest import fixture_bytes, reply
from tests.test_per_backend import config_for, post
from tests.test_replay import FULL, developer, recorded, replay_one  # noqa: F401 (fixture)


def test_the_same_failure_from_the_new_build_is_no_change(backend_server, proxy, write_config, admin_client, developer):
    v1 = backend_server({"filter": reply(500, "internal <error> \"boom\"", "text/plain")})
    v2 = backend_server({"filter": reply(500, "internal <error> \"boom\"", "text/plain")})
    server = proxy(write_config(config_for(v1.url)))
    post(server, "/extender/gpu/filter", fixture_bytes(FULL))
    [call] = recorded(server, admin_client)
    assert call["outcome"] == "error" and v1.url in call["error"]

    target = {"kind": "url", "url": v2.url + "/scheduler", "filterVerb": "filter", "nodeCacheCapable": False}
    run = replay_one(developer, server, call["id"], target=target)

    [item] = run["items"]
    assert len(v2.received) == 1
    assert (run["changed"], item["changed"], item["kinds"]) == (0, False, []), item


def test_another_failure_from_the_new_build_is_still_an_error_change(backend_server, proxy, write_config, admin_client,
                                                                     developer):
    v1 = backend_server({"filter": reply(500, "boom", "text/plain")})
    v2 = backend_server({"filter": reply(500, "out of memory", "text/plain")})
    server = proxy(write_config(config_for(v1.url)))
    post(server, "/extender/gpu/filter", fixture_bytes(FULL))
    [call] = recorded(server, admin_client)

    target = {"kind": "url", "url": v2.url + "/scheduler", "filterVerb": "filter", "nodeCacheCapable": False}
    run = replay_one(developer, server, call["id"], target=target)

    [item] = run["items"]
    assert item["kinds"] == ["error"]
    assert "out of memory" in item["diff"]["error"]["after"] and "boom" in item["diff"]["error"]["before"]
