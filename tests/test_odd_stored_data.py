"""Odd data the recorder stores as designed, read back by the pages and the API: never a 500.

Bodies nested deeper than JSON decoders recurse, lone UTF-16 surrogate escapes, pod names
with a newline or a namespace with a slash, pod specs of the wrong type; and query parameters
at the edges of their types (a 400 naming the parameter, never a 500). Rows are built by the
recorder's real row builder (Recorder.write_batch) from the captured request fixtures, and
pages are requested through Django's test client, logged in.
"""
from __future__ import annotations

import base64
import html
import json
import re
from urllib.parse import urljoin, urlsplit

import pytest
from django.http import HttpResponse
from django.test import Client

from extproxy.bodies import request_of
from extproxy.models import Call
from tests.conftest import fixture_bytes
from tests.test_dashboard_pages import record, viewer
from tests.test_recorder import make_trace

pytestmark = pytest.mark.django_db

FILTER_REQUEST = "filter-request.nodecache-true.json"
OK_REPLY = b'{"NodeNames":[],"FailedNodes":{},"Error":""}'


def filter_request() -> dict:
    return json.loads(fixture_bytes(FILTER_REQUEST))


def store(body: bytes | None = None, response: bytes | None = None, **fields) -> Call:
    record([make_trace(body=body, response=response, **fields)])
    return Call.objects.order_by("-id").first()


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def get(client: Client, path: str, status: int = 200):
    """The answer, its streamed content read whole (a stream that fails partway raises here)."""
    response = client.get(path)
    if response.streaming:
        response = HttpResponse(b"".join(response.streaming_content), status=response.status_code)
    assert response.status_code == status, (path, response.status_code, response.content[:300])
    return response


# --- 1. a raw record nested too deep for any decoder ------------------------------------------

DEEP = b'{"Pod": ' + nested(5000) + b"}"


@pytest.mark.parametrize("which", ["request", "response"])
def test_a_raw_record_nested_too_deep_is_shown_and_copied_out_as_text(which):
    call = store(**{"body" if which == "request" else "response": DEEP})
    assert any(f["kind"] == f"undecodable-{'reply' if which == 'response' else which}" for f in call.findings)
    client = viewer()

    page = get(client, f"/calls/{call.pk}/").content.decode()
    assert "[[[[" in page

    assert get(client, f"/api/calls/{call.pk}/{which}?pretty=1").content == DEEP  # as text, not indented
    fixture = json.loads(get(client, f"/api/calls/{call.pk}/fixture").content)
    carried = fixture["request_base64"] if which == "request" else fixture["response"]["body_base64"]
    assert base64.b64decode(carried) == DEEP

    lines = get(client, "/api/fixtures/").content.splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["call"]["id"] == call.pk


# --- 2. nested just under the recorder's limit: stored as an ok call ---------------------------


def test_a_call_nested_just_under_the_recorders_limit_is_shown():
    """Whether a depth decodes depends on the stack under the decoder, so store a range of
    depths around the recorder's limit: each one it kept as an ok call must render."""
    kept = []
    for depth in range(880, 1000, 8):
        args = filter_request()
        args["Pod"]["metadata"]["name"] = f"deep-{depth}"
        args["Pod"]["spec"]["deep"] = "DEEP"
        body = json.dumps(args).encode().replace(b'"DEEP"', nested(depth))
        call = store(body)
        if call.outcome == "ok" and not call.findings:
            kept.append(call)
    assert kept, "the recorder kept none of these depths as an ok call"
    client = viewer()
    for call in kept:  # each shown indented, or as received with the reason
        page = get(client, f"/calls/{call.pk}/").content.decode()
        assert "&quot;Pod&quot;: {" in page or "nested too deep to indent here" in page
        page = get(client, f"/pods/{call.pod_namespace}/{call.pod_name}/").content.decode()
        assert "vision-pipeline" in page or f"call {call.pk}</a> (filter) could not be read here" in page
        fixture = json.loads(get(client, f"/api/calls/{call.pk}/fixture").content)
        assert base64.b64decode(fixture["request_base64"]) == request_of(call).data if "request_base64" in fixture \
            else fixture["request"]["Pod"]["metadata"]["name"] == call.pod_name
    lines = get(client, "/api/fixtures/").content.splitlines()
    assert sorted(json.loads(line)["call"]["id"] for line in lines) == sorted(Call.objects.values_list("id", flat=True))


# --- 3. a lone UTF-16 surrogate escape ----------------------------------------------------------

SURROGATE_REPLY = b'{"NodeNames":[],"Error":"x \\ud800"}'


def test_a_lone_surrogate_escape_is_shown_as_its_escape():
    call = store(response=SURROGATE_REPLY)
    client = viewer()

    page = get(client, f"/calls/{call.pk}/").content.decode()
    assert '&quot;Error&quot;: &quot;x \\ud800&quot;' in page

    pretty = get(client, f"/api/calls/{call.pk}/response?pretty=1").content.decode()
    assert json.loads(pretty) == json.loads(SURROGATE_REPLY)
    assert get(client, f"/api/calls/{call.pk}/response").content == SURROGATE_REPLY


def test_a_fixture_with_a_lone_surrogate_escape_gives_back_its_request():
    from extproxy.copyout import fixture_request_bytes

    body = fixture_bytes(FILTER_REQUEST).replace(b'"vision-pipeline"', b'"vision \\udc00"')
    call = store(body)
    fixture = json.loads(get(viewer(), f"/api/calls/{call.pk}/fixture").content)
    assert fixture["request"]["Pod"]["metadata"]["labels"]["app.kubernetes.io/part-of"] == "vision \udc00"
    assert json.loads(fixture_request_bytes(fixture)) == fixture["request"]


def test_a_pod_page_shows_a_lone_surrogate_in_a_label_or_a_bound_node_as_the_scheduler_read_it():
    body = fixture_bytes(FILTER_REQUEST).replace(b'"vision-pipeline"', b'"vision \\udc00"')
    filtered = store(body, OK_REPLY)
    client, path = viewer(), f"/pods/{filtered.pod_namespace}/{filtered.pod_name}/"
    assert "<dd>vision \ufffd</dd>" in get(client, path).content.decode()
    bind = json.dumps({"PodName": filtered.pod_name, "PodNamespace": filtered.pod_namespace,
                       "PodUID": filtered.pod_uid, "Node": "n"}).replace('"n"', '"n\\ud800"').encode()
    store(bind, b'{"Error":""}', verb="bind", url="http://gpu/scheduler/bind")
    assert "n\ufffd" in get(client, path).content.decode()


# --- 4. pod names and namespaces any character long -------------------------------------------


def pod_request(namespace: str, name: str) -> bytes:
    args = filter_request()
    args["Pod"]["metadata"].update(namespace=namespace, name=name)
    return json.dumps(args).encode()


def pending_filter(namespace: str, name: str) -> Call:
    """A filter that left no node: the pod is pending, on /pending/ and among the findings."""
    return store(pod_request(namespace, name), b'{"NodeNames":[],"FailedNodes":{},"Error":"no room"}')


@pytest.mark.parametrize("namespace, name", [
    ("default", "new\nline"), ("a/b", "c"), ("", "no-namespace"), ("ns", "x/y/"), ("ns", "50%25 ?#"),
    # dot segments, which a browser resolves before asking ("a/../b" would be pod "b")
    ("ns", "a/../b"), ("ns", "a/./b"), ("..", "p"), (".", "p"), ("ns", ".."), ("ns", "."),
    ("-", "dash"), ("%2D", "x"), ("%", "%"),
])
def test_every_pod_link_leads_to_its_pod(namespace, name):
    call = pending_filter(namespace, name)
    assert (call.pod_namespace, call.pod_name) == (namespace, name)
    client = viewer()
    links = set()
    for path in (f"/calls/{call.pk}/", "/backends/", "/pending/"):
        page = get(client, path).content.decode()
        found = {html.unescape(h).split("?")[0] for h in re.findall(r'href="(/pods/[^"]*)"', page)}
        assert found, f"no pod link on {path}"
        links |= found
    assert len(links) == 1, links
    # Followed as a browser follows it: dot segments resolved (urljoin does as browsers do).
    followed = urlsplit(urljoin(f"http://testserver/calls/{call.pk}/", links.pop())).path
    page = get(client, followed).content.decode()
    assert f'<span class="podname">{html.escape(namespace)}/{html.escape(name)}</span>' in page
    assert "no room" in page  # this pod's attempt, not an empty page


def test_a_call_without_a_pod_links_to_no_pod():
    call = store(b'{"Pod": null, "NodeNames": ["node-01"]}', OK_REPLY)
    assert call.pod_name == ""
    page = get(viewer(), f"/calls/{call.pk}/").content.decode()
    assert "/pods/" not in page and "no pod" in page


# --- 5. a pod spec of the wrong type -----------------------------------------------------------


@pytest.fixture
def binder_config(tmp_path, write_config):
    """A backend that binds and manages a resource: the pod page asks whether it is interested."""
    from extproxy.config import load_config
    from extproxy.engine import Engine, set_engine
    from extproxy.recording import SpoolRecorder
    from extproxy.recording.spool import SpoolSettings

    config = load_config(write_config({"backends": [{
        "name": "gpu", "urlPrefix": "http://127.0.0.1:9/scheduler", "filterVerb": "filter", "bindVerb": "bind",
        "nodeCacheCapable": True, "managedResources": [{"name": "example.com/gpu"}]}]}))
    previous = set_engine(Engine(config, SpoolRecorder(config.recording, SpoolSettings(root=tmp_path / "spool"))))
    yield config
    set_engine(previous)


@pytest.mark.parametrize("spec", ["s", {"containers": ["a"]}, {"containers": "a"}, {"containers": [{"resources": "r"}]},
                                  {"containers": [{"resources": {"requests": ["example.com/gpu"]}}]}, 7, None])
def test_a_pod_spec_of_the_wrong_type_is_told_not_requesting(binder_config, spec):
    args = filter_request()
    args["Pod"]["spec"] = spec
    call = store(json.dumps(args).encode(), OK_REPLY)
    assert call.outcome == "ok", call.findings
    page = get(viewer(), f"/pods/{call.pod_namespace}/{call.pod_name}/").content.decode()
    assert '<span class="badge">pending</span>' in page
    assert not binder_config.backends[0].interested_in(args["Pod"])


# --- 6. query parameters at the edges of their types: a 400 naming the parameter ------------

LATENCY_PATHS = ["/api/calls/", "/feed/calls/", "/feed/attempts/", "/api/export/", "/api/fixtures/"]


@pytest.mark.parametrize("path", LATENCY_PATHS)
@pytest.mark.parametrize("value", ["1e17", "9.3e15", "1e49", "31536000001", "inf", "nan"])
def test_a_latency_past_any_call_is_a_400_naming_it(path, value):
    store()
    response = get(viewer(), f"{path}?latency_above={value}", status=400)
    assert b"latency_above" in response.content


@pytest.mark.parametrize("path", LATENCY_PATHS)
def test_a_latency_of_a_day_still_filters(path):
    store()
    get(viewer(), f"{path}?latency_above=86400000")


@pytest.mark.parametrize("keys", ["call-9223372036854775808", "call-99999999999999999999999", "{key},call-2**64",
                                  "call-\u00b2"])
def test_an_attempt_key_past_64_bits_is_never_a_500(keys):
    call = store()
    key = call.attempt or f"call-{call.pk}"
    found = get(viewer(), f"/feed/attempts/?keys={keys.replace('{key}', key).replace('2**64', str(2**64))}").json()
    assert [a["calls"] for a in found["results"]] == ([[call.pk]] if "{key}" in keys else [])


@pytest.mark.parametrize("query", ["since=9999-12-31T23:59:59-23:59", "until=0001-01-01T00:00:00%2B23:59"])
def test_an_audit_date_off_the_calendar_in_utc_is_said_on_the_page(query):
    client = viewer()
    page = get(client, f"/audit/?{query}").content.decode()
    assert "out of range once moved to UTC" in page
    name = query.split("=")[0]
    for path in ("/api/audit/", "/api/calls/"):  # the API says it the same way
        assert get(client, f"{path}?{query}", status=400).json() == {name: ["out of range once moved to UTC"]}


@pytest.mark.parametrize("offset", ["99999999999999999999", "9223372036854775808", "-1e3", "x"])
def test_a_replay_items_offset_past_64_bits_is_a_400(offset):
    from extproxy.models import ReplayRun

    run = ReplayRun.objects.create(selector={"call": 1}, target={"kind": "configured"})
    response = get(viewer(), f"/api/replays/{run.pk}/?offset={offset}", status=400)
    assert b"offset" in response.content


# --- 7. the replay-refused page ----------------------------------------------------------------


@pytest.mark.parametrize("form, message", [
    ({"since": "9999-12-31T23:59:59-23:59"}, "out of range once moved to UTC"),
    ({"since": "yesterday"}, "Enter a valid date/time."),
    ({"target_kind": "url", "url": "gopher://<b>x</b>"}, "&lt;b&gt;"),
])
def test_a_refused_replay_says_why_in_plain_words(form, message):
    response = viewer().post("/replays/", form)
    assert response.status_code == 400
    page = response.content.decode()
    assert message in page and "ErrorDetail" not in page and "[" not in page.split('class="errors"')[1].split("</ul>")[0]
