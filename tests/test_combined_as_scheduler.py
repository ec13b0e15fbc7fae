"""The combined form decides what kube-scheduler would decide calling the backends itself, in the
places where that rests on more than the sum: each backend's whole httpTimeout, which hosts the
prioritize answer lists (the scheduler's tie-breaker), int64 totals, the entry's
nodeCacheCapable beside a bind-only backend, and an error that names the backend that failed (or
says the proxy did not call it).
Real backends on loopback behind the real /extender/<verb> endpoints; captured 1.24 bodies."""
from __future__ import annotations

import json
import socket

import pytest
import requests
from django.contrib.auth.models import User
from django.test import Client

from extproxy import kube
from extproxy import protocol as p
from extproxy.protocol.objects import identity_of
from extproxy.config import BackendConfig
from extproxy.semantics import combined_entry
from tests.conftest import fixture_bytes, fixture_json, pass_all, slow, write_kubeconfig
from tests.test_combined import backend, combined_call, post
from tests.test_nodecache import NodeAPI

FULL = "captured-kube-scheduler-1.24/filter-request.nodecache-false.json"
PRIORITIZE = "captured-kube-scheduler-1.24/prioritize-request.nodecache-false.json"
BIND = "captured-kube-scheduler-1.24/bind-request.nodecache-false.json"


def listing(table: dict[str, int]):
    """A prioritizer that lists only the hosts in `table`, as an extender may."""
    def behave(handler, body):
        handler.answer(200, json.dumps([{"Host": h, "Score": s} for h, s in table.items()]).encode())

    return behave


def node_names(request: dict) -> list[str]:
    return [n["metadata"]["name"] for n in request["Nodes"]["items"]]


def test_each_backend_has_its_whole_http_timeout(backend_server, proxy, write_config):
    """The scheduler's client waits the whole httpTimeout; the per-backend form's margin (to
    answer before the scheduler gives up on the proxy) is not needed inside the combined entry,
    whose own timeout covers the chain's sum plus 1 s."""
    late = backend_server({"filter": slow(1.9, pass_all)})
    server = proxy(write_config({"backends": [backend("late", late, filterVerb="filter", httpTimeout="2s")]}))
    request = fixture_json(FULL)
    answer = post(server, "filter", json.dumps(request).encode()).json()
    assert answer["Error"] == ""
    assert [n["metadata"]["name"] for n in answer["Nodes"]["items"]] == node_names(request)


def test_a_backend_past_its_timeout_or_unreachable_is_named_in_the_error(backend_server, proxy, write_config):
    """As Go's client names the extender's URL (`Post "<url>": ...`, a password as ***), so the
    FailedScheduling event says which backend failed."""
    too_late = backend_server({"filter": slow(2.6, pass_all)})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    server = proxy(write_config({"backends": [
        backend("slow", too_late, filterVerb="filter", httpTimeout="2s"),
        {"name": "gone", "urlPrefix": f"http://ops:hunter2@127.0.0.1:{closed}/gone", "filterVerb": "filter",
         "bindVerb": "bind", "httpTimeout": "2s"},
    ]}))
    answer = post(server, "filter", fixture_bytes(FULL)).json()
    assert answer["Error"] == f'Post "{too_late.url}/slow/filter": no answer within 2s'
    bound = post(server, "bind", fixture_bytes(BIND)).json()
    assert bound["Error"].startswith(f'Post "http://ops:***@127.0.0.1:{closed}/gone/bind": ') and "hunter2" not in bound["Error"]


@pytest.mark.parametrize("parallel", [False, True])
def test_a_backend_the_proxy_could_not_call_is_not_named_as_a_failed_exchange(
        backend_server, proxy, write_config, admin_client, tmp_path, monkeypatch, parallel):
    """Registered with names, the proxy takes a full-object backend's Nodes from its node cache;
    a node the cache does not know means no request, so no call. The Error said
    `Post "<url>": no Node object ...`, Go's words for an exchange with that backend that failed:
    the operator reading the FailedScheduling event blamed a backend that never saw the call."""
    names = json.loads(fixture_bytes("filter-request.nodecache-true.json"))["NodeNames"]
    known = [n for n in fixture_json("filter-request.nodecache-false.json")["Nodes"]["items"]
             if n["metadata"]["name"] != names[-1]]
    api = NodeAPI(known)
    monkeypatch.setenv("KUBECONFIG", write_kubeconfig(tmp_path / "kubeconfig", api.port))
    kube.reset()
    try:
        full = backend_server({"filter": pass_all})
        server = proxy(write_config({"parallelFilter": parallel, "backends": [backend("full", full, filterVerb="filter")]}))
        server.engine._combined.node_cache().wait_ready(10)

        answer = post(server, "filter", fixture_bytes("filter-request.nodecache-true.json")).json()

        assert full.received == []
        assert answer["Error"] == (
            f"extproxy: backend full was not called: no Node object for 1 node(s) (e.g. {names[-1]}) in the node cache"
        )
        call = combined_call(admin_client, server)
        [child] = call["backend_calls"]
        assert child["outcome"] == "error" and "not-called" in [f["kind"] for f in child["findings"]]
        viewer = Client()
        viewer.force_login(User.objects.get(username="root"))  # admin_client's user, by session
        page = viewer.get(f"/calls/{call['id']}/").content.decode()
        part = page.split('<section class="body backend-part">', 1)[1].split("</section>", 1)[0]
        # No empty request and reply boxes headed "the bytes as received": nothing was sent.
        assert "Not called: nothing was sent to this backend" in part and "in the node cache" in part
        assert part.count("did not call") == 0, part  # "Not called" is said once, then why
        assert "bytes as received" not in part and "download request" not in part
    finally:
        kube.reset()
        api.close()


def test_prioritize_lists_only_the_hosts_some_backend_listed(backend_server, proxy, write_config):
    """kube-scheduler gives a host an extender listed a random tie-breaker and one none listed
    0, so listing every feasible host (with 0) changed which host wins a tie."""
    request = fixture_json(PRIORITIZE)
    names = node_names(request)
    some = {names[0]: 0, names[1]: 3}
    a, b = backend_server({"prioritize": listing(some)}), backend_server({"prioritize": lambda h, body: h.answer(500, b"")})
    server = proxy(write_config({"backends": [
        backend("a", a, prioritizeVerb="prioritize", weight=2),
        backend("b", b, prioritizeVerb="prioritize", weight=5, ignorable=True),  # failed: lists nothing
    ]}))
    answer = post(server, "prioritize", json.dumps(request).encode()).json()
    assert answer == [{"Host": names[0], "Score": 0}, {"Host": names[1], "Score": 6}]


def test_prioritize_lists_every_host_when_an_interested_backend_has_no_prioritize_verb(
        backend_server, proxy, write_config):
    """The scheduler's client answers for such an extender itself: every node, Score 0."""
    request = fixture_json(PRIORITIZE)
    names = node_names(request)
    a, f = backend_server({"prioritize": listing({names[1]: 3})}), backend_server({"filter": pass_all})
    server = proxy(write_config({"backends": [
        backend("a", a, prioritizeVerb="prioritize", weight=2), backend("f", f, filterVerb="filter"),
    ]}))
    answer = post(server, "prioritize", json.dumps(request).encode()).json()
    assert answer == [{"Host": n, "Score": 6 if n == names[1] else 0} for n in names]


def test_prioritize_totals_wrap_as_go_int64(backend_server, proxy, write_config):
    """A total past int64 failed the scheduler's decoding of the whole answer, every backend's
    scores with it; the scheduler's own sum wraps, and so does the answer (congruent mod 2^64)."""
    request = fixture_json(PRIORITIZE)
    names = node_names(request)
    a = backend_server({"prioritize": listing({names[0]: 2**62 + 1})})
    b = backend_server({"prioritize": listing({names[1]: 10})})
    server = proxy(write_config({"backends": [
        backend("a", a, prioritizeVerb="prioritize", weight=2), backend("b", b, prioritizeVerb="prioritize", weight=1),
    ]}))
    answer = requests.post(f"{server.url}/extender/prioritize", data=json.dumps(request).encode(), timeout=30).json()
    total = {h["Host"]: h["Score"] for h in answer}
    assert total == {names[0]: 2 - 2**63, names[1]: 10}
    assert all(-(2**63) <= s < 2**63 for s in total.values())
    go = (2 * (2**62 + 1) * 10) % 2**64  # what the scheduler adds calling `a` itself, wrapped
    assert (total[names[0]] * 10) % 2**64 == go


def test_a_bind_only_backend_does_not_make_the_entry_send_full_node_objects():
    """Its nodeCacheCapable (false by default) says nothing: a bind sends no nodes. Counting it
    registered the entry for full objects, so the scheduler took the filter's answer as Node
    objects where the names-only filter's names would have kept its own."""
    gpu = BackendConfig(name="gpu", url_prefix="http://gpu", filter_verb="filter", prioritize_verb="prioritize",
                        node_cache_capable=True)
    binder = BackendConfig(name="binder", url_prefix="http://binder", bind_verb="bind")
    entry = combined_entry([gpu, binder])
    assert isinstance(entry, dict) and entry["nodeCacheCapable"] is True and entry["bindVerb"] == "bind"
    full_prioritizer = BackendConfig(name="p", url_prefix="http://p", prioritize_verb="prioritize")
    assert combined_entry([gpu, binder, full_prioritizer])["nodeCacheCapable"] is False


def claiming(extra: str):
    """A names-mode filter backend that passes what it was sent and a name it was not sent."""
    def behave(handler, body):
        names = json.loads(body)["NodeNames"]
        handler.answer(200, json.dumps({"NodeNames": names + [extra], "FailedNodes": {}, "Error": ""}).encode())

    return behave


def adding(extra: str):
    """A full-object filter backend that passes what it was sent and a Node it was not sent."""
    def behave(handler, body):
        items = json.loads(body)["Nodes"]["items"]
        added = json.loads(json.dumps(items[0]))
        added["metadata"]["name"] = extra
        result = {"Nodes": {"metadata": {}, "items": items + [added]}, "NodeNames": None, "FailedNodes": {}, "Error": ""}
        handler.answer(200, json.dumps(result).encode())

    return behave


@pytest.mark.parametrize("request_file", [FULL, "filter-request.nodecache-true.json"])
@pytest.mark.parametrize("extra, quoted", [("node-99", '"node-99"'), ('node "9\\9"', '"node \\"9\\\\9\\""')])
def test_a_names_backend_claiming_a_node_it_was_not_sent_fails_as_the_scheduler_fails_it(
        backend_server, proxy, write_config, request_file, extra, quoted):
    """extender.go: `extender %q claims a filtered node %q which is not found in the input node
    list`, with Go's quoting of the urlPrefix and the name; the scheduler fails the attempt."""
    claims = backend_server({"filter": claiming(extra)})
    after = backend_server({"filter": pass_all})
    server = proxy(write_config({"backends": [
        backend("claims", claims, filterVerb="filter", nodeCacheCapable=True),
        backend("after", after, filterVerb="filter", nodeCacheCapable=True),
    ]}))
    answer = post(server, "filter", fixture_bytes(request_file)).json()
    expected = f'extender "{claims.url}/claims" claims a filtered node {quoted} which is not found in the input node list'
    assert answer["Error"] == expected and after.received == []


@pytest.mark.parametrize("then_names, parallel", [(False, False), (True, False), (True, True)])
def test_a_node_a_full_object_backend_returns_unsent_is_taken_as_the_scheduler_takes_it(
        backend_server, proxy, write_config, tmp_path, monkeypatch, then_names, parallel):
    """The scheduler takes a full-object backend's returned Nodes unchecked (§4.3), a name it never
    sent included. Registered with names, the proxy answered that name in NodeNames, which the
    scheduler refuses (`extender "<proxy>" claims a filtered node ...`): it answers the objects."""
    request = json.loads(fixture_bytes("filter-request.nodecache-true.json"))
    nodes = fixture_json("filter-request.nodecache-false.json")["Nodes"]["items"]
    api = NodeAPI(nodes)
    monkeypatch.setenv("KUBECONFIG", write_kubeconfig(tmp_path / "kubeconfig", api.port))
    kube.reset()
    try:
        full, names = backend_server({"filter": adding("node-99")}), backend_server({"filter": pass_all})
        backends = [backend("full", full, filterVerb="filter")]
        if then_names:  # a names-mode backend after it is sent node-99 and keeps it
            backends.append(backend("names", names, filterVerb="filter", nodeCacheCapable=True))
        server = proxy(write_config({"parallelFilter": parallel, "backends": backends}))
        server.engine._combined.node_cache().wait_ready(10)

        answer = post(server, "filter", json.dumps(request).encode()).json()

        assert answer["Error"] == "" and answer["NodeNames"] is None
        assert [n["metadata"]["name"] for n in answer["Nodes"]["items"]] == request["NodeNames"] + ["node-99"]
        if then_names and not parallel:  # sent node-99 by the chain (in parallel: kept, never seen)
            assert json.loads(names.received[0][1])["NodeNames"][-1] == "node-99"
    finally:
        kube.reset()
        api.close()


def answering_objects(handler, body):
    """A names-mode filter backend that answers `Nodes` (objects it makes) instead of NodeNames:
    every name it was sent but the last, which fails."""
    names = json.loads(body)["NodeNames"]
    items = [{"metadata": {"name": n, "labels": {"example.com/checked": "yes"}}} for n in names[:-1]]
    result = {"Nodes": {"metadata": {}, "items": items}, "NodeNames": None, "FailedNodes": {names[-1]: "busy"}, "Error": ""}
    handler.answer(200, json.dumps(result).encode())


def scheduler_calling(chain: list[tuple[str, str]], request: dict) -> tuple[list[str], list[dict] | None]:
    """What extender.go's Filter leaves the scheduler with, calling names-mode extenders (urls, in
    turn) itself: the feasible names and, once an extender answered Nodes, those objects (None:
    its own). It reads NodeNames when set, else takes the returned Nodes unchecked."""
    names, held = request["NodeNames"], None
    for url in chain:
        reply = requests.post(url, data=json.dumps({**request, "Nodes": None, "NodeNames": names}), timeout=30).json()
        if reply["NodeNames"] is not None:
            by_name = {n["metadata"]["name"]: n for n in held or ()}
            names = reply["NodeNames"]
            held = [by_name[n] for n in names] if held is not None else None
        elif reply["Nodes"] is not None:
            held = reply["Nodes"]["items"]
            names = [n["metadata"]["name"] for n in held]
        else:
            names, held = [], None
    return names, held


@pytest.mark.parametrize("parallel", [False, True])
def test_a_names_backend_answering_node_objects_leaves_the_scheduler_with_them(
        backend_server, proxy, write_config, parallel):
    """extender.go reads a nodeCacheCapable extender's NodeNames when set and otherwise takes its
    `Nodes` unchecked: the returned objects replace the scheduler's own. Every backend names-only,
    the entry is registered with names, and the proxy answered NodeNames when every returned name
    was one it was sent, so the scheduler kept its own objects where calling them it held these."""
    objects, after = backend_server({"filter": answering_objects}), backend_server({"filter": pass_all})
    server = proxy(write_config({"parallelFilter": parallel, "backends": [
        backend("objects", objects, filterVerb="filter", nodeCacheCapable=True),
        backend("after", after, filterVerb="filter", nodeCacheCapable=True),
    ]}))
    request = json.loads(fixture_bytes("filter-request.nodecache-true.json"))

    answer = post(server, "filter", json.dumps(request).encode()).json()
    direct = scheduler_calling([f"{objects.url}/objects/filter", f"{after.url}/after/filter"], request)

    assert answer["Error"] == "" and answer["FailedNodes"] == {request["NodeNames"][-1]: "busy"}
    # The proxy's answer as the scheduler reads it, registered with names (extender.go again).
    if answer["NodeNames"] is not None:
        taken = (answer["NodeNames"], None)
    else:
        taken = ([n["metadata"]["name"] for n in answer["Nodes"]["items"]], answer["Nodes"]["items"])
    assert taken == direct and direct[1] is not None


def answering_respelled_objects(handler, body):
    """As answering_objects, with ObjectMeta's keys spelled as Go's decoder also takes them
    (encoding/json binds `Metadata` and `Name` to the json tags `metadata` and `name`)."""
    names = json.loads(body)["NodeNames"]
    items = [{"Metadata": {"Name": n, "labels": {"example.com/checked": "yes"}}} for n in names[:-1]]
    result = {"Nodes": {"metadata": {}, "items": items}, "NodeNames": None, "FailedNodes": {names[-1]: "busy"}, "Error": ""}
    handler.answer(200, json.dumps(result).encode())


def go_name(node: dict) -> str:
    """metadata.name as encoding/json reads it from these objects (keys that differ in case only)."""
    meta = [v for k, v in node.items() if k.lower() == "metadata"][-1]
    return [v for k, v in meta.items() if k.lower() == "name"][-1]


@pytest.mark.parametrize("parallel", [False, True])
def test_returned_nodes_named_in_another_spelling_are_taken_as_the_scheduler_takes_them(
        backend_server, proxy, write_config, parallel):
    """A backend answering `{"Metadata":{"Name":...}}` names those nodes for the scheduler: the
    proxy read them as nameless and answered other nodes than the scheduler holds then."""
    objects, after = backend_server({"filter": answering_respelled_objects}), backend_server({"filter": pass_all})
    server = proxy(write_config({"parallelFilter": parallel, "backends": [
        backend("objects", objects, filterVerb="filter", nodeCacheCapable=True),
        backend("after", after, filterVerb="filter", nodeCacheCapable=True),
    ]}))
    request = json.loads(fixture_bytes("filter-request.nodecache-true.json"))

    answer = post(server, "filter", json.dumps(request).encode()).json()
    held = requests.post(f"{objects.url}/objects/filter", data=json.dumps(request), timeout=30).json()["Nodes"]["items"]
    direct = [go_name(n) for n in held]  # what the scheduler is left with calling the backends itself
    if not parallel:  # the chain's next backend is sent what the first one passed
        direct = json.loads(requests.post(f"{after.url}/after/filter", data=json.dumps({**request, "NodeNames": direct}),
                                          timeout=30).content)["NodeNames"]

    assert answer["Error"] == "" and answer["FailedNodes"] == {request["NodeNames"][-1]: "busy"}
    taken = answer["NodeNames"] if answer["NodeNames"] is not None else [go_name(n) for n in answer["Nodes"]["items"]]
    assert taken == direct == request["NodeNames"][:-1]


def answering_nodes_twice(handler, body):
    """A full-object filter backend whose reply gives `Nodes` twice: the first node it was sent,
    then one object that names it as the second node (its uid and the rest left out)."""
    items = json.loads(body)["Nodes"]["items"]
    again = json.dumps({"metadata": {"name": items[1]["metadata"]["name"]}})
    reply = '{"Nodes":{"metadata":{},"items":[%s]},"Nodes":{"items":[%s]},"NodeNames":null,"FailedNodes":{},"Error":""}'
    handler.answer(200, (reply % (json.dumps(items[0]), again)).encode())


@pytest.mark.parametrize("parallel", [False, True])
def test_a_reply_giving_nodes_twice_leaves_the_merged_node_as_the_scheduler_holds_it(
        backend_server, proxy, write_config, parallel):
    """encoding/json decodes the second `Nodes` into the NodeList the first one filled (the
    pointer is reused), and its `items` into the same slice: element 0 of the second array is
    decoded into the first node (decode.go, (*decodeState).array: d.value(v.Index(i))), so the
    scheduler holds ONE Node named as the second object says, with the first one's uid and
    labels. The proxy read the last occurrence only, and answered a Node without them."""
    repeats = backend_server({"filter": answering_nodes_twice})
    server = proxy(write_config({"parallelFilter": parallel, "backends": [
        backend("repeats", repeats, filterVerb="filter"),
    ]}))
    request = fixture_json(FULL)
    sent = request["Nodes"]["items"]

    answer = post(server, "filter", json.dumps(request).encode())

    # What the scheduler holds, calling the backend itself (written from Go's rules above).
    held = [("", sent[1]["metadata"]["name"], sent[0]["metadata"]["uid"])]
    # The proxy's answer, read as the scheduler reads it (repeated keys decoded in turn).
    reading = p.decode_filter_result(answer.content, names_only=True, keep_items=True)
    assert reading.error == "" and reading.node_item_names == [held[0][1]]
    assert [identity_of(item) for item in reading.node_items] == held
    labels = sent[0]["metadata"].get("labels")
    assert labels and json.dumps(labels).encode()[1:-1] in reading.node_items[0]  # the first one's labels stay
