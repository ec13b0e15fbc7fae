"""The read API: authentication, roles, filters, pagination, and the fixed call shape."""
from __future__ import annotations

import re
import time

import pytest
from django.contrib.auth.models import Group, User
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient

from extproxy.config import RecordingConfig, RedactionConfig
from extproxy.recorder import Recorder
from tests.test_recorder import make_trace

pytestmark = pytest.mark.django_db(transaction=True)


def record(*traces):
    recorder = Recorder(RecordingConfig(), RedactionConfig())
    for trace in traces:
        recorder.submit(trace)
    assert recorder.flush(20)
    recorder.stop()


def client_for(role: str | None = None, superuser: bool = False) -> APIClient:
    user = User.objects.create_user(f"u-{role}-{superuser}", password="pw", is_superuser=superuser)
    if role:
        user.groups.add(Group.objects.get(name=role))
    client = APIClient()
    token = client.post("/api/auth/token/", {"username": user.username, "password": "pw"}).json()["token"]
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def api_routes() -> list[str]:
    found = []

    def walk(patterns, prefix):
        for p in patterns:
            if isinstance(p, URLResolver):
                walk(p.url_patterns, prefix + str(p.pattern))
            elif isinstance(p, URLPattern):
                found.append(prefix + str(p.pattern))

    walk(get_resolver().url_patterns, "/")
    return [r for r in found if r.startswith("/api/") and "auth/token" not in r]


def test_it_requires_authentication_on_every_api_route():
    client = APIClient()
    routes = api_routes()
    assert routes
    for route in routes:
        if "format>" in route:
            continue  # the same views with a format suffix
        path = route.replace("(?P<pk>[^/.]+)", "1").replace("^", "").replace("$", "").replace("/?", "/")
        path = re.sub(r"\(\?P<which>[^)]*\)", "request", path)
        path = re.sub(r"\(\?P<\w+>[^)]*\)", "1", path)
        path = re.sub(r"<int:\w+>", "1", path)
        response = client.get(path)
        assert response.status_code in (401, 403), (route, response.status_code)


def test_it_refuses_a_user_without_a_role():
    response = client_for(None).get("/api/calls/")
    assert response.status_code == 403 and "permission" in response.json()["detail"]


@pytest.mark.parametrize("role", ["viewer", "developer", "auditor", "admin"])
def test_it_lets_every_role_read_calls(role):
    record(make_trace())
    response = client_for(role).get("/api/calls/")
    assert response.status_code == 200 and len(response.json()["results"]) == 1


def test_it_answers_a_token_for_good_credentials_only():
    User.objects.create_user("op", password="right")
    client = APIClient()
    assert client.post("/api/auth/token/", {"username": "op", "password": "wrong"}).status_code == 400
    assert client.post("/api/auth/token/", {"username": "op", "password": "right"}).json()["token"]


def test_it_lists_newest_first_with_the_fixed_fields_and_pages():
    now = time.time()
    record(*[make_trace(started_at=now + i, finished_at=now + i + 0.01) for i in range(5)])
    client = client_for(superuser=True)
    page = client.get("/api/calls/?page_size=2").json()
    assert set(page) >= {"next", "previous", "results"}
    first = page["results"]
    assert first[0]["started_at"] > first[1]["started_at"]
    for key in ("id", "verb", "backend", "pod", "started_at", "finished_at", "outcome", "http_status", "error", "node_count"):
        assert key in first[0]
    assert "decisions" not in first[0]
    second = client.get(page["next"]).json()["results"]
    assert {c["id"] for c in first}.isdisjoint({c["id"] for c in second})


def test_it_filters_by_each_parameter():
    now = time.time()
    record(
        make_trace(started_at=now - 100, finished_at=now - 99),
        make_trace(verb="bind", body=b'{"PodName":"p","PodNamespace":"ns","PodUID":"u1","Node":"n"}', response=b'{"Error":""}'),
        make_trace(backend="other", status=500, response=b"down"),
    )
    client = client_for(superuser=True)

    def ids(query):
        return len(client.get("/api/calls/?" + query).json()["results"])

    assert ids("verb=bind") == 1
    assert ids("pod=p") == 1 and ids("pod=ns/p") == 1 and ids("namespace=ns") == 1 and ids("pod_uid=u1") == 1
    assert ids("backend=other") == 1 and ids("outcome=error") == 1 and ids("outcome=ok") == 2
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 50))
    assert ids(f"since={since}") == 2 and ids(f"until={since}") == 1


@pytest.mark.parametrize("query, field", [("verb=sort", "verb"), ("outcome=meh", "outcome"), ("since=yesterday", "since")])
def test_it_names_a_bad_filter_value(query, field):
    response = client_for(superuser=True).get("/api/calls/?" + query)
    assert response.status_code == 400 and field in response.json()


def test_it_shows_one_call_with_its_decisions():
    record(make_trace())
    client = client_for(superuser=True)
    call_id = client.get("/api/calls/").json()["results"][0]["id"]
    call = client.get(f"/api/calls/{call_id}/").json()
    assert len(call["decisions"]) == 5
    assert {d["result"] for d in call["decisions"]} == {"passed", "failed", "unresolvable"}
    for decision in call["decisions"]:
        assert set(decision) >= {"node", "backend", "result", "reason", "score"}


def test_it_serves_health_readiness_and_metrics():
    client = APIClient()
    assert client.get("/healthz").status_code == 200
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["ready"] is True
    metrics = client.get("/metrics").content.decode()
    assert "extproxy_recorder_queue_depth" in metrics and "extproxy_recorder_dropped_total" in metrics


def test_it_documents_the_api_in_an_openapi_schema():
    import yaml

    client = client_for(superuser=True)
    response = client.get("/api/schema/")
    assert response.status_code == 200
    schema = yaml.safe_load(response.content)
    assert schema["openapi"].startswith("3.")
    listing = schema["paths"]["/api/calls/"]["get"]
    assert {p["name"] for p in listing["parameters"]} >= {"pod", "namespace", "pod_uid", "verb", "backend", "outcome", "since", "until"}
    detail = schema["components"]["schemas"]["CallDetailDoc"]["properties"]
    assert {"decisions", "backend_calls", "pod", "outcome", "node_count"} <= set(detail)
