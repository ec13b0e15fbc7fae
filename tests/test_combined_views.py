"""The combined form's record and views say what the scheduler was told, not the sum of what
its backends said. Real traffic through the combined endpoints to real loopback backends:

- `gpu` (full objects) passes node-01 and node-03 and scores out of range on purpose;
- `zone` (names) rejects whatever a pod in ZONE_FULL asks for, else passes everything.

A combined call stores its own decisions and each backend's; the call's counts, the pending
page, the pod page's attempt row and its score totals must read the combined answer's alone."""
from __future__ import annotations

import copy
import json

import pytest
import requests
from django.contrib.auth.models import User
from django.test import Client

from extproxy.models import BackendCall, Call
from tests.conftest import fixture_json, reply
from tests.test_dashboard_traffic import pod_request

FULL = "filter-request.nodecache-false.json"
GPU_REASONS = fixture_json("filter-result.nodecache-false.json")  # node-01 and node-03 pass
ZONE_FULL: set[str] = set()


def zone_filter(handler, body):
    args = json.loads(body)
    names = args["NodeNames"]
    if args["Pod"]["metadata"]["name"] in ZONE_FULL:
        answer = {"NodeNames": [], "FailedNodes": {n: "zone full" for n in names}, "Error": ""}
    else:
        answer = {"NodeNames": names, "FailedNodes": {}, "Error": ""}
    handler.answer(200, json.dumps(answer).encode())


def zone_scores(handler, body):
    names = json.loads(body)["NodeNames"]
    handler.answer(200, json.dumps([{"Host": n, "Score": 2} for n in names]).encode())


@pytest.fixture
def scene(backend_server, proxy, write_config):
    ZONE_FULL.clear()
    # gpu's scores 8 and 12: 12 is outside 0..10, which the scheduler takes unclamped.
    gpu_scores = [{"Host": "node-01", "Score": 8}, {"Host": "node-03", "Score": 12}]
    gpu = backend_server({"filter": reply(200, GPU_REASONS), "prioritize": reply(200, gpu_scores),
                          "preempt": reply(200, fixture_json("preempt-result.json"))})
    zone = backend_server({"filter": zone_filter, "prioritize": zone_scores})
    config = {"backends": [
        {"name": "gpu", "urlPrefix": gpu.url, "filterVerb": "filter", "prioritizeVerb": "prioritize",
         "preemptVerb": "preempt", "weight": 3, "httpTimeout": "2s"},
        {"name": "zone", "urlPrefix": zone.url, "filterVerb": "filter", "prioritizeVerb": "prioritize",
         "weight": 1, "nodeCacheCapable": True, "httpTimeout": "2s"},
    ]}
    return proxy(write_config(config))


def send(server, path: str, body: dict) -> dict:
    response = requests.post(server.url + path, data=json.dumps(body).encode(), timeout=30,
                             headers={"Content-Type": "application/json"})
    assert response.status_code == 200, response.text
    return response.json()


def viewer() -> Client:
    User.objects.create_superuser("op", "", "pw")
    client = Client()
    assert client.login(username="op", password="pw")
    return client


def test_a_combined_filter_counts_the_nodes_of_its_own_answer(scene):
    answer = send(scene, "/extender/filter", pod_request("fits-a"))
    scene.flush()

    passed = [n["metadata"]["name"] for n in answer["Nodes"]["items"]]
    rejected = {**answer["FailedNodes"], **answer["FailedAndUnresolvableNodes"]}
    call = Call.objects.get(pod_name="fits-a")
    assert (call.passed_count, call.failed_count, call.unresolvable_count) == (
        len(passed), len(answer["FailedNodes"]), len(answer["FailedAndUnresolvableNodes"]))
    assert call.passed_count + call.failed_count + call.unresolvable_count == call.node_count == 5
    assert len(passed) == 2 and len(rejected) == 3
    # The parts keep their own verdicts: gpu judged 5 nodes, zone the 2 gpu left.
    assert sorted(BackendCall.objects.filter(call=call).values_list("backend", flat=True)) == ["gpu", "zone"]
    assert len([d for d in call.decisions() if d["backend"] == "zone"]) == 2

    response = viewer().get("/pods/ml-team/fits-a/")
    [attempt] = response.context["attempts"]
    assert [(t["call"].verb, t["call"].passed_count, t["call"].node_count) for t in attempt.timeline()] == [
        ("filter", 2, 5)]
    assert '<td class="num">2/5</td>' in response.content.decode()  # the attempt's row: nodes left


def test_a_pod_the_backends_together_left_without_a_node_is_pending(scene):
    """gpu passes two nodes, zone rejects both: the scheduler was told 0 nodes. Each backend
    passed some node of those it was sent, but the pod has nowhere to go."""
    ZONE_FULL.add("stuck-b")
    answer = send(scene, "/extender/filter", pod_request("stuck-b"))
    send(scene, "/extender/filter", pod_request("fits-b"))
    scene.flush()

    assert answer["Nodes"]["items"] == [] and answer["Error"] == ""
    call = Call.objects.get(pod_name="stuck-b")
    assert (call.outcome, call.passed_count, call.node_count) == ("ok", 0, 5)
    client = viewer()
    pending = client.get("/pending/")
    assert [(p["namespace"], p["name"]) for p in pending.context["pods"]] == [("ml-team", "stuck-b")]
    assert "0/5 nodes are available" in pending.content.decode()
    assert client.get("/api/calls/", {"pod": "ml-team/stuck-b"}).json()["results"][0]["passed_count"] == 0


def test_the_score_total_is_what_the_scheduler_adds_once(scene):
    send(scene, "/extender/prioritize", pod_request("fits-c", nodes=["node-01", "node-03"]))
    scene.flush()

    rows = {r["node"]: r for r in viewer().get("/pods/ml-team/fits-c/").context["score_page"].object_list}
    # The combined entry (weight 1) answers Σ score × weight; the scheduler adds that × 10.
    assert {n: r["total"] for n, r in rows.items()} == {"node-01": (8 * 3 + 2) * 10, "node-03": (12 * 3 + 2) * 10}
    assert [rows[n]["rank"] for n in ("node-03", "node-01")] == [1, 2]


def test_only_a_backend_scoring_out_of_range_is_a_finding(scene):
    send(scene, "/extender/prioritize", pod_request("fits-d", nodes=["node-01", "node-03"]))
    scene.flush()

    call = Call.objects.get(pod_name="fits-d")
    # The combined answer is out of 0..10 by design (Σ score × weight), and says so nowhere.
    assert [f for f in call.findings if f["kind"] == "score-out-of-range"] == []
    gpu = BackendCall.objects.get(call=call, backend="gpu")
    assert [f["detail"] for f in gpu.findings if f["kind"] == "score-out-of-range"] == [
        "'node-03' scored 12, outside 0..10; not clamped"]


def test_a_backend_extproxy_did_not_call_is_said_so_on_the_pod_and_pending_pages(scene):
    """Registered with names, gpu (full objects) needs Node objects from extproxy's node cache,
    which holds none here: gpu is not called, and the attempt fails on extproxy's error."""
    answer = send(scene, "/extender/filter", pod_request("uncalled-e", names=True))
    scene.flush()

    assert answer["Error"].startswith("extproxy: backend gpu was not called: no Node object for 5 node(s)")
    client = viewer()
    response = client.get("/pods/ml-team/uncalled-e/")
    story = response.context["story"]
    assert story.state == "pending"
    assert story.sentence.startswith("Pending: extproxy did not call backend gpu: no Node object for 5 node(s)")
    assert "filter error" not in story.sentence
    [step] = [s for s in story.steps if s.backend == "gpu"]
    assert step.not_called and step.counted == "error"
    assert "<td>not called: <span class=\"error\">no Node object for 5 node(s)" in response.content.decode()
    pending = client.get("/pending/").content.decode()
    assert "Pending: extproxy did not call backend gpu: no Node object for 5 node(s)" in pending


def test_an_attempt_with_a_preempt_alone_says_so(scene):
    """The scheduler's PostFilter asks the extenders for victims when no node fit: such an
    attempt has no filter call, and its story said "the extenders left None/None node(s)"."""
    preempt = copy.deepcopy(fixture_json("preempt-request.nodecache-false.json"))
    preempt["Pod"]["metadata"].update(name="evicting-f", namespace="ml-team", uid="uid-evicting-f")
    send(scene, "/extender/preempt", preempt)
    scene.flush()

    story = viewer().get("/pods/ml-team/evicting-f/").context["story"]
    assert [(s.verb, s.backend) for s in story.steps] == [("preempt", "gpu")]
    assert story.sentence == "Scheduling in progress: the extenders were asked which pods to evict"


def test_extproxys_own_bind_failing_is_said_to_be_extproxys(scene):
    """No backend binds: extproxy binds through the Kubernetes API, which it cannot reach here."""
    send(scene, "/extender/filter", pod_request("binding-g"))
    answer = send(scene, "/extender/bind", {"PodName": "binding-g", "PodNamespace": "ml-team",
                                            "PodUID": "uid-ml-team-binding-g", "Node": "node-01"})
    scene.flush()

    assert answer["Error"]
    story = viewer().get("/pods/ml-team/binding-g/").context["story"]
    assert story.state == "pending"
    assert story.sentence == f"Pending: binding failed through the Kubernetes API (extproxy's bind): {answer['Error']}"


def test_a_combined_answer_that_failed_names_extproxys_own_url(backend_server, proxy, write_config):
    """A non-200 combined answer is recorded in the scheduler's words, which name the URL it
    posted to: extproxy's /extender/<verb>, not "combined/preempt", which is no URL."""
    failing = backend_server({"preempt": reply(500, b"boom", "text/plain")})
    server = proxy(write_config({"backends": [
        {"name": "gpu", "urlPrefix": failing.url, "preemptVerb": "preempt", "httpTimeout": "2s"}]}))
    preempt = copy.deepcopy(fixture_json("preempt-request.nodecache-false.json"))
    preempt["Pod"]["metadata"].update(name="evicting-i", namespace="ml-team", uid="uid-evicting-i")
    response = requests.post(server.url + "/extender/preempt", data=json.dumps(preempt).encode(), timeout=30)
    server.flush()

    assert response.status_code != 200
    call = Call.objects.get(pod_name="evicting-i")
    assert call.error.startswith(f"failed preempt with extender at URL /extender/preempt, code {response.status_code}")
