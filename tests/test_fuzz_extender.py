"""Fuzzing every extender endpoint, per-backend and combined, through a real server.

Hypothesis sends malformed JSON, wrong types, deep nesting, huge arrays, invalid UTF-8,
mutated real requests, wrong methods and content types. Every answer must come (no hang: a
client timeout fails the test), none may be a 5xx or an "internal error", the server must still
answer a well-formed call afterwards, and every request must be accounted for: recorded as a
call, or counted in extproxy_rejected_requests_total. Example counts are modest on purpose
(the suite runs on small machines); `--hypothesis-seed` reproduces a failure.
"""
from __future__ import annotations

import json

import pytest
import requests
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from extproxy import metrics
from tests.conftest import fixture_bytes

VERBS = ("filter", "prioritize", "bind", "preempt")
REPLIES = {  # a backend that answers every call with a valid reply, whatever it was sent
    "filter": {"Nodes": None, "NodeNames": [], "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""},
    "prioritize": [],
    "bind": {"Error": ""},
    "preempt": {"NodeNameToMetaVictims": {}},
}
REAL_REQUESTS = [fixture_bytes(name) for name in (
    "filter-request.nodecache-true.json", "filter-request.nodecache-false.json",
    "prioritize-request.nodecache-true.json", "bind-request.json",
    "preempt-request.nodecache-true.json", "preempt-request.nodecache-false.json",
)]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(
        st.sampled_from(["Pod", "Nodes", "NodeNames", "PodName", "PodNamespace", "PodUID", "Node", "items",
                         "metadata", "NodeNameToVictims", "NodeNameToMetaVictims", "Pods", "pod", "nodenames"])
        | st.text(max_size=8), inner, max_size=5),
    max_leaves=20,
)


@st.composite
def mutated_real_request(draw) -> bytes:
    body = draw(st.sampled_from(REAL_REQUESTS))
    how = draw(st.sampled_from(["truncate", "bad-utf8", "retype", "splice"]))
    if how == "truncate":
        return body[: draw(st.integers(0, len(body)))]
    if how == "bad-utf8":
        at = draw(st.integers(0, len(body)))
        return body[:at] + draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80\x80"])) + body[at:]
    data = json.loads(body)
    key = draw(st.sampled_from(sorted(data)))
    if how == "retype":
        data[key] = draw(json_values)
    else:
        data[draw(st.sampled_from(["Pod", "NodeNames", "Node", "Nodes"]))] = data[key]
    return json.dumps(data).encode()


bodies = st.one_of(
    st.binary(max_size=300),
    json_values.map(lambda v: json.dumps(v).encode()),
    mutated_real_request(),
    st.integers(100, 200_000).map(lambda n: b"[" * n + b"]" * n),  # nesting far past any decoder's depth
    st.integers(100, 3_000).map(lambda n: b'{"Pod":' + b'{"a":' * n + b"1" + b"}" * n + b"}"),
    st.integers(100, 3_000).map(lambda n: b'{"Pod":{"spec":' + b"[" * n + b"]" * n + b"},\"NodeNames\":[]}"),
    st.integers(1_000, 200_000).map(lambda n: b'{"Pod":{},"NodeNames":[' + b",".join([b'"n"'] * n) + b"]}"),
    st.integers(1_000, 50_000).map(lambda n: b'{"Pod":{},"NodeNames":[' + b",".join([b"1"] * n) + b"]}"),
)
DEEP_OBJECT = b'{"Pod":' + b'{"a":' * 5_000 + b"1" + b"}" * 5_000 + b"}"
DEEP_ARRAY = b"[" * 100_000 + b"]" * 100_000
INVALID_UTF8 = b'{"Pod": {"metadata": {"name": "\xff\xfe", "uid": "u"}}, "NodeNames": ["a"], "PodName": "\xc3\x28"}'
HUGE_ARRAY = b'{"Pod":{},"NodeNames":[' + b",".join([b'"node"'] * 150_000) + b"]}"
methods = st.sampled_from(["POST"] * 6 + ["GET", "PUT", "DELETE", "PATCH"])
content_types = st.sampled_from(["application/json", "text/plain", "application/x-www-form-urlencoded",
                                 "multipart/form-data; boundary=x", None])


def rejected_total() -> float:
    return sum(sample.value for family in metrics.REJECTED.collect() for sample in family.samples
               if sample.name == "extproxy_rejected_requests_total")


@pytest.fixture
def fuzz_server(backend_server, proxy, write_config, settings):
    settings.EXTPROXY_MAX_BODY_BYTES = 1024 * 1024  # a real bound, met by some of the huge arrays

    def behave(handler, _body):
        handler.answer(200, json.dumps(REPLIES[handler.path.rsplit("/", 1)[-1]]).encode())

    backend = backend_server({"*": behave})
    return proxy(write_config({"backends": [{
        "name": "gpu", "urlPrefix": f"{backend.url}/scheduler", "filterVerb": "filter", "prioritizeVerb": "prioritize",
        "bindVerb": "bind", "preemptVerb": "preempt", "weight": 1, "nodeCacheCapable": True, "httpTimeout": "5s",
    }]}))


@pytest.mark.parametrize("form", ["per-backend", "combined"])
def test_it_survives_fuzzed_requests_and_accounts_for_every_one(form, fuzz_server, transactional_db):
    from extproxy.models import Call

    server = fuzz_server
    prefix = "/extender/gpu/" if form == "per-backend" else "/extender/"
    paths = st.sampled_from([prefix + verb for verb in VERBS] * 3 + [prefix + "nope", prefix + "filter/", "/extender/"])
    session = requests.Session()
    sent = {"served": 0, "refused": 0}
    rejected_before = rejected_total()

    def always(fuzz):
        """The cases the issue names, for every verb, on top of what Hypothesis draws."""
        for verb in VERBS:
            for body in (DEEP_OBJECT, DEEP_ARRAY, INVALID_UTF8, HUGE_ARRAY, b"", b"null", b"[]"):
                fuzz = example(path=prefix + verb, body=body, method="POST", content_type="application/json")(fuzz)
        return fuzz

    @settings(max_examples=60, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @always
    @given(path=paths, body=bodies, method=methods, content_type=content_types)
    def one(path, body, method, content_type):
        headers = {"Content-Type": content_type} if content_type else {}
        response = session.request(method, server.url + path, data=body, headers=headers, timeout=60)
        assert response.status_code < 500, (path, method, response.status_code, response.text[:300])
        assert "internal error" not in response.text, response.text[:300]
        if response.status_code in (404, 405, 408, 413):
            sent["refused"] += 1
            assert response.json()["error"]  # a 4xx with a reason
        else:
            sent["served"] += 1

    one()

    # Still serving, and every request is accounted for.
    ok = session.post(server.url + prefix + "filter", data=fixture_bytes("filter-request.nodecache-true.json"), timeout=30)
    assert ok.status_code == 200 and ok.json()["Error"] == ""
    server.flush()
    recorded = Call.objects.filter(backend="gpu" if form == "per-backend" else "combined").count()
    assert recorded + server.recorder.dropped == sent["served"] + 1
    assert rejected_total() - rejected_before == sent["refused"]
