"""A combined bind that a configured binder refused is that binder's failure, on the pod and
pending pages, not extproxy's own bind through the Kubernetes API: the operator's fix is in the
binder (or its node), not in extproxy's RBAC. Only when an ignorable binder failed and extproxy
then bound through the API (and that failed) is the failure the API's.

Real traffic through the combined endpoints to a real loopback binder, recorded by the real
recorder, read through the pages."""
from __future__ import annotations

import json

import pytest
import requests
from django.contrib.auth.models import User
from django.test import Client

from tests.conftest import fixture_json, reply
from tests.test_dashboard_traffic import pod_request

REFUSED = "node-01: <b>no free device</b> left for this pod"


def send(server, path: str, body: dict) -> dict:
    response = requests.post(server.url + path, data=json.dumps(body).encode(), timeout=30,
                             headers={"Content-Type": "application/json"})
    assert response.status_code == 200, response.text
    return response.json()


def binder_scene(backend_server, proxy, write_config, ignorable: bool):
    gpu = backend_server({"filter": reply(200, fixture_json("filter-result.nodecache-false.json")),
                          "bind": reply(200, {"Error": REFUSED})})
    config = {"backends": [{"name": "gpu", "urlPrefix": gpu.url, "filterVerb": "filter", "bindVerb": "bind",
                            "httpTimeout": "2s", "ignorable": ignorable}]}
    return proxy(write_config(config))


def bind_and_read(scene, pod: str):
    send(scene, "/extender/filter", pod_request(pod))
    answer = send(scene, "/extender/bind", {"PodName": pod, "PodNamespace": "ml-team",
                                            "PodUID": f"uid-ml-team-{pod}", "Node": "node-01"})
    scene.flush()
    User.objects.create_superuser("op", "", "pw")
    client = Client()
    assert client.login(username="op", password="pw")
    page = client.get(f"/pods/ml-team/{pod}/")
    pending = client.get("/pending/")
    return answer, page, pending


@pytest.mark.django_db(transaction=True)
def test_a_binder_that_refused_is_named_not_extproxys_api_bind(backend_server, proxy, write_config):
    scene = binder_scene(backend_server, proxy, write_config, ignorable=False)
    answer, page, pending = bind_and_read(scene, "refused-a")

    assert REFUSED in answer["Error"]
    story = page.context["story"]
    assert story.state == "pending"
    assert story.sentence == f"Pending: binding failed on gpu: {answer['Error']}"
    assert [(s.verb, s.backend) for s in story.steps][-1] == ("bind", "gpu")
    html = page.content.decode()
    assert "extproxy&#x27;s bind" not in html and "extproxy&#x27;s combined bind" not in html
    assert "binding failed on gpu" in pending.content.decode()


@pytest.mark.django_db(transaction=True)
def test_after_an_ignorable_binder_failed_the_api_bind_is_extproxys(backend_server, proxy, write_config):
    """The scheduler falls through to its default binder: extproxy binds through the API (which it
    cannot reach here), so that is the failure the pod is pending on."""
    scene = binder_scene(backend_server, proxy, write_config, ignorable=True)
    answer, page, _ = bind_and_read(scene, "fell-b")

    assert answer["Error"] and REFUSED not in answer["Error"]
    story = page.context["story"]
    assert story.sentence == f"Pending: binding failed through the Kubernetes API (extproxy's bind): {answer['Error']}"
