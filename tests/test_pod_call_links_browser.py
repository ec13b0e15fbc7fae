"""The pod page's timeline links each call to what its reader may open: the call page (bodies)
for developers, the call's record with its decisions (/api/calls/<id>/) for a viewer, who
before got a 403 for every call link on the page. Real backend on loopback, the real proxy
and recorder, Debian's chromium, users in their role groups."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User

from tests.conftest import pass_all
from tests.test_live_browser import browser_page  # noqa: F401 (fixture)
from tests.test_long_reasons_browser import open_pod_page_after_a_filter

pytestmark = pytest.mark.browser


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
    open_pod_page_after_a_filter(page, backend_server({"filter": pass_all}), proxy, write_config, login)
    link = page.locator("ol.attempts a", has_text="filter").first
    with page.expect_navigation():
        link.click()
    assert opens in page.url
    assert page.evaluate("document.readyState") == "complete"
    response = page.request.get(page.url)
    assert response.status == 200 and "filter" in response.text()
    response.dispose()
