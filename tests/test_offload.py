"""A large combined call is worked on off the serving loop: other calls keep being answered.

The scenario of issue 8: a 10 MB full-object combined filter in flight, and meanwhile a small
per-backend call to a slow backend, which must get its timeout answer (the scheduler-equivalent
error) without waiting for the large call. To make "meanwhile" exact rather than a race, the
large call's request decoding is held open (a gate around protocol.split_extender_args) until
the small call's answer has arrived: on the serving loop that would deadlock (the small call
could not be answered until the gate opens), so the test fails after its wait; off the loop the
small answer arrives and opens the gate. A second test runs the same without any gate.
"""
from __future__ import annotations

import copy
import json
import threading

import requests

from tests.conftest import fixture_json, pass_all, slow

FULL_REQUEST = "filter-request.nodecache-false.json"


def full_request(n: int) -> bytes:
    """A full-object filter request with n distinct Nodes (about 2.9 kB each, as real ones)."""
    request = fixture_json(FULL_REQUEST)
    templates = request["Nodes"]["items"]
    items = []
    for i in range(n):
        node = copy.deepcopy(templates[i % len(templates)])
        node["metadata"]["name"] = f"node-{i:05d}"
        node["metadata"]["uid"] = f"uid-{i:05d}"
        items.append(node)
    request["Nodes"]["items"] = items
    return json.dumps(request, separators=(",", ":")).encode()


def config_for(big_url: str, slow_url: str) -> dict:
    return {
        "backends": [
            # the combined call's only filter backend: full objects, answers every node
            {"name": "full", "urlPrefix": f"{big_url}/scheduler", "filterVerb": "filter", "weight": 1,
             "httpTimeout": "30s", "nodeCacheCapable": False},
            # the small per-backend calls' backend: a prioritizer that never answers in time
            {"name": "slowpoke", "urlPrefix": f"{slow_url}/scheduler", "prioritizeVerb": "prioritize",
             "weight": 1, "httpTimeout": "500ms", "nodeCacheCapable": True},
        ]
    }


SMALL_PRIORITIZE = json.dumps({"Pod": {"metadata": {"name": "p", "namespace": "d", "uid": "u-small"}},
                               "Nodes": None, "NodeNames": ["node-00001"]}).encode()


def post(url: str, body: bytes, timeout: float) -> requests.Response:
    return requests.post(url, data=body, headers={"Content-Type": "application/json"}, timeout=timeout)


def test_it_answers_a_timed_out_call_while_a_10_mb_combined_call_is_being_decoded(
    backend_server, proxy, write_config, monkeypatch
):
    from extproxy import protocol

    big = backend_server({"filter": pass_all})
    slow_backend = backend_server({"prioritize": slow(5, pass_all)})
    server = proxy(write_config(config_for(big.url, slow_backend.url)))
    body = full_request(3600)
    assert len(body) > 10_000_000

    decoding, small_answered = threading.Event(), threading.Event()
    original = protocol.split_extender_args

    def gated(data: bytes):
        if len(data) > 1_000_000:
            decoding.set()
            small_answered.wait(15)  # on the serving loop this wait would stall every call
        return original(data)

    monkeypatch.setattr(protocol, "split_extender_args", gated)
    combined: dict = {}
    large = threading.Thread(target=lambda: combined.update(r=post(server.url + "/extender/filter", body, 120)))
    large.start()
    try:
        assert decoding.wait(30), "the combined call never reached its decoding"
        try:
            small = post(server.url + "/extender/slowpoke/prioritize", SMALL_PRIORITIZE, timeout=10)
        except requests.Timeout:
            small = None
        small_answered.set()
    finally:
        small_answered.set()
        large.join(120)

    assert small is not None, "no answer to the small call while the large one was being decoded"
    assert small.status_code == 504  # prioritize has no Error field: the scheduler sees a failed call
    assert "backend slowpoke: no answer within 0.45s" in small.text
    assert combined["r"].status_code == 200
    answer = combined["r"].json()
    assert answer["Error"] == "" and len(answer["Nodes"]["items"]) == 3600


def test_it_answers_timed_out_calls_during_a_10_mb_combined_call(backend_server, proxy, write_config):
    big = backend_server({"filter": pass_all})
    slow_backend = backend_server({"prioritize": slow(5, pass_all)})
    server = proxy(write_config(config_for(big.url, slow_backend.url)))
    body = full_request(3600)
    combined: dict = {}
    small_answers: list[requests.Response] = []

    def small_calls() -> None:
        while "r" not in combined:
            small_answers.append(post(server.url + "/extender/slowpoke/prioritize", SMALL_PRIORITIZE, timeout=30))

    smalls = threading.Thread(target=small_calls)
    smalls.start()
    combined["r"] = post(server.url + "/extender/filter", body, timeout=120)
    smalls.join(60)

    assert combined["r"].status_code == 200 and len(combined["r"].json()["Nodes"]["items"]) == 3600
    assert small_answers, "no small call was answered"
    assert all(r.status_code == 504 and "no answer within 0.45s" in r.text for r in small_answers)
    server.flush()
    from extproxy.models import Call

    assert Call.objects.filter(backend="combined").count() == 1
    assert Call.objects.filter(backend="slowpoke", outcome="timeout").count() == len(small_answers)
