"""The pod page's timeline links each call to what its reader may open: the call page (bodies)
for developers, the call's record with its decisions (/api/calls/<id>/) for a viewer, who
before got a 403 for every call link on the page. Real backend on loopback, the real proxy
and recorder, Debian's chromium, users in their role groups."""
from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Group, User

from tests.conftest import fixture_json, pass_all
from tests.test_live_browser import browser_page, log_in, post  # noqa: F401 (fixture)
from tests.test_per_backend import config_for

pytestmark = pytest.mark.browser

NAMES = "captured-kube-scheduler-1.24/filter-request.nodecache-true.json"


@pytest.fixture
def login(transactional_db, role) -> tuple[str, str]:
    """A user in the role's group, made before the browser starts (the ORM is not for its loop)."""
    user = User.objects.create_user(f"{role}-user", password="pw")
    user.groups.add(Group.objects.get(name=role))
    return user.username, "pw"


@pytest.mark.parametrize("role, opens", [("viewer", "/api/calls/"), ("developer", "/calls/")])
def test_every_call_link_on_the_pod_page_opens_for_its_reader(
    backend_server, proxy, write_config, login, browser_page, role, opens  # noqa: F811 (fixture)
):
    page = browser_page
    backend = backend_server({"filter": pass_all})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    args = fixture_json(NAMES)
    post(server.url, "/extender/gpu/filter", json.dumps(args).encode())
    server.flush()
    pod = args["Pod"]["metadata"]

    log_in(page, server.url, login)
    page.goto(server.url + f"/pods/{pod['namespace']}/{pod['name']}/")
    link = page.locator("ol.attempts a", has_text="filter").first
    with page.expect_navigation():
        link.click()
    assert opens in page.url
    assert page.evaluate("document.readyState") == "complete"
    response = page.request.get(page.url)
    assert response.status == 200 and "filter" in response.text()
    response.dispose()
