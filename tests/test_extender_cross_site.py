"""The extender endpoints of the main port (the dashboard's origin) serve kube-scheduler, never a
browser: a request a web page made (it carries Origin, or Sec-Fetch-Site naming another site) is
refused 403 with a reason and never reaches a backend nor the record, and every answer tells a
browser not to render it as a page of this origin (nosniff, a CSP that allows nothing, no
framing), a backend's HTML included. A real proxy and backend."""
from __future__ import annotations

import pytest
import requests

from tests.conftest import fixture_bytes, pass_all, reply
from tests.test_per_backend import FILTER_NAMES, config_for, post


@pytest.mark.parametrize("headers", [
    {"Origin": "https://evil.example", "Content-Type": "text/plain;charset=UTF-8"},
    {"Origin": "null"},
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},
])
def test_a_request_a_web_page_made_is_refused(headers, backend_server, proxy, write_config, admin_client):
    backend = backend_server({"filter": pass_all})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))

    refused = requests.post(server.url + "/extender/gpu/filter", data=fixture_bytes(FILTER_NAMES), timeout=30,
                            headers={"Content-Type": "application/json", **headers})

    assert refused.status_code == 403 and "browser" in refused.json()["error"]
    assert post(server, "/extender/gpu/filter", fixture_bytes(FILTER_NAMES)).status_code == 200  # the scheduler's
    server.flush()
    assert len(backend.received) == 1
    assert len(admin_client.get(server.url + "/api/calls/").json()["results"]) == 1


def test_a_backends_html_is_relayed_with_headers_that_keep_a_browser_from_rendering_it(
        backend_server, proxy, write_config):
    page = "<html><script>alert(document.cookie)</script></html>"
    backend = backend_server({"filter": reply(200, page, "text/html")})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))

    answered = post(server, "/extender/gpu/filter", fixture_bytes(FILTER_NAMES))

    assert answered.text == page and answered.headers["Content-Type"].startswith("text/html")  # transparent
    assert answered.headers["X-Content-Type-Options"] == "nosniff"
    assert "default-src 'none'" in answered.headers["Content-Security-Policy"]
    assert answered.headers["X-Frame-Options"] == "DENY"
