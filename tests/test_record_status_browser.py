"""In a real browser, against the real server and recorder process: the live page's warnings
about the record appear, change and go away in place while the page stays open (an operator
keeps it open for hours), with the live feed still running beside them."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone

import pytest

from extproxy.models import RecordingGap
from tests.conftest import fixture_bytes, reply
from tests.test_live_browser import browser_page, log_in, post, shoot, viewer_login, wait_until  # noqa: F401 (fixtures)
from tests.test_per_backend import config_for

pytestmark = pytest.mark.django_db(transaction=True)

WARNINGS = "document.querySelectorAll('#record-status li')"


def off_the_loop(work):
    """The ORM from a thread of its own: Playwright's sync API runs an event loop in this one."""
    from django.db import connection

    def run():
        try:
            return work()
        finally:
            connection.close()  # this thread's own: no session left behind

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()


def test_the_live_page_shows_lost_calls_and_clears_them_in_place(backend_server, proxy, write_config, viewer_login,
                                                                   browser_page, settings):
    settings.EXTPROXY_RECORD_STATUS_POLL_SECONDS = 1
    page = browser_page
    backend = backend_server({"filter": reply(200, fixture_bytes("filter-result.nodecache-true.json"))})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    post(server.url, "/extender/gpu/filter", fixture_bytes("filter-request.nodecache-true.json"))
    server.flush()  # the recorder process has reported: nothing to warn of
    log_in(page, server.url, viewer_login)
    page.goto(server.url + "/?view=calls")
    page.wait_for_selector("#conn[data-state=live]")
    page.locator("#calls tr").first.wait_for()
    assert page.evaluate(f"{WARNINGS}.length") == 0
    page.evaluate("document.getElementById('record-status').dataset.mark = 'kept'")  # the same element after

    now = datetime.now(timezone.utc)
    gap = off_the_loop(lambda: RecordingGap.objects.create(
        reason="spool-full<b>x</b>", calls=31, first_at=now - timedelta(seconds=20), last_at=now - timedelta(seconds=5),
        noted_at=now))
    wait_until(page, f"{WARNINGS}.length === 1")  # refreshed in place, the page not reloaded
    text = page.inner_text("#record-status li")
    assert text.startswith("31 calls dropped (spool-full<b>x</b>) between ") and "not in the record" in text
    assert page.locator("#record-status b").count() == 0  # the reason shown as text
    assert page.evaluate("document.getElementById('record-status').dataset.mark") == "kept"  # its content swapped
    shoot(page, "record-status")

    post(server.url, "/extender/gpu/filter", fixture_bytes("filter-request.nodecache-true.json"))
    wait_until(page, "document.querySelectorAll('#calls tr').length === 2")  # the feed goes on beside it

    off_the_loop(gap.delete)
    wait_until(page, f"{WARNINGS}.length === 0")
    assert page.evaluate("document.getElementById('conn').dataset.state") == "live"
