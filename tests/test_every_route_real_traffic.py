"""Every page and endpoint, asked about every kind of call a real kube-scheduler makes.

Pages that worked on small synthetic calls once answered 500 for every full-object record (the
pod page). Here the captured requests of a real kube-scheduler 1.24 (filter, prioritize,
preempt and bind, with Node objects and with node names) go through a real extproxy to
loopback extenders, in the per-backend and the combined form, with a backend that fails nodes
with hostile reasons and one that answers an HTML 500. Then each route that tests/test_roles.py
knows is requested for each call, each combined call's each part, each pod, and with each filter
the listings take, as a superuser: every answer is 200. Replay runs' routes are walked by the
replay tests, which make their runs for real.
"""
from __future__ import annotations

import json
from datetime import timedelta

import pytest
import requests
from django.test import Client
from django.utils import timezone
from django.utils.http import urlencode

from extproxy.models import AuditEvent, Call, Export
from tests.conftest import fixture_bytes, reply
from tests.test_combined import backend, failing, scores
from tests.test_roles import ROUTES, make_user

CAPTURED = "captured-kube-scheduler-1.24/"
HOSTILE = '<script>alert("reason")</script> GPUs busy & "full"'
VERBS = ("filter", "prioritize", "preempt", "bind")
# Routes of replay runs, whose runs these calls do not make.
ELSEWHERE = ("{replay}", "{item}")


def keep_all_victims(handler, body: bytes) -> None:
    """A preempt extender that keeps every node and its victims, answered by UID as Go's are."""
    args = json.loads(body)
    meta = args.get("NodeNameToMetaVictims") or {
        node: {"Pods": [{"UID": pod["metadata"]["uid"]} for pod in victims["Pods"]],
               "NumPDBViolations": victims["NumPDBViolations"]}
        for node, victims in (args.get("NodeNameToVictims") or {}).items()}
    handler.answer(200, json.dumps({"NodeNameToMetaVictims": meta}).encode())


def every_kind_proxy(backend_server, proxy, write_config):
    """extproxy in front of three loopback extenders: `gpu` (every verb; fails nodes with hostile
    reasons), `zone` (filter, prioritize) and `down` (an ignorable filter that answers HTML 500)."""
    gpu = backend_server({"filter": failing({"gpu-node-3": HOSTILE}, {"gpu-node-2": "<b>no zone</b>"}),
                          "prioritize": scores({"gpu-node-1": 7, "cpu-node-1": 2}),
                          "preempt": keep_all_victims, "bind": reply(200, b'{"Error":""}')})
    zone = backend_server({"filter": failing({"cpu-node-1": "zone <i>b</i> only"}),
                           "prioritize": scores({"cpu-node-1": 9})})
    down = backend_server({"filter": reply(500, "<html><body><h1>502 Bad Gateway</h1></body></html>", "text/html")})
    return proxy(write_config({"backends": [
        backend("gpu", gpu, filterVerb="filter", prioritizeVerb="prioritize", preemptVerb="preempt",
                bindVerb="bind", weight=2),
        backend("zone", zone, filterVerb="filter", prioritizeVerb="prioritize", weight=3),
        backend("down", down, filterVerb="filter", ignorable=True),
    ]}))


def send_every_kind(server) -> int:
    """Every captured request through each form (and the filters to `down`); the calls sent."""
    sent = 0
    for verb in VERBS:
        for cache in ("false", "true"):
            body = fixture_bytes(f"{CAPTURED}{verb}-request.nodecache-{cache}.json")
            for path in (f"/extender/gpu/{verb}", f"/extender/{verb}"):  # per-backend, combined
                answer = requests.post(server.url + path, data=body, timeout=30)
                if path == "/extender/preempt" and cache == "true":
                    # Victims by UID only, for a backend that needs whole Pods: refused, and recorded.
                    assert answer.status_code == 502 and "no full Pod for victim" in answer.text
                else:
                    assert answer.status_code == 200, (path, answer.text[:600])
                sent += 1
            if verb == "filter":
                requests.post(server.url + "/extender/down/filter", data=body, timeout=30)
                sent += 1
    return sent


@pytest.fixture
def recorded(backend_server, proxy, write_config):
    """Every kind of call, recorded; the proxy."""
    server = every_kind_proxy(backend_server, proxy, write_config)
    sent = send_every_kind(server)
    server.flush()
    assert Call.objects.filter(is_replay=False).count() == sent  # every call recorded, no more
    return server


def superuser() -> Client:
    client = Client()
    client.force_login(make_user("superuser"))
    return client


def asked(client: Client, url: str, not_called: bool = False) -> None:
    """200; for the bodies of a part extproxy did not send (the node cache lacked the Nodes it
    needed), 404 saying so."""
    response = client.get(url)
    if not_called and url.endswith(("/request", "/response")):
        assert response.status_code == 404 and b"did not call backend" in response.content, url
        return
    assert response.status_code == 200, (url, response.status_code, response.content[:400])
    if response.get("Content-Type", "").startswith("text/html"):
        # Nothing a pod or a backend said arrives as markup.
        assert b"<script>alert(" not in response.content, url


def test_every_route_answers_for_every_kind_of_recorded_call(recorded):
    client = superuser()
    since = (timezone.now() - timedelta(hours=1)).isoformat()
    until = (timezone.now() + timedelta(seconds=1)).isoformat()
    export = client.get("/api/export/?" + urlencode({"format": "ndjson", "since": since, "until": until}))
    assert export.status_code == 200
    exported = [json.loads(line) for line in b"".join(export.streaming_content).splitlines()]
    assert exported, "the export holds the calls"
    values = {"audit": AuditEvent.objects.order_by("-pk").first().pk,
              "export": Export.objects.order_by("-pk").first().export_id}

    calls = list(Call.objects.filter(is_replay=False).order_by("pk"))
    kinds = {(c.verb, c.form, c.outcome) for c in calls}
    assert {v for v, _, _ in kinds} == set(VERBS) and {f for _, f, _ in kinds} == {"per-backend", "combined"}
    assert any(outcome != "ok" for _, _, outcome in kinds)  # the HTML 500
    pods = {(c.pod_namespace, c.pod_name) for c in calls}
    parts = [(c.pk, part.pk, part.http_status is None) for c in calls if c.form == "combined"
             for part in c.backend_calls.all()]
    assert parts and not all(not_called for _, _, not_called in parts)

    for route, (example, _allowed) in ROUTES.items():
        if any(key in example for key in ELSEWHERE):
            continue
        if "{combined}" in example:
            for call, part, not_called in parts:
                asked(client, example.format(combined=call, part=part), not_called)
            continue
        elif "{call}" in example:
            urls = [example.format(call=call.pk) for call in calls]
        elif route.startswith("pods/"):
            urls = [f"/pods/{namespace}/{name}/" for namespace, name in pods]
        else:
            urls = [example.format(**values)]
        for url in urls:
            asked(client, url)

    # The call page's parts loaded on demand: each body, of each call and part, and the node
    # table's search and pages as the page's htmx asks for them.
    fragment = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "call-nodes"}
    for call in calls:
        for which in ("request", "response"):
            asked(client, f"/calls/{call.pk}/?body={which}")
        for query in ("?node=gpu-node-3", "?node=cpu&page=2", "?node=%3Cscript%3E"):
            asked(client, f"/calls/{call.pk}/{query}")
            assert client.get(f"/calls/{call.pk}/{query}", **fragment).status_code == 200
    for call, part, _not_called in parts:
        for which in ("request", "response"):
            asked(client, f"/calls/{call}/?part={part}&body={which}")

    # Each pod's node table searched, as its page and its htmx fragment.
    for namespace, name in pods:
        for query in ("?node=gpu-node-3", "?node=cpu&page=2", "?node=%3Cscript%3E"):
            asked(client, f"/pods/{namespace}/{name}/{query}")
            table = client.get(f"/pods/{namespace}/{name}/{query}", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="node-table")
            assert table.status_code == 200 and b"<script>" not in table.content

    # Each pod's page names it, whatever its calls held.
    for namespace, name in pods:
        assert name.encode() in client.get(f"/pods/{namespace}/{name}/").content


def test_every_listing_filter_answers_on_real_traffic(recorded):
    client = superuser()
    calls = list(Call.objects.filter(is_replay=False))
    nodes = {"gpu-node-1", "gpu-node-2", "gpu-node-3", "cpu-node-1"}
    filters: list[dict[str, str]] = [{}]
    filters += [{"pod": f"{c.pod_namespace}/{c.pod_name}"} for c in calls]
    filters += [{"verb": verb} for verb in VERBS]
    filters += [{"backend": name} for name in ("gpu", "zone", "down", "combined")]
    filters += [{"outcome": outcome} for outcome in {c.outcome for c in calls}]
    filters += [{"node": node, "verdict": verdict} for node in nodes
                for verdict in ("passed", "failed", "unresolvable", "scored")]
    filters += [{"error": "502"}, {"error": "<h1>"}, {"latency_above": "0"}, {"attempt": calls[0].attempt},
                {"ids": ",".join(str(c.pk) for c in calls)}, {"replays": "include"}]
    for params in filters:
        query = "?" + urlencode(params)
        for listing in ("/api/calls/", "/feed/calls/", "/feed/attempts/", "/"):
            asked(client, listing + query)
    # The filters that name a node find the calls that judged it, with the verdict they gave.
    failed = client.get("/api/calls/?" + urlencode({"node": "gpu-node-3", "verdict": "failed"})).json()["results"]
    assert failed and {c["verb"] for c in failed} == {"filter"}
    unresolvable = client.get("/api/calls/?" + urlencode({"node": "gpu-node-2", "verdict": "unresolvable"})).json()
    assert unresolvable["results"]


def test_the_call_pages_show_what_each_backend_said_as_text(recorded):
    client = superuser()
    combined_filters = {call.pk: call for call in Call.objects.filter(form="combined", verb="filter", is_replay=False)}
    assert len(combined_filters) == 2  # Node objects and node names
    for call in combined_filters.values():
        page = client.get(f"/calls/{call.pk}/").content.decode()
        # Each part's reply, as the page loads it when opened.
        page += "".join(client.get(f"/calls/{call.pk}/?part={part.pk}&body=response").content.decode()
                        for part in call.backend_calls.all())
        if call.outcome == "ok":  # Node objects: every backend was asked, and their reasons are shown as text
            assert "&lt;script&gt;alert(" in page and "zone &lt;i&gt;b&lt;/i&gt; only" in page
            assert "&lt;b&gt;no zone&lt;/b&gt;" in page
        else:  # node names, to backends that need Node objects, with no node cache to take them from
            assert "no Node object for 4 node(s)" in page
