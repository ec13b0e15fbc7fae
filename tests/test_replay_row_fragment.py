"""The replay run page shows each changed call as a summary; its node changes load when its row
is opened (a fragment of their own). A run of 12,000 calls with hundreds of node changes per
changed call made the page megabytes per 200 rows."""
from __future__ import annotations

import html
import json
import re
import time
from urllib.parse import quote

import msgspec
import pytest
import requests
from django.contrib.auth.models import Group, User

from extproxy.models import ReplayItem, ReplayRun
from extproxy.replay.paging import index_kinds
from extproxy.recorder import compress
from tests.conftest import fixture_bytes, pass_all
from tests.test_live_browser import browser_page  # noqa: F401 (fixture)
from tests.test_per_backend import config_for
from tests.test_replay_pages import logged_in

pytestmark = pytest.mark.django_db(transaction=True)

HOSTILE_NODE = '<img src=x id=hostile-node onerror="document.title=1">'
HOSTILE_REASON = "<script>document.title='pwned'</script>"


def node_changes(count: int) -> list[dict]:
    nodes = [{"node": f"gpu-node-{n:04d}", "backend": "gpu", "kind": "passed->failed", "before": None,
              "after": f"Insufficient example.com/gpu on node {n}"} for n in range(count - 1)]
    return nodes + [{"node": HOSTILE_NODE, "backend": "<b>gpu</b>", "kind": "reason", "before": "fits", "after": HOSTILE_REASON}]


def stored_run(*node_counts: int) -> tuple[ReplayRun, list[ReplayItem]]:
    """A finished run with one changed call per count, each with that many node changes."""
    run = ReplayRun.objects.create(selector={"filters": {}}, target={"kind": "configured"}, status="done",
                                   total=len(node_counts), done=len(node_counts), changed=len(node_counts))
    items = []
    for count in node_counts:
        diff = {"changed": True, "kinds": {"passed->failed": count - 1, "reason": 1}, "outcome": None, "error": None,
                "winner": None, "parts": [], "nodes": node_changes(count), "more_nodes": 0}
        items.append(ReplayItem.objects.create(run=run, changed=True, kinds=sorted(diff["kinds"]),
                                               diff_blob=compress(msgspec.json.encode(diff))))
    index_kinds(items)  # as the runner enters them with each item
    run.counts = {"passed->failed": len(node_counts), "reason": len(node_counts)}
    run.save()
    return run, items



def test_the_run_page_shows_a_summary_of_each_changed_call_not_its_node_changes():
    few, _ = stored_run(3)
    many, [item] = stored_run(400)
    client = logged_in("developer")

    small = client.get(f"/replays/{few.pk}/").content.decode()
    page = client.get(f"/replays/{many.pk}/").content.decode()

    assert "gpu-node-0001" not in page and "Insufficient" not in page and 'class="nodes"' not in page
    assert "passed-&gt;failed ×399" in page and "reason ×1" in page and "400 node changes" in page
    assert f'hx-get="/replays/{many.pk}/items/{item.pk}/"' in page
    # The same page, whatever the number of node changes (digits of the ids and counts aside).
    assert abs(len(page) - len(small)) < 20


def test_the_fragment_lists_one_calls_node_changes_as_text():
    run, [item] = stored_run(400)
    other, [elsewhere] = stored_run(2)
    client = logged_in("developer")

    fragment = client.get(f"/replays/{run.pk}/items/{item.pk}/", HTTP_HX_REQUEST="true").content.decode()
    assert fragment.count("<tr><td>gpu-node-") == 399 and "<html" not in fragment
    assert "&lt;img src=x id=hostile-node" in fragment and "<img" not in fragment
    assert "&lt;script&gt;" in fragment and "<script>" not in fragment and "&lt;b&gt;gpu&lt;/b&gt;" in fragment
    # Followed as a link (no script): a page of its own, with the way back.
    page = client.get(f"/replays/{run.pk}/items/{item.pk}/").content.decode()
    assert "gpu-node-0398" in page and f'href="/replays/{run.pk}/"' in page
    # An item of another run is not this run's.
    assert client.get(f"/replays/{run.pk}/items/{elsewhere.pk}/").status_code == 404
    assert client.get(f"/replays/{run.pk}/items/99999999999999999999/").status_code == 404


@pytest.fixture
def run_with_hostile_node_changes(transactional_db):
    user = User.objects.create_user("fragment-dev", password="pw")
    user.groups.add(Group.objects.get(name="developer"))
    return stored_run(150, 2)


def test_opening_a_row_in_a_browser_shows_that_calls_node_changes(
    backend_server, proxy, write_config, run_with_hostile_node_changes, browser_page  # noqa: F811 (the ORM before the browser's loop)
):
    from playwright.sync_api import expect

    page = browser_page
    (run, [first, second]) = run_with_hostile_node_changes
    server = proxy(write_config(config_for(backend_server({}).url)))
    page.goto(f"{server.url}/replays/{run.pk}/")
    page.fill("#id_username", "fragment-dev")
    page.fill("#id_password", "pw")
    page.click("button[type=submit]")
    page.wait_for_url(f"**/replays/{run.pk}/")
    assert page.locator("table.nodes").count() == 0

    page.click("table.items > tbody > tr:nth-child(2) details summary")  # the second call's row
    page.wait_for_selector("table.items > tbody > tr:nth-child(2) .node-list table.nodes")
    rows = page.locator("table.items > tbody > tr:nth-child(2) .node-list table.nodes tbody tr")
    assert rows.count() == 2 and "gpu-node-0000" in rows.nth(0).text_content()
    assert page.locator("table.nodes").count() == 1  # the other call's stay unloaded
    assert rows.nth(1).locator("td").nth(0).text_content() == HOSTILE_NODE
    assert rows.nth(1).locator("td").nth(4).text_content() == HOSTILE_REASON
    assert page.locator("#hostile-node").count() == 0 and page.title() != "pwned"

    page.click("table.items > tbody > tr:nth-child(1) details summary")
    expect(page.locator("table.items > tbody > tr:nth-child(1) .node-list table.nodes tbody tr")).to_have_count(150)
    assert page.console_errors == []  # type: ignore[attr-defined]  (no CSP refusal, no failed fetch)


CAPTURED = "captured-kube-scheduler-1.24/"


def drops_the_first_candidate(handler, body: bytes) -> None:
    """A changed preempt build: it keeps every candidate node but the first (by name)."""
    args = json.loads(body)
    out = {node: {"Pods": [{"UID": pod["metadata"]["uid"]} for pod in victims["Pods"]], "NumPDBViolations": 0}
           for node, victims in sorted((args["NodeNameToVictims"] or {}).items())[1:]}
    handler.answer(200, json.dumps({"NodeNameToMetaVictims": out}).encode())


def run_page_originals(client, url: str) -> list[int]:
    """The original call ids a run page lists, following its "next" links to the end."""
    originals: list[int] = []
    while url:
        page = client.get(url).content.decode()
        originals += [int(n) for n in re.findall(r'<tr class="changed">\s*<td><a href="/calls/(\d+)/">', page)]
        following = re.search(r'<a href="\?([^"]+)">next</a>', page)
        url = url.split("?")[0] + "?" + html.unescape(following.group(1)) if following else ""
    return originals


def test_a_replayed_run_of_full_object_traffic_reads_on_every_page_and_endpoint(
        backend_server, proxy, write_config, monkeypatch):
    """Full-object traffic (whole Nodes and victim Pods, as kube-scheduler sends a backend that is
    not nodeCacheCapable), per backend and combined, replayed against a changed build: the run
    page by kind, page after page, the API by kind, each row's node changes and each call."""
    from tests.test_combined import failing, scores
    from tests.test_replay import user_client
    from tests.test_replay_preempt import keeps_every_victim

    build = backend_server({"filter": pass_all, "prioritize": scores({"gpu-node-1": 8}), "preempt": keeps_every_victim})
    zone = backend_server({"filter": pass_all, "prioritize": scores({"gpu-node-2": 3})})
    gpu = dict(config_for(build.url, nodeCacheCapable=False)["backends"][0], bindVerb="")
    zones = {"name": "zone", "urlPrefix": f"{zone.url}/scheduler", "filterVerb": "filter", "prioritizeVerb": "prioritize",
             "weight": 1, "httpTimeout": "2s"}
    server = proxy(write_config({"backends": [gpu, zones]}))
    for _ in range(3):
        for verb in ("filter", "prioritize", "preempt"):
            body = fixture_bytes(f"{CAPTURED}{verb}-request.nodecache-false.json")
            paths = [f"/extender/gpu/{verb}"] + ([f"/extender/{verb}"] if verb != "preempt" else [])
            for path in paths:
                assert requests.post(server.url + path, data=body, timeout=30).status_code == 200
    server.flush()
    changed = backend_server({"filter": failing({"gpu-node-2": HOSTILE_REASON}), "prioritize": scores({"gpu-node-3": 9}),
                              "preempt": drops_the_first_candidate})
    api = user_client("developer")
    started = api.post(server.url + "/api/replays/", json={
        "filters": {}, "rate": 200, "target": {"kind": "url", "url": changed.url + "/scheduler", "replaces": "gpu"}}, timeout=30)
    assert started.status_code == 201, started.text
    run_id = started.json()["id"]
    for _ in range(300):
        run = api.get(f"{server.url}/api/replays/{run_id}/").json()
        if run["status"] not in ("queued", "running"):
            break
        time.sleep(0.1)
    assert run["status"] == "done" and run["done"] == run["total"] == 15 and run["errors"] == 0, run
    every = api.get(f"{server.url}/api/replays/{run_id}/").json()["items"]
    assert {"passed->failed", "removed", "score", "rank", "winner", "reason"} <= set(run["counts"])

    monkeypatch.setattr("dashboard.replay_pages.ITEMS_SHOWN", 2)  # pages of 2: paging by kind shows
    monkeypatch.setattr("extproxy.api.replays.ITEMS_PAGE", 2)
    client = logged_in("developer")
    for kind, calls in run["counts"].items():
        expected = [item["original"] for item in every if kind in item["kinds"]]
        assert len(expected) == calls
        assert run_page_originals(client, f"/replays/{run_id}/?kind={quote(kind)}") == expected, kind
        listed, offset = [], 0
        while offset is not None:
            answer = api.get(f"{server.url}/api/replays/{run_id}/", params={"kind": kind, "offset": offset}).json()
            assert answer["items_total"] == calls and all(kind in item["kinds"] for item in answer["items"]), kind
            listed += [item["original"] for item in answer["items"]]
            offset = answer["items_next"]
        assert listed == expected, kind
    assert run_page_originals(client, f"/replays/{run_id}/?changed=1") == [item["original"] for item in every]

    for item in every:
        fragment = client.get(f"/replays/{run_id}/items/{item['id']}/", HTTP_HX_REQUEST="true").content.decode()
        assert fragment.count("<tr><td>gpu-node-") == len(api.get(f"{server.url}{item['links']['diff']}").json()["diff"]["nodes"])
        assert "<script>" not in fragment
        for call in (item["original"], item["replay"]):
            assert client.get(f"/calls/{call}/").status_code == 200
    filtered = client.get(f"/replays/{run_id}/items/{every[0]['id']}/", HTTP_HX_REQUEST="true").content.decode()
    assert "&lt;script&gt;" in filtered  # the changed build's reason for failing gpu-node-2, as text
    assert client.get("/replays/").status_code == 200 and api.get(f"{server.url}/api/replays/").status_code == 200
