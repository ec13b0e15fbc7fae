"""Dashboard pages against real records: login, the feed's filters, the pod view of the GPU
fixture scenario (reasons, scores, bound node), pagination of a 5000-node call, backends,
pending pods, and HTML in pod names, labels, reasons and error texts rendered as text."""
from __future__ import annotations

import json
import time

import pytest
from django.contrib.auth.models import User
from django.test import Client

from extproxy.config import RecordingConfig, RedactionConfig
from extproxy.recorder import Recorder, Trace
from tests.conftest import fixture_json

pytestmark = pytest.mark.django_db(transaction=True)

XSS_POD = "<img src=x onerror=alert(1)>"
XSS_LABEL = "<script>alert('label')</script>"
XSS_REASON = "<script>alert('reason')</script> gpu busy"
XSS_ERROR = "<img src=y onerror=alert('error')> exploded"


# --- builders ------------------------------------------------------------------------------


def extender_args(name="trainer-7d9c5b6f8-b4x2s", namespace="ml-team", uid=None, nodes=None, label=None) -> dict:
    args = fixture_json("filter-request.nodecache-true.json")
    meta = args["Pod"]["metadata"]
    meta.update(name=name, namespace=namespace, uid=uid or f"uid-{namespace}-{name}"[:64])
    if label is not None:
        meta["labels"]["note"] = label
    if nodes is not None:
        args["NodeNames"] = nodes
    return args


def trace(verb: str, request: dict | list, response: dict | list | str, status: int = 200, at: float | None = None,
          duration: float = 0.004, backend: str = "gpu", weight: int = 2) -> Trace:
    at = time.time() if at is None else at
    body = response if isinstance(response, str) else json.dumps(response)
    return Trace(
        verb=verb, backend=backend, url="http://gpu.example/scheduler", started_at=at, finished_at=at + duration,
        request_body=json.dumps(request).encode(), status=status, response_body=body.encode(),
        answered_status=status, node_cache_capable=True, weight=weight,
    )


def gpu_attempt(name="trainer-7d9c5b6f8-b4x2s", namespace="ml-team", at=None, bind=True, **pod) -> list[Trace]:
    """The fixture scenario: filter keeps node-01/03, prioritize 8 and 3 (weight 2), bind node-01."""
    at = time.time() if at is None else at
    args = extender_args(name, namespace, **pod)
    filtered = dict(args, NodeNames=["node-01", "node-03"])
    bind_args = {"PodName": name, "PodNamespace": namespace, "PodUID": args["Pod"]["metadata"]["uid"], "Node": "node-01"}
    traces = [
        trace("filter", args, fixture_json("filter-result.nodecache-true.json"), at=at),
        trace("prioritize", filtered, fixture_json("prioritize-result.json"), at=at + 0.01),
    ]
    if bind:
        traces.append(trace("bind", bind_args, {"Error": ""}, at=at + 0.02))
    return traces


def record(traces: list[Trace]) -> list[dict]:
    return Recorder(RecordingConfig(), RedactionConfig()).write_batch(traces)


def viewer(username="op") -> Client:
    User.objects.create_superuser(username, "", "pw")
    client = Client()
    assert client.login(username=username, password="pw")
    return client


# --- tests ---------------------------------------------------------------------------------

PAGES = ["/", "/pods/ml-team/trainer/", "/backends/", "/pending/", "/feed/calls/"]


@pytest.mark.parametrize("path", PAGES)
def test_it_sends_anonymous_users_to_the_login_page(path):
    response = Client().get(path)
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


@pytest.mark.parametrize("path", PAGES)
def test_it_refuses_a_user_without_a_role(path):
    User.objects.create_user("nobody", password="pw")
    client = Client()
    client.login(username="nobody", password="pw")
    assert client.get(path).status_code == 403


def test_it_serves_the_live_feed_with_htmx_and_its_script():
    body = viewer().get("/").content.decode()
    assert 'id="filters"' in body and "dashboard/live.js" in body and "django_htmx/htmx-2.min.js" in body


def test_it_filters_the_feed_history_by_node_latency_and_error_text():
    now = time.time()
    record(gpu_attempt(at=now - 5))
    args = extender_args("other", "batch", nodes=["node-77"])
    passed = {"NodeNames": ["node-77"], "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""}
    record([trace("filter", args, passed, at=now - 2),
            trace("filter", args, "boom: disk quota", status=500, at=now - 1, duration=0.5)])
    client = viewer()

    def names(**params):
        response = client.get("/feed/calls/", params)
        assert response.status_code == 200, response.content
        return [(c["verb"], c["pod"]["name"]) for c in response.json()["results"]]

    # The requests named it: the 500 (no verdict on it) too, as the API's `node` and the feed's attempts find them.
    assert names(node="node-77") == [("filter", "other"), ("filter", "other")]
    assert names(node="node-01") == [("bind", "trainer-7d9c5b6f8-b4x2s"), ("prioritize", "trainer-7d9c5b6f8-b4x2s"),
                                     ("filter", "trainer-7d9c5b6f8-b4x2s")]
    assert names(node="node-04") == [("filter", "trainer-7d9c5b6f8-b4x2s")]
    assert names(latency_above="100") == [("filter", "other")]
    assert names(error="DISK quota") == [("filter", "other")]
    assert names(verb="bind") == [("bind", "trainer-7d9c5b6f8-b4x2s")]
    assert len(names()) == 5
    assert client.get("/feed/calls/", {"latency_above": "fast"}).status_code == 400
    assert client.get("/feed/calls/", {"verb": "sort"}).status_code == 400


def test_it_shows_the_pods_reasons_scores_and_bound_node():
    record(gpu_attempt())
    response = viewer().get("/pods/ml-team/trainer-7d9c5b6f8-b4x2s/")
    assert response.status_code == 200
    body = response.content.decode()
    expected = fixture_json("filter-result.nodecache-true.json")
    for reason in list(expected["FailedNodes"].values()) + list(expected["FailedAndUnresolvableNodes"].values()):
        assert reason in body
    assert "2/5 nodes are available: 1 example.com/gpu: 2 of 4 devices" in body
    rows = response.context["score_page"].object_list
    assert [(r["node"], r["rank"], r["cells"][0]["score"], r["cells"][0]["weighted"], r["total"]) for r in rows] == [
        ("node-01", 1, 8, 160, 160), ("node-03", 2, 3, 60, 60),
    ]
    assert response.context["bound"] == "node-01"
    assert '<tr class="bound" data-node="node-01">' in body
    timeline = [t["call"].verb for t in response.context["selected"].timeline()]
    assert timeline == ["filter", "prioritize", "bind"]


def test_it_keeps_a_pods_attempts_apart():
    now = time.time()
    record(gpu_attempt(at=now - 100, bind=False) + gpu_attempt(at=now - 10))
    response = viewer().get("/pods/ml-team/trainer-7d9c5b6f8-b4x2s/")
    assert len(response.context["attempts"]) == 2
    older = response.context["attempts"][1]
    again = viewer("op2").get("/pods/ml-team/trainer-7d9c5b6f8-b4x2s/", {"attempt": older.key})
    assert again.context["selected"].key == older.key and again.context["bound"] is None


def test_it_pages_a_5000_node_call_on_the_server():
    nodes = [f"node-{i:05d}" for i in range(5000)]
    args = extender_args("big", "scale", nodes=nodes)
    answer = {"NodeNames": nodes[:10], "FailedNodes": {n: "cpu: insufficient" for n in nodes[10:]},
              "FailedAndUnresolvableNodes": {}, "Error": ""}
    scores = [{"Host": n, "Score": i % 11} for i, n in enumerate(nodes)]
    record([trace("filter", args, answer), trace("prioritize", args, scores, at=time.time() + 0.01)])
    client = viewer()

    response = client.get("/pods/scale/big/")

    assert response.status_code == 200
    assert len(response.context["node_rows"]) == 100 and response.context["node_page"].paginator.num_pages == 50
    assert "10/5000 nodes are available: 4990 cpu: insufficient." in response.content.decode()
    fragment = client.get("/pods/scale/big/", {"page": "3"}, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="node-table")
    text = fragment.content.decode()
    assert text.lstrip().startswith('<div id="node-table">') and "node-00200" in text and "<html" not in text


def test_it_lists_pods_left_without_a_feasible_node():
    stuck = extender_args("stuck", "ml-team")
    none_pass = {"NodeNames": [], "FailedNodes": {"node-01": "gpu busy", "node-02": "gpu busy"},
                 "FailedAndUnresolvableNodes": {n: "no gpu" for n in ("node-03", "node-04", "node-05")}, "Error": ""}
    record([trace("filter", stuck, none_pass)] + gpu_attempt())
    response = viewer().get("/pending/")
    pods = response.context["pods"]
    assert [(p["namespace"], p["name"]) for p in pods] == [("ml-team", "stuck")]
    body = response.content.decode()
    assert "0/5 nodes are available: 2 gpu busy, 3 no gpu." in body
    assert 'href="/pods/ml-team/stuck/?attempt=' in body


def test_it_shows_backend_statistics_and_findings_with_examples():
    now = time.time()
    record(gpu_attempt(at=now - 30))
    args = extender_args("broken", "ml-team")
    record([
        trace("filter", args, "backend exploded: nil map", status=500, at=now - 20),
        trace("prioritize", args, [{"Host": "node-99", "Score": 1}], at=now - 10, duration=0.3),
    ])
    response = viewer().get("/backends/")
    assert response.status_code == 200
    row = next(r for r in response.context["rows"] if r["name"] == "gpu")
    kinds = {f["kind"]: f for f in row["findings"]}
    assert "non-200" in kinds and "backend exploded: nil map" in kinds["non-200"]["examples"][0]["detail"]
    assert "name-not-in-input" in kinds
    stats = {s["verb"]: s for s in row["series"]}
    assert stats["filter"]["calls"] == 2 and stats["filter"]["errors"] == 1
    assert stats["prioritize"]["p99"] >= 299
    data = json.loads(response.content.decode().split('id="chart-data" type="application/json">')[1].split("</script>")[0])
    assert {s["verb"] for s in data["series"]} >= {"filter", "prioritize", "bind"}
    assert "uplot/uPlot.iife.min.js" in response.content.decode()


def test_it_serves_the_chart_library_from_node_modules():
    from django.contrib.staticfiles import finders

    assert finders.find("uplot/uPlot.iife.min.js")
    assert finders.find("django_htmx/htmx-2.min.js")


def xss_records() -> None:
    now = time.time()
    args = extender_args(XSS_POD, "ml-team", label=XSS_LABEL)
    answer = {"NodeNames": ["node-01"], "FailedNodes": {"node-02": XSS_REASON},
              "FailedAndUnresolvableNodes": {n: XSS_REASON for n in ("node-03", "node-04", "node-05")}, "Error": ""}
    none_pass = dict(answer, NodeNames=[], FailedNodes={"node-01": XSS_REASON, "node-02": XSS_REASON})
    record([
        trace("filter", args, answer, at=now - 3),
        trace("prioritize", args, XSS_ERROR, status=500, at=now - 2),
        trace("filter", args, none_pass, at=now - 1),
    ])


def test_it_escapes_html_in_pod_names_labels_reasons_and_errors_on_every_page():
    xss_records()
    client = viewer()
    from urllib.parse import quote

    pages = [f"/pods/ml-team/{quote(XSS_POD)}/", "/backends/", "/pending/"]
    for page in pages:
        body = client.get(page).content.decode()
        for raw in (XSS_POD, XSS_REASON, XSS_ERROR, XSS_LABEL):
            assert raw not in body, (page, raw)
    pod = client.get(pages[0]).content.decode()
    assert "&lt;img src=x onerror=alert(1)&gt;" in pod and "&lt;script&gt;alert(&#x27;reason&#x27;)" in pod
    assert "&lt;img src=y onerror=alert(&#x27;error&#x27;)&gt;" in client.get("/backends/").content.decode()
