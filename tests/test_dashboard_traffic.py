"""Every dashboard page against records made by real traffic of every kind, sent through the
real extender endpoints to real loopback backends: full Node objects (the scheduler's default),
names, combined calls with their backend calls, preempt, bind, and undecodable calls. Each page
must answer 200 and say the reasons, scores and the pod's story the records hold.

The scenario has three backends, in the scheduler's order: `gpu` (full objects, binder,
preempt), `zone` (names), and `flaky` (ignorable, always times out)."""
from __future__ import annotations

import copy
import json

import pytest
import requests
from django.contrib.auth.models import User
from django.test import Client

from tests.conftest import fixture_json, pass_all, reply, slow

FULL = "filter-request.nodecache-false.json"
GPU_REASONS = fixture_json("filter-result.nodecache-false.json")
ALL_REJECTED = {
    "Nodes": {"metadata": {}, "items": []}, "NodeNames": None, "Error": "",
    "FailedNodes": {"node-01": "example.com/gpu: all devices busy", "node-02": "example.com/gpu: all devices busy"},
    "FailedAndUnresolvableNodes": {n: "example.com/gpu: node has no GPU devices" for n in ("node-03", "node-04", "node-05")},
}


BUSY: set[str] = set()  # pods the gpu backend finds no room for


def gpu_filter(handler, body):
    """Rejects every node for pods in BUSY, else answers the GPU fixture (node-01, node-03 pass)."""
    try:
        pod = json.loads(body)["Pod"]["metadata"]["name"]
    except (ValueError, KeyError, TypeError):
        handler.answer(400, b"cannot decode ExtenderArgs", "text/plain")
        return
    answer = ALL_REJECTED if pod in BUSY else GPU_REASONS
    handler.answer(200, json.dumps(answer).encode())


def scores(handler, body):
    args = json.loads(body)
    names = args["NodeNames"] or [n["metadata"]["name"] for n in args["Nodes"]["items"]]
    handler.answer(200, json.dumps([{"Host": n, "Score": 8 if n == "node-01" else 3} for n in names]).encode())


def pod_request(name: str, namespace: str = "ml-team", names: bool = False, nodes: list[str] | None = None) -> dict:
    args = copy.deepcopy(fixture_json(FULL))
    args["Pod"]["metadata"].update(name=name, namespace=namespace, uid=f"uid-{namespace}-{name}")
    if nodes is not None:
        args["Nodes"]["items"] = [n for n in args["Nodes"]["items"] if n["metadata"]["name"] in nodes]
    if names:
        args["NodeNames"] = [n["metadata"]["name"] for n in args["Nodes"]["items"]]
        args["Nodes"] = None
    return args


def bind_request(name: str, namespace: str = "ml-team", node: str = "node-01") -> dict:
    return {"PodName": name, "PodNamespace": namespace, "PodUID": f"uid-{namespace}-{name}", "Node": node}


@pytest.fixture
def scene(backend_server, proxy, write_config):
    BUSY.clear()
    gpu = backend_server({"filter": gpu_filter, "prioritize": scores, "bind": reply(200, {"Error": ""}),
                          "preempt": reply(200, fixture_json("preempt-result.json"))})
    zone = backend_server({"filter": pass_all, "prioritize": scores})
    flaky = backend_server({"*": slow(1.0, pass_all)})
    config = {"backends": [
        {"name": "flaky", "urlPrefix": flaky.url, "filterVerb": "filter", "httpTimeout": "200ms", "ignorable": True},
        {"name": "gpu", "urlPrefix": gpu.url, "filterVerb": "filter", "prioritizeVerb": "prioritize",
         "bindVerb": "bind", "preemptVerb": "preempt", "weight": 2, "httpTimeout": "2s"},
        {"name": "zone", "urlPrefix": zone.url, "filterVerb": "filter", "prioritizeVerb": "prioritize",
         "weight": 1, "nodeCacheCapable": True, "httpTimeout": "2s"},
    ]}
    return proxy(write_config(config))


def send(server, path: str, body: dict | bytes) -> requests.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = requests.post(server.url + path, data=data, headers={"Content-Type": "application/json"}, timeout=30)
    assert response.status_code in (200, 400, 502, 504), response.text
    return response


def per_backend_attempt(server, name: str, bind: bool = True, namespace: str = "ml-team") -> None:
    """What kube-scheduler sends three per-backend extender entries for one pod, in its order."""
    send(server, "/extender/gpu/filter", pod_request(name, namespace))
    left = ["node-01", "node-03"]
    if name not in BUSY:
        send(server, "/extender/zone/filter", pod_request(name, namespace, names=True, nodes=left))
        send(server, "/extender/flaky/filter", pod_request(name, namespace, nodes=left))
        send(server, "/extender/gpu/prioritize", pod_request(name, namespace, nodes=left))
        send(server, "/extender/zone/prioritize", pod_request(name, namespace, names=True, nodes=left))
        if bind:
            send(server, "/extender/gpu/bind", bind_request(name, namespace))


def viewer() -> Client:
    User.objects.create_superuser("op", "", "pw")
    client = Client()
    assert client.login(username="op", password="pw")
    return client


def page(client: Client, path: str, **params) -> str:
    response = client.get(path, params)
    assert response.status_code == 200, (path, response.status_code, response.content[:2000])
    return response.content.decode()


def test_it_tells_a_full_object_pods_story_with_the_ignorable_timeout_skipped(scene):
    per_backend_attempt(scene, "trainer-a")
    scene.flush()
    client = viewer()

    body = page(client, "/pods/ml-team/trainer-a/")

    story = client.get("/pods/ml-team/trainer-a/").context["story"]
    assert (story.state, story.node, story.bound_by) == ("bound", "node-01", "extender binder gpu")
    chain = [(s.verb, s.backend, s.outcome, s.counted) for s in story.steps]
    assert chain == [
        ("filter", "gpu", "ok", "ok"), ("filter", "zone", "ok", "ok"), ("filter", "flaky", "timeout", "skipped"),
        ("prioritize", "gpu", "ok", "ok"), ("prioritize", "zone", "ok", "ok"), ("bind", "gpu", "ok", "bound"),
    ]
    assert body.index('id="story"') < body.index("Attempts")  # the story comes first
    assert "Bound to node-01 by extender binder gpu." in body
    for reason in list(GPU_REASONS["FailedNodes"].values()) + list(GPU_REASONS["FailedAndUnresolvableNodes"].values()):
        assert reason in body
    rows = {r["node"]: r["total"] for r in client.get("/pods/ml-team/trainer-a/").context["score_page"].object_list}
    assert rows == {"node-01": 8 * 2 * 10 + 8 * 10, "node-03": 3 * 2 * 10 + 3 * 10}
    assert "passed 0" not in body and "0/2 nodes are available" not in body  # the timeout is no rejection


def test_the_pod_page_decodes_each_calls_decisions_and_request_once(scene, monkeypatch):
    """The pod page asks each call for its decisions (the reason summary, the node table, the
    story) and reads each stored request (the labels, the binder's interest, the bound node,
    whether it is readable) more than once; a 5,000-node call's blob and request take
    milliseconds each time. Each is decoded once per page, and the page still tells the story.
    Counted by the stored object read (the pages hold each call's for the request), since two
    calls may store the same bytes. The story told for each attempt of a listing keeps none."""
    import extproxy.models
    from dashboard import records

    per_backend_attempt(scene, "trainer-a")
    scene.flush()
    client = viewer()
    decoded: list = []  # the stored objects themselves: their ids stay theirs while listed here
    read: list = []
    decode, read_body = extproxy.models._decisions, records._read

    def counted_decode(blob):
        decoded.append(blob)
        return decode(blob)

    def counted_read(stored):
        read.append(stored)
        return read_body(stored)

    monkeypatch.setattr(extproxy.models, "_decisions", counted_decode)
    monkeypatch.setattr(records, "_read", counted_read)
    body = page(client, "/pods/ml-team/trainer-a/")
    assert "Bound to node-01 by extender binder gpu." in body
    for reason in GPU_REASONS["FailedNodes"].values():
        assert reason in body
    # five filters and prioritizes have decisions; every request of the attempt is read
    assert len(decoded) >= 5 and len(read) >= 6, (len(decoded), len(read))
    assert len({id(blob) for blob in decoded}) == len(decoded)
    assert len({id(stored) for stored in read}) == len(read)

    # What the feed and the pending list tell of each of up to hundreds of attempts keeps no
    # decoded decisions: held for all of them at once, 5,000-node calls' would add up.
    from dashboard import queries

    calls = [c for found in queries.attempt_calls([k.key for k in queries.pod_attempts("ml-team", "trainer-a")]).values()
             for c in found]
    assert queries.story_of(calls, []).state == "bound"
    assert calls and not any("_decoded_decisions" in c.__dict__ for c in calls)


def test_it_lists_a_pod_left_without_a_node_and_drops_it_after_a_later_bind(scene):
    BUSY.add("stuck-b")
    per_backend_attempt(scene, "stuck-b")
    per_backend_attempt(scene, "trainer-c", bind=False)  # only the ignorable backend failed
    scene.flush()
    client = viewer()

    pending = client.get("/pending/")
    assert pending.status_code == 200
    assert [(p["namespace"], p["name"]) for p in pending.context["pods"]] == [("ml-team", "stuck-b")]
    body = pending.content.decode()
    expected = ("0/5 nodes are available: 2 example.com/gpu: all devices busy, "
                "3 example.com/gpu: node has no GPU devices.")
    assert expected in body and "1 pod" in body
    story = client.get("/pods/ml-team/stuck-b/").context["story"]
    assert story.state == "pending" and expected in story.sentence

    # Room is made; the scheduler's next attempt passes and binds: the pod is no longer pending.
    BUSY.discard("stuck-b")
    per_backend_attempt(scene, "stuck-b")
    scene.flush()
    assert [p["name"] for p in client.get("/pending/").context["pods"]] == []
    story = client.get("/pods/ml-team/stuck-b/").context["story"]
    assert (story.state, story.node) == ("bound", "node-01")
    assert len(client.get("/pods/ml-team/stuck-b/").context["attempts"]) == 2


def test_it_tells_a_combined_pods_story_from_its_backend_calls(scene):
    send(scene, "/extender/filter", pod_request("trainer-d"))
    send(scene, "/extender/prioritize", pod_request("trainer-d", nodes=["node-01", "node-03"]))
    send(scene, "/extender/bind", bind_request("trainer-d"))
    scene.flush()
    client = viewer()

    body = page(client, "/pods/ml-team/trainer-d/")

    story = client.get("/pods/ml-team/trainer-d/").context["story"]
    assert [(s.verb, s.backend, s.counted) for s in story.steps] == [
        ("filter", "gpu", "ok"), ("filter", "zone", "ok"), ("filter", "flaky", "skipped"),
        ("prioritize", "gpu", "ok"), ("prioritize", "zone", "ok"), ("bind", "gpu", "bound"),
    ]
    assert (story.state, story.node, story.bound_by) == ("bound", "node-01", "extender binder gpu")
    assert "example.com/gpu: node has no GPU devices" in body
    assert [p["name"] for p in client.get("/pending/").context["pods"]] == []


def test_it_renders_preempt_and_undecodable_calls_on_every_page(scene):
    preempt = fixture_json("preempt-request.nodecache-false.json")
    send(scene, "/extender/gpu/preempt", preempt)
    combined = copy.deepcopy(preempt)
    combined["Pod"]["metadata"].update(name="inference-critical-1", uid="uid-inference-critical-1")
    send(scene, "/extender/preempt", combined)
    send(scene, "/extender/gpu/filter", b"{not json")
    send(scene, "/extender/filter", b"\xff\xfe garbage")
    scene.flush()
    client = viewer()

    body = page(client, "/pods/serving/inference-critical-0/")
    steps = client.get("/pods/serving/inference-critical-0/").context["story"].steps
    assert [(s.verb, s.backend, s.counted) for s in steps] == [("preempt", "gpu", "ok")]
    assert "preempt" in body
    page(client, "/pods/serving/inference-critical-1/")
    steps = client.get("/pods/serving/inference-critical-1/").context["story"].steps
    assert [(s.verb, s.backend, s.counted) for s in steps] == [("preempt", "gpu", "ok")]  # the combined call's child
    for path in ("/", "/backends/", "/pending/"):
        page(client, path)
    feed = client.get("/feed/calls/").json()["results"]
    assert len(feed) == 4 and sum(1 for c in feed if c["outcome"] == "error" and not c["pod"]["name"]) == 2
    assert "bad-request" in page(client, "/backends/")


def test_it_renders_names_mode_records_and_the_whole_feed(scene):
    request = pod_request("trainer-e", names=True)
    send(scene, "/extender/zone/filter", request)
    send(scene, "/extender/zone/prioritize", request)
    per_backend_attempt(scene, "trainer-f")
    scene.flush()
    client = viewer()

    body = page(client, "/pods/ml-team/trainer-e/")
    assert "5/5 passed" in body
    page(client, "/pods/ml-team/trainer-f/", attempt="nonexistent")
    assert len(client.get("/feed/calls/").json()["results"]) == 8
    backends = page(client, "/backends/")
    assert "flaky" in backends and "zone" in backends


BODY_COLUMNS = ("request_body", "response_body", "decisions_blob")


def test_backends_page_lists_a_combined_parts_finding_without_reading_any_recorded_body(backend_server, proxy, write_config):
    # The contract findings of the combined form's backends come from the parts of recent combined
    # calls. Each full-object part and its call hold the bodies (a compressed 1,000-node request is
    # about 100 kB): the page needs none of them, and read them all for up to 1,000 parts.
    broken = backend_server({"filter": reply(500, "<html><b>gpu exploded</b></html>", "text/html")})
    zone = backend_server({"filter": pass_all})
    server = proxy(write_config({"backends": [
        {"name": "gpu", "urlPrefix": broken.url, "filterVerb": "filter", "ignorable": True, "httpTimeout": "2s"},
        {"name": "zone", "urlPrefix": zone.url, "filterVerb": "filter", "httpTimeout": "2s"},
    ]}))
    send(server, "/extender/filter", pod_request("trainer-g"))
    server.flush()
    client = viewer()

    from django.db import connection

    statements: list[str] = []

    def spy(execute, sql, params, many, context):  # survives the request's reconnect, unlike the query log
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(spy):
        body = page(client, "/backends/")
    assert "non-200" in body and "gpu exploded" in body and "ml-team/trainer-g" in body
    assert any("extproxy_backendcall" in sql for sql in statements)  # the parts were read
    readers = [sql for sql in statements if any(c in sql for c in BODY_COLUMNS)]
    assert readers == [], readers[0][:600] if readers else ""
