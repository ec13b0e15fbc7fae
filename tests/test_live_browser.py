"""A real browser (Debian's chromium, driven by Playwright) against a real extproxy server and
a real backend: log in, watch calls arrive on the live feed, read the pod view of the GPU
fixture scenario; and HTML in pod names, labels, reasons and error texts shown as text on
every page. Screenshots of each page go to test-artifacts/ (not committed)."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import requests

from tests.conftest import fixture_bytes, fixture_json, reply
from tests.test_dashboard_pages import XSS_ERROR, XSS_LABEL, XSS_POD, XSS_REASON
from tests.test_per_backend import config_for

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
# Debian's chromium, found as `make browser` finds it (EXTPROXY_CHROMIUM, else on PATH).
CHROMIUM = os.environ.get("EXTPROXY_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
POD = "trainer-7d9c5b6f8-b4x2s"

# No skip: `make test` finds or installs Debian's chromium (saying so); without it these tests
# fail, as they should. `make test SKIP_BROWSER=1` deselects them by their marker instead.
pytestmark = pytest.mark.browser


@pytest.fixture
def browser_page():
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.dialogs = []  # type: ignore[attr-defined]

        def on_dialog(dialog):
            page.dialogs.append(dialog.message)  # type: ignore[attr-defined]
            dialog.dismiss()

        page.on("dialog", on_dialog)
        # What the browser's console says went wrong (a resource that answered 4xx/5xx, a script
        # error, a CSP refusal): a test that loads pages asserts this stays empty.
        page.console_errors = []  # type: ignore[attr-defined]
        page.on("console", lambda m: m.type == "error" and page.console_errors.append(m.text))  # type: ignore[attr-defined]
        page.on("pageerror", lambda e: page.console_errors.append(f"pageerror: {e}"))  # type: ignore[attr-defined]
        page.set_default_timeout(15_000)
        yield page
        browser.close()


@pytest.fixture
def viewer_login(transactional_db):
    from django.contrib.auth.models import User

    User.objects.create_superuser("viewer", "", "pw")
    return "viewer", "pw"


def log_in(page, base: str, login) -> None:
    page.goto(base + "/")
    assert "/accounts/login/" in page.url
    page.fill("#id_username", login[0])
    page.fill("#id_password", login[1])
    page.click("button[type=submit]")
    page.wait_for_selector("#conn[data-state=live]")


def post(base: str, path: str, body: bytes) -> None:
    response = requests.post(base + path, data=body, headers={"Content-Type": "application/json"}, timeout=10)
    assert response.status_code in (200, 500), response.text


def shoot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def wait_until(page, expression: str, timeout: float = 15.0) -> None:
    """Poll an expression from outside the page: page.wait_for_function evaluates its string
    with eval inside the page, which the dashboard's Content-Security-Policy forbids."""
    import time

    deadline = time.monotonic() + timeout
    while not page.evaluate(expression):
        assert time.monotonic() < deadline, f"not true within {timeout}s: {expression}"
        page.wait_for_timeout(50)


def test_it_shows_calls_live_and_explains_the_pod_in_a_browser(
    backend_server, proxy, write_config, viewer_login, browser_page
):
    page = browser_page
    backend = backend_server({
        "filter": reply(200, fixture_bytes("filter-result.nodecache-true.json")),
        "prioritize": reply(200, fixture_bytes("prioritize-result.json")),
        "bind": reply(200, fixture_bytes("bind-result.json")),
    })
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    log_in(page, server.url, viewer_login)
    page.goto(server.url + "/?view=calls")  # the call-per-row view
    page.wait_for_selector("#conn[data-state=live]")
    assert page.locator("#calls tr").count() == 0

    post(server.url, "/extender/gpu/filter", fixture_bytes("filter-request.nodecache-true.json"))
    post(server.url, "/extender/gpu/prioritize", fixture_bytes("prioritize-request.nodecache-true.json"))
    post(server.url, "/extender/gpu/bind", fixture_bytes("bind-request.json"))

    rows = page.locator("#calls tr")
    rows.nth(2).wait_for()  # all three arrived over the websocket, without a reload
    verbs = [rows.nth(i).locator("td").nth(1).inner_text() for i in range(3)]
    assert verbs == ["bind", "prioritize", "filter"]  # newest first
    assert rows.first.locator("td").nth(3).inner_text() == f"ml-team/{POD}"
    assert int(page.inner_text("#batch-size")) >= 1
    shoot(page, "live-feed")

    page.click("#pause")
    post(server.url, "/extender/gpu/filter", fixture_bytes("filter-request.nodecache-true.json"))
    wait_until(page, "document.getElementById('held-count').textContent === '1'")
    assert rows.count() == 3
    page.click("#pause")
    wait_until(page, "document.querySelectorAll('#calls tr').length === 4")

    page.fill("input[name=node]", "node-04")
    page.click("#filters button[type=submit]")
    wait_until(page, "document.querySelectorAll('#calls tr').length === 2")  # the two filters name node-04
    assert {rows.nth(i).locator("td").nth(1).inner_text() for i in range(2)} == {"filter"}

    # The first attempt (filter, prioritize, bind) in the pod view.
    page.goto(server.url + f"/pods/ml-team/{POD}/")
    page.click("ol.attempts li:last-child > a")
    text = page.inner_text("main")
    expected = fixture_json("filter-result.nodecache-true.json")
    for reason in list(expected["FailedNodes"].values()) + list(expected["FailedAndUnresolvableNodes"].values()):
        assert reason in text
    assert "2/5 nodes are available" in text
    node_row = page.locator("table.nodes tr", has_text="node-04")
    assert "unresolvable" in node_row.inner_text() and "no GPU devices" in node_row.inner_text()
    scores = {}
    for row in page.locator("table.scores tbody tr").all():
        cells = [c.inner_text() for c in row.locator("td").all()]
        scores[row.get_attribute("data-node")] = (cells[0], cells[2], cells[3], cells[4], row.get_attribute("class"))
    weight = 2
    assert scores == {
        "node-01": ("1", "8", str(8 * weight * 10), str(8 * weight * 10), "bound"),
        "node-03": ("2", "3", str(3 * weight * 10), str(3 * weight * 10), ""),
    }
    assert page.locator("table.timeline tbody tr").count() == 3
    shoot(page, "pod-view")

    page.goto(server.url + "/backends/")
    page.wait_for_selector(".charts .uplot")
    assert "httpTimeout 2.0s" in page.inner_text("main")
    shoot(page, "backends")
    page.goto(server.url + "/pending/")
    assert "No pending pods" in page.inner_text("main")
    shoot(page, "pending")
    assert page.dialogs == []  # type: ignore[attr-defined]


def test_it_renders_html_in_names_labels_reasons_and_errors_as_text_on_every_page(
    backend_server, proxy, write_config, viewer_login, browser_page
):
    page = browser_page
    failing = {"NodeNames": [], "FailedNodes": {"node-01": XSS_REASON, "node-02": XSS_REASON},
               "FailedAndUnresolvableNodes": {n: XSS_REASON for n in ("node-03", "node-04", "node-05")}, "Error": ""}
    backend = backend_server({"filter": reply(200, failing), "prioritize": reply(500, XSS_ERROR, "text/plain")})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    request = json.loads(fixture_bytes("filter-request.nodecache-true.json"))
    request["Pod"]["metadata"]["name"] = XSS_POD
    request["Pod"]["metadata"]["labels"]["note"] = XSS_LABEL
    body = json.dumps(request).encode()
    log_in(page, server.url, viewer_login)
    page.goto(server.url + "/?view=calls")
    page.wait_for_selector("#conn[data-state=live]")

    post(server.url, "/extender/gpu/prioritize", body)
    post(server.url, "/extender/gpu/filter", body)
    page.locator("#calls tr").nth(1).wait_for()
    live_text = page.inner_text("#calls")
    assert f"ml-team/{XSS_POD}" in live_text and XSS_ERROR in live_text
    shoot(page, "xss-live-feed")

    page.click(f"#calls a >> text=ml-team/{XSS_POD}")
    page.wait_for_selector("h1 .podname")
    assert page.inner_text("h1 .podname") == f"ml-team/{XSS_POD}"
    text = page.inner_text("main")
    assert XSS_LABEL in page.inner_text("dl.labels")
    assert XSS_REASON in text and "0/5 nodes are available: 5 " + XSS_REASON in text
    assert page.locator("main img, main script").count() == 0
    shoot(page, "xss-pod-view")

    page.goto(server.url + "/backends/")
    assert XSS_ERROR in page.inner_text("main")
    assert page.locator("main img").count() == 0
    shoot(page, "xss-backends")

    page.goto(server.url + "/pending/")
    pending = page.inner_text("main")
    assert f"ml-team/{XSS_POD}" in pending and XSS_REASON in pending
    assert page.locator("main img, main script").count() == 0
    shoot(page, "xss-pending")

    assert page.dialogs == []  # type: ignore[attr-defined]
