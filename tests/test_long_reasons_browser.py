"""A backend's reason is the backend's text, as long as it likes: a pod page whose reasons run
thousands of characters without a space must still fit the window, so that the story's
sentence, the chain, the scheduler's own words and the node table stay readable side by side
(before, the page grew tens of thousands of pixels wide and the scheduler's words sat far off
to the right). Real backend on loopback, the real proxy and recorder, Debian's chromium."""
from __future__ import annotations

import json

import pytest

from tests.conftest import fixture_json
from tests.test_live_browser import browser_page, log_in, post, viewer_login  # noqa: F401 (fixtures)
from tests.test_per_backend import config_for

pytestmark = pytest.mark.browser

NAMES = "captured-kube-scheduler-1.24/filter-request.nodecache-true.json"
LONG = "no-free-device:" + "x" * 3000


def refuse_all(handler, body):
    names = json.loads(body)["NodeNames"]
    answer = {"NodeNames": [], "FailedNodes": {},
              "FailedAndUnresolvableNodes": {n: f"{n}:{LONG}" for n in names}, "Error": ""}
    handler.answer(200, json.dumps(answer).encode())


def open_pod_page_after_a_filter(page, backend, proxy, write_config, login) -> None:
    """One captured filter call through the real proxy to `backend`, recorded; then its pod's
    page, logged in as `login` (username, password)."""
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    args = fixture_json(NAMES)
    post(server.url, "/extender/gpu/filter", json.dumps(args).encode())
    server.flush()
    pod = args["Pod"]["metadata"]
    log_in(page, server.url, login)
    page.goto(server.url + f"/pods/{pod['namespace']}/{pod['name']}/")


def test_a_pod_page_with_very_long_reasons_fits_the_window(
    backend_server, proxy, write_config, viewer_login, browser_page  # noqa: F811 (fixtures)
):
    page = browser_page
    open_pod_page_after_a_filter(page, backend_server({"filter": refuse_all}), proxy, write_config, viewer_login)
    assert LONG[:1000] in page.inner_text("#story")  # the reason is there, wrapped
    width, window = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width <= window
    assert page.console_errors == []
