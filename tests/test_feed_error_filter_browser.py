"""The live feed's `error` filter finds what the API's `error` finds: in the combined form an
ignorable backend's failure is its part's error only (the combined answer, on which the
scheduler went on, has none). An operator who types the backend's error into the feed's filter
must see those calls, in the history and as they arrive. Real backends on loopback, the real
proxy and recorder, Debian's chromium."""
from __future__ import annotations

import json

import pytest

from tests.conftest import fixture_bytes, pass_all
from tests.test_combined import backend as combined_backend
from tests.test_combined import post
from tests.test_live_browser import browser_page, log_in, wait_until  # noqa: F401 (fixtures)
from tests.test_live_browser import viewer_login  # noqa: F401 (fixture)
from tests.test_replay import NAMES

pytestmark = pytest.mark.browser


def says(words: str):
    def behave(handler, body):
        handler.answer(200, json.dumps({"NodeNames": None, "FailedNodes": {}, "Error": words}).encode())
    return behave


ROWS = "document.querySelectorAll('#calls tr').length"


def test_the_feed_error_filter_keeps_combined_calls_whose_backend_failed(
    backend_server, proxy, write_config, viewer_login, browser_page  # noqa: F811 (fixtures)
):
    page = browser_page
    broken, fine = backend_server({"filter": says("disk quota exceeded on gpu-db")}), backend_server({"filter": pass_all})
    server = proxy(write_config({"backends": [
        combined_backend("broken", broken, filterVerb="filter", nodeCacheCapable=True, ignorable=True),
        combined_backend("fine", fine, filterVerb="filter", nodeCacheCapable=True),
    ]}))
    assert post(server, "filter", fixture_bytes(NAMES)).json()["Error"] == ""  # the scheduler went on without it
    server.flush()

    log_in(page, server.url, viewer_login)
    page.goto(server.url + "/?view=calls&error=QUOTA+exceeded")
    page.wait_for_selector("#conn[data-state=live]")
    wait_until(page, f"{ROWS} === 1")  # the history: the combined call recorded before
    assert page.locator("#calls tr").first.locator("td").nth(2).inner_text() == "combined"

    assert post(server, "filter", fixture_bytes(NAMES)).json()["Error"] == ""
    wait_until(page, f"{ROWS} === 2")  # arrived on the stream, kept by the filter
    assert page.console_errors == []
