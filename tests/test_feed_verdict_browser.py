"""The live feed's filter bar takes the API's `verdict` beside `node`: "which calls rejected
node X?" is the question an operator asks of a Pending pod's nodes, and without it the feed
listed every call that involved the node, passes and all. History and arriving calls alike.
Real backends on loopback, the real proxy and recorder, Debian's chromium."""
from __future__ import annotations

import json

import pytest

from tests.conftest import fixture_json
from tests.test_live_browser import browser_page, log_in, post, viewer_login, wait_until  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser

NAMES = "captured-kube-scheduler-1.24/filter-request.nodecache-true.json"
ROWS = "document.querySelectorAll('#calls tr').length"


def refusing(node: str):
    def behave(handler, body):
        names = json.loads(body)["NodeNames"]
        answer = {"NodeNames": [n for n in names if n != node], "FailedNodes": {node: f"{node} is full"}, "Error": ""}
        handler.answer(200, json.dumps(answer).encode())
    return behave


def test_the_feed_filters_by_the_verdict_a_node_got(
    backend_server, proxy, write_config, viewer_login, browser_page  # noqa: F811 (fixtures)
):
    page = browser_page
    gpu, zone = backend_server({"filter": refusing("gpu-node-1")}), backend_server({"filter": refusing("cpu-node-1")})
    server = proxy(write_config({"backends": [
        {"name": b, "urlPrefix": s.url, "filterVerb": "filter", "nodeCacheCapable": True} for b, s in
        (("gpu", gpu), ("zone", zone))]}))
    body = json.dumps(fixture_json(NAMES)).encode()  # names cpu-node-1 and gpu-node-1
    post(server.url, "/extender/gpu/filter", body)  # fails gpu-node-1
    post(server.url, "/extender/zone/filter", body)  # passes it
    server.flush()

    log_in(page, server.url, viewer_login)
    page.goto(server.url + "/?view=calls")
    page.wait_for_selector("#conn[data-state=live]")
    wait_until(page, f"{ROWS} === 2")
    page.fill("input[name=node]", "gpu-node-1")
    page.select_option("select[name=verdict]", "failed")
    page.click("#filters button[type=submit]")
    wait_until(page, f"{ROWS} === 1")
    assert page.locator("#calls tr").first.locator("td").nth(2).inner_text() == "gpu"
    assert "verdict=failed" in page.url  # a link to this view keeps it

    post(server.url, "/extender/zone/filter", body)  # passes it: not shown
    post(server.url, "/extender/gpu/filter", body)  # fails it: shown as it arrives
    wait_until(page, f"{ROWS} === 2")
    page.wait_for_timeout(500)
    assert [page.locator("#calls tr").nth(i).locator("td").nth(2).inner_text() for i in range(2)] == ["gpu", "gpu"]
    assert page.console_errors == []
