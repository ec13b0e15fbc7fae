"""Every page in a real browser (Debian's chromium, driven by Playwright) with realistic traffic
through the real proxy (full objects, names, an ignorable backend that times out, a pod with
no room): the feed by attempt with its summary band, a pod's story (bound and pending), pending
pods, and the backends page. Screenshots go to test-artifacts/ (not committed)."""
from __future__ import annotations

import json

import pytest

from tests.test_dashboard_traffic import BUSY, bind_request, per_backend_attempt, pod_request, scene, send  # noqa: F401 (fixture)
from tests.test_live_browser import browser_page, shoot, viewer_login, wait_until  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser  # Debian's chromium (make test SKIP_BROWSER=1 leaves it out)


def log_in(page, base: str, login, path: str = "/") -> None:
    page.goto(base + path)
    page.fill("#id_username", login[0])
    page.fill("#id_password", login[1])
    page.click("button[type=submit]")
    page.wait_for_selector("#conn[data-state=live]")


def test_it_shows_each_attempt_its_chain_and_its_first_rejection_live(scene, viewer_login, browser_page):
    page = browser_page
    log_in(page, scene.url, viewer_login)
    assert page.locator("#attempts tr").count() == 0
    BUSY.add("stuck-b")

    per_backend_attempt(scene, "trainer-a")
    per_backend_attempt(scene, "stuck-b")

    stuck = page.locator("#attempts tr.attempt-row", has_text="ml-team/stuck-b")
    bound = page.locator("#attempts tr.attempt-row", has_text="ml-team/trainer-a")
    page.wait_for_selector("#attempts tr.state-pending")  # arrived live, then told by the server
    page.wait_for_selector("#attempts tr.state-bound")
    assert page.locator("#attempts tr.attempt-row").count() == 2
    assert "example.com/gpu: all devices busy (gpu)" in stuck.locator("td.reason").inner_text()
    assert bound.locator("td.result").inner_text() == "bound → node-01"
    chips = [c.inner_text() for c in bound.locator(".step").all()]
    assert len(chips) == 6 and any(c.startswith("flaky filter") and "skipped" in c for c in chips)
    assert bound.locator(".step.counted-skipped").count() == 1  # the ignorable timeout: no rejection
    assert bound.locator("td.reason").inner_text() == "node-02: example.com/gpu: 2 of 4 devices are held by " \
        "lower-priority pods; need 2 free (gpu)"

    bound.click()
    detail = page.locator("#attempts tr.attempt-detail")
    assert detail.locator("tbody tr").count() == 6 and "Bound to node-01" in detail.inner_text()
    wait_until(page, "document.getElementById('sum-pending').textContent === '1'", timeout=20)
    assert "flaky" in page.inner_text("#sum-backends")
    shoot(page, "feed-by-attempt")

    # Client memory stays bounded: 700 attempts streamed in keep 500 rows.
    fake = [{"id": 10_000 + i, "attempt": f"fake-{i}", "verb": "filter", "backend": "gpu", "outcome": "ok",
             "pod": {"namespace": "load", "name": f"p{i}", "uid": ""}, "started_at": "2026-12-03T08:00:00Z",
             "duration_ms": 1.0, "error": "", "node_count": 5, "passed_count": 5} for i in range(700)]
    page.evaluate("(calls) => window.__extproxyFeed.socket.onmessage({data: JSON.stringify("
                  "{type: 'calls/batch', payload: calls})})", fake)
    wait_until(page, "document.querySelectorAll('#attempts tr.attempt-row').length === 500", timeout=30)
    assert page.evaluate("window.__extproxyFeed.attempts.size") == 500


def test_it_renders_the_story_pending_and_backends_pages(scene, viewer_login, browser_page):
    page = browser_page
    BUSY.add("stuck-b")
    per_backend_attempt(scene, "trainer-a")
    per_backend_attempt(scene, "stuck-b")
    scene.flush()
    log_in(page, scene.url, viewer_login)

    page.goto(scene.url + "/pods/ml-team/stuck-b/")
    story = page.inner_text("#story")
    assert "pending" in story and "0/5 nodes are available: 2 example.com/gpu: all devices busy, " \
        "3 example.com/gpu: node has no GPU devices." in story
    shoot(page, "pod-story-pending")
    page.goto(scene.url + "/pods/ml-team/trainer-a/")
    assert "Bound to node-01 by extender binder gpu." in page.inner_text("#story")
    rows = [r.inner_text() for r in page.locator("table.chain tbody tr").all()]
    assert len(rows) == 6 and "skipped" in rows[2] and "flaky" in rows[2]
    shoot(page, "pod-story-bound")

    page.goto(scene.url + "/pending/")
    assert "1 pod" in page.inner_text("main") and "ml-team/stuck-b" in page.inner_text("main")
    assert "trainer-a" not in page.inner_text("main")
    shoot(page, "pending-grouped")

    page.goto(scene.url + "/backends/")
    page.wait_for_selector(".charts .uplot")
    page.wait_for_selector(".charts canvas")
    glance = [r.inner_text() for r in page.locator("#glance tbody tr").all()]
    assert any(r.startswith("flaky\tfilter") and "100.0 %" in r for r in glance)  # every flaky call timed out
    charts = {c["title"]: c for c in page.evaluate("window.__extproxyCharts")}
    latency = charts["filter: latency percentiles"]
    assert latency["logY"] and latency["axes"] == ["time (UTC)", "latency (ms, log scale)"]
    assert latency["series"] == ["time (UTC)", "p50", "p90", "p99", "httpTimeout"]
    assert charts["filter: rates"]["axes"] == ["time (UTC)", "calls/s", "% of calls"]  # a unit on every axis
    assert charts["filter: heatmap"]["logY"]
    assert "--" not in page.inner_text(".u-legend")  # legends name their series
    data = json.loads(page.inner_text("#chart-data"))
    assert {(s["backend"], s["verb"]) for s in data["series"]} >= {("gpu", "filter"), ("flaky", "filter")}
    shoot(page, "backends-glance")
    assert page.dialogs == []  # type: ignore[attr-defined]
    assert page.console_errors == []  # type: ignore[attr-defined]  # each page's resources (its icon too) loaded


ODD_PODS = [("ml-team", "a/../b"), ("ml-team", "."), ("..", "p"), ("-", "dash"), ("ml-team", "50% ?#")]


def test_the_live_feeds_pod_links_open_each_pod_however_it_is_named(scene, viewer_login, browser_page):
    """live.js builds pod links itself (as dashboard/urls.py does): followed by the browser,
    which resolves dot segments, each opens that pod's page, not another's."""
    page = browser_page
    log_in(page, scene.url, viewer_login)
    for namespace, name in ODD_PODS:
        per_backend_attempt(scene, name, namespace=namespace)
    wait_until(page, f"document.querySelectorAll('#attempts tr.attempt-row').length === {len(ODD_PODS)}", timeout=30)
    links = page.evaluate("[...document.querySelectorAll('#attempts tr.attempt-row a')]"
                          ".map(a => [a.textContent, a.getAttribute('href')])")
    assert sorted(text for text, _ in links) == sorted(f"{ns}/{name}" for ns, name in ODD_PODS)
    for text, href in links:
        page.goto(scene.url + href)
        assert page.inner_text("h1 .podname") == text, (text, href, page.url)
        assert "No calls recorded for this pod." not in page.inner_text("main"), (text, href)


def test_a_feed_filtered_by_a_backend_keeps_the_combined_calls_it_took_part_in(scene, viewer_login, browser_page):
    """In the combined form every call is `combined`: a feed filtered by one of its backends,
    a choice its own menu offers, showed nothing, in its history and live."""
    page = browser_page
    send(scene, "/extender/filter", pod_request("before-z"))  # history: stored before the page opens
    scene.flush()
    log_in(page, scene.url, viewer_login, "/?view=calls&backend=zone")
    rows = page.locator("#calls tr")
    rows.first.wait_for()
    assert [r.locator("td").nth(3).inner_text() for r in rows.all()] == ["ml-team/before-z"]

    send(scene, "/extender/filter", pod_request("live-z"))  # live: over the websocket
    send(scene, "/extender/gpu/filter", pod_request("gpu-only"))  # zone took no part: not shown
    send(scene, "/extender/bind", bind_request("live-z"))  # a combined bind: only gpu binds
    send(scene, "/extender/zone/filter", pod_request("zone-direct", names=True))
    # The recorder publishes in the order calls were answered: once the last one sent is shown,
    # the gpu-only filter and the bind have been sent to the page and left out.
    wait_until(page, "document.querySelectorAll('#calls tr').length === 3")
    pods = [r.locator("td").nth(3).inner_text() for r in rows.all()]
    assert pods == ["ml-team/zone-direct", "ml-team/live-z", "ml-team/before-z"]
    assert page.console_errors == []  # type: ignore[attr-defined]


def test_the_feed_says_a_backend_extproxy_did_not_call_was_not_called(scene, viewer_login, browser_page):
    """Registered with names, the full-object backends need Node objects from extproxy's node
    cache, empty here: they are not called. Their chips read "0.0 ms error", as if a call had
    failed at once."""
    page = browser_page
    log_in(page, scene.url, viewer_login)
    send(scene, "/extender/filter", pod_request("uncalled-h", names=True))

    row = page.locator("#attempts tr.attempt-row", has_text="ml-team/uncalled-h")
    page.wait_for_selector("#attempts tr.state-pending")  # told by the server: the steps carry not_called
    chips = [c.inner_text() for c in row.locator(".step").all()]
    assert "gpu filter: not called" in chips, chips
    assert not any(c.startswith("gpu filter: 0.0 ms") for c in chips)
    assert row.locator("td.reason").inner_text().startswith("gpu filter not called: no Node object for")
    row.click()
    detail = page.locator("#attempts tr.attempt-detail")
    gpu_row = detail.locator("tbody tr", has_text="gpu")
    assert [gpu_row.locator("td").nth(i).inner_text() for i in (2, 3)] == ["—", "not called"]
    assert page.console_errors == []  # type: ignore[attr-defined]
