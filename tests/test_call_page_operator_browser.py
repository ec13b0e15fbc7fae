"""The on-call operator's question, "which backend refused node X, and why?", answered on the
page of a full-object call of real size, in a real browser.

kube-scheduler sends an extender without nodeCacheCapable whole Node objects, and a combined
call repeats them in each backend's part. The call page used to inline every body (cut at
256 KiB each): a 300-node combined filter made a page of megabytes whose replies' FailedNodes
lay past the cut, so the page never said which backend refused a node. Now it leads with the
decisions (counts by reason, each node's verdicts, searchable), and loads bodies when opened.

kube-scheduler 1.24's captured full-object filter request, grown to NODES Nodes, goes through
a real extproxy to three loopback extenders that refuse different nodes for different reasons,
in the combined and the per-backend form; Debian's chromium reads the pages.
"""
from __future__ import annotations

import copy
import json

import pytest
import requests

from extproxy.models import Call
from tests.conftest import fixture_json
from tests.test_combined import backend, failing
from tests.test_live_browser import browser_page, log_in, viewer_login  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser

NODES = 300
PAGE_BOUND = 200_000  # characters of the call page's HTML, whatever the number of Nodes
GPU = {f"node-{i:05d}": "gpu: all 8 devices busy" for i in range(1, NODES + 1, 3)}
ZONE = {f"node-{i:05d}": f"zone: pod wants eu-west-1a, node-{i:05d} is in <b>1b</b>" for i in range(2, NODES + 1, 5)}
DISK = {f"node-{i:05d}": "disk: no local SSD left" for i in range(3, NODES + 1, 7)}
ASKED = "node-00297"  # refused by zone, on the table's third page


def grown_request() -> bytes:
    """The captured full-object filter request with NODES Nodes: its own in turn, renamed."""
    args = fixture_json("captured-kube-scheduler-1.24/filter-request.nodecache-false.json")
    templates = args["Nodes"]["items"]
    items = []
    for i in range(1, NODES + 1):
        node = copy.deepcopy(templates[i % len(templates)])
        node["metadata"]["name"] = f"node-{i:05d}"
        node["metadata"]["uid"] = f"00000000-0000-0000-0000-{i:012d}"
        items.append(node)
    args["Nodes"]["items"] = items
    return json.dumps(args).encode()


@pytest.fixture
def recorded(backend_server, proxy, write_config):
    servers = {"gpu": backend_server({"filter": failing(GPU)}), "zone": backend_server({"filter": failing(ZONE)}),
               "disk": backend_server({"filter": failing({}, DISK)})}
    server = proxy(write_config({"backends": [backend(name, s, filterVerb="filter", httpTimeout="30s")
                                              for name, s in servers.items()]}))
    body = grown_request()
    for path in ("/extender/filter", "/extender/zone/filter"):
        answer = requests.post(server.url + path, data=body, timeout=120)
        assert answer.status_code == 200, answer.text[:300]
    server.flush()
    # Looked up before the browser starts (Playwright's loop makes the ORM refuse in the test).
    return server, {form: Call.objects.get(form=form, node_count=NODES).pk for form in ("combined", "per-backend")}


def page_size(page) -> int:
    return page.evaluate("document.documentElement.outerHTML.length")


@pytest.mark.parametrize("form", ["combined", "per-backend"])
def test_the_call_page_says_which_backend_refused_a_node_and_why(recorded, viewer_login, browser_page,  # noqa: F811
                                                                   form):
    page = browser_page
    server, calls = recorded
    log_in(page, server.url, viewer_login)
    page.goto(server.url + f"/calls/{calls[form]}/")
    assert page_size(page) < PAGE_BOUND

    # Counted per backend as the scheduler counts them.
    summary = page.inner_text("#decisions .summary")
    if form == "combined":  # each backend is sent what the ones before it left
        assert f"gpu: {NODES - len(GPU)}/{NODES} nodes are available: {len(GPU)} gpu: all 8 devices busy." in summary
        assert "disk: no local SSD left" in summary
    else:
        assert f"zone: {NODES - len(ZONE)}/{NODES} nodes are available" in summary
    assert "less frequent reason(s): find a node below" in summary  # zone names each node in its reason

    # The node asked about, found by name: which backend refused it, and why (as text).
    page.fill("#call-nodes input[name=node]", ASKED)
    page.click("#call-nodes button[type=submit]")
    page.wait_for_selector("#call-nodes .matching")
    row = page.inner_text("#call-nodes table.nodes tbody")
    assert ASKED in row and ZONE[ASKED] in row and row.count("\n") == 0  # one row: that node's
    headers = page.inner_text("#call-nodes table.nodes thead")
    assert "zone" in headers

    # The bodies are one click away: the request with its Node objects, the reply's FailedNodes.
    for which in ("request", "response"):
        page.click(f"#{which} details.on-demand summary")
        page.wait_for_selector(f"#{which} pre.json.{which}")
    assert '"name": "node-00001"' in page.inner_text("#request pre.json")
    if form == "per-backend":
        assert ZONE[ASKED] in page.inner_text("#response pre.json")
    else:  # each backend's part, its reply where the backend said it
        zone_part = page.locator("section.backend-part", has_text="Backend zone")
        zone_part.locator("details.on-demand.response summary").click()
        zone_part.locator("pre.json.response").wait_for()
        assert ZONE[ASKED] in zone_part.locator("pre.json.response").inner_text()
    assert page.console_errors == []


def test_the_pod_page_finds_the_node_asked_about_among_hundreds(recorded, viewer_login, browser_page):  # noqa: F811
    """The pod page's node table is 100 nodes a page: the node asked about is found by name,
    with each backend's verdict and reason, without paging through the cluster."""
    page = browser_page
    server, _calls = recorded
    pod = fixture_json("captured-kube-scheduler-1.24/filter-request.nodecache-false.json")["Pod"]["metadata"]
    log_in(page, server.url, viewer_login)
    page.goto(server.url + f"/pods/{pod['namespace']}/{pod['name']}/")
    assert ASKED not in page.inner_text("#node-table")  # on a later page

    page.fill("#node-table input[name=node]", ASKED)
    page.click("#node-table button[type=submit]")
    page.wait_for_selector("#node-table .matching")
    row = page.inner_text("#node-table table.nodes tbody")
    assert ASKED in row and ZONE[ASKED] in row and row.count("\n") == 0

    page.fill("#node-table input[name=node]", "2")  # 138 names hold a 2: a second page to go to
    page.click("#node-table button[type=submit]")
    page.wait_for_selector("#node-table .matching:has-text('138 of')")
    page.click("#node-table .pager a:has-text('next')")
    page.wait_for_selector("#node-table .pager:has-text('page 2 of 2')")
    shown = page.inner_text("#node-table tbody")  # still only the names searched for, the last 38
    assert "node-00299" in shown and "node-00262" in shown and "node-00261" not in shown and "node-00300" not in shown
    assert page.console_errors == []
