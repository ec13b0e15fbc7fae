"""The live feed and the pages in Chromium, with every kind of call a real kube-scheduler makes.

The captured requests of kube-scheduler 1.24 (four verbs; Node objects and node names) go
through a real extproxy, in both forms, to loopback extenders that fail nodes with hostile
reasons and answer an HTML 500, while a logged-in browser watches the live feed over its
websocket. Every call arrives as a row without a reload; then each pod's page and each call's
page open; and through all of it the browser met no script error, no failed resource, no CSP
refusal and no dialog.
"""
from __future__ import annotations

import pytest

from tests.test_every_route_real_traffic import every_kind_proxy, send_every_kind
from tests.test_live_browser import browser_page, log_in, viewer_login, wait_until  # noqa: F401 - fixtures

pytestmark = pytest.mark.browser


def test_every_kind_of_call_arrives_live_and_its_pages_open_cleanly(
    backend_server, proxy, write_config, viewer_login, admin_client, browser_page  # noqa: F811
):
    page = browser_page
    server = every_kind_proxy(backend_server, proxy, write_config)
    log_in(page, server.url, viewer_login)
    page.goto(server.url + "/?view=calls")
    page.wait_for_selector("#conn[data-state=live]")

    sent = send_every_kind(server)
    wait_until(page, f"document.querySelectorAll('#calls tr').length === {sent}", timeout=30)
    server.flush()
    # Through the API: the browser's event loop runs in this thread, where Django's ORM may not.
    calls = admin_client.get(server.url + "/api/calls/", params={"page_size": 100}, timeout=30).json()["results"]
    assert len(calls) == sent
    rows = page.locator("#calls tr")
    shown = sorted(rows.nth(i).locator("td").nth(1).inner_text() for i in range(sent))
    assert shown == sorted(c["verb"] for c in calls)

    page.goto(server.url + "/")  # the attempts view of the same calls
    page.wait_for_selector("#conn[data-state=live]")
    pods = {(c["pod"]["namespace"], c["pod"]["name"]) for c in calls}
    assert len(pods) == 4  # web-nc-false, web-nc-true, trainer-nc-false, trainer-nc-true
    for namespace, name in sorted(pods):
        page.goto(server.url + f"/pods/{namespace}/{name}/")
        assert name in page.inner_text("main")
    for call in calls:
        page.goto(server.url + f"/calls/{call['id']}/")
        assert page.locator("main").count() == 1
    assert page.console_errors == []  # type: ignore[attr-defined]
    assert page.dialogs == []  # type: ignore[attr-defined]
