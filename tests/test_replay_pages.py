"""The replay pages: start a replay from a call page and a batch from the replays page, watch
its progress, read counts by kind and each call's diff; roles; a real browser end to end."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from extproxy.models import Call, ReplayRun
from tests.conftest import fixture_bytes, pass_all
from tests.test_combined import failing
from tests.test_live_browser import ARTIFACTS, browser_page, shoot  # noqa: F401 (fixture)
from tests.test_per_backend import config_for, post
from tests.test_replay import FULL, NAMES

pytestmark = pytest.mark.django_db(transaction=True)


def logged_in(role: str) -> Client:
    user = User.objects.create_user(f"{role}-page-{User.objects.count()}", password="pw")
    user.groups.add(Group.objects.get(name=role))
    client = Client()
    assert client.login(username=user.username, password="pw")
    return client


def test_it_replays_one_call_from_its_page_and_shows_the_diff(backend_server, proxy, write_config):
    backend = backend_server({"filter": pass_all})
    server = proxy(write_config(config_for(backend.url)))
    post(server, "/extender/gpu/filter", fixture_bytes(FULL))
    server.flush()
    original = Call.objects.get()
    backend.httpd.behaviours["filter"] = failing({"gpu-node-2": "<b>drained</b>"})
    developer = logged_in("developer")

    assert f'name="call" value="{original.pk}"' in developer.get(f"/calls/{original.pk}/").content.decode()
    response = developer.post("/replays/", {"call": original.pk, "target_kind": "configured"})

    run = ReplayRun.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/replays/{run.pk}/"
    page = developer.get(response["Location"]).content.decode()
    assert "passed-&gt;failed" in page and "<b>drained</b>" not in page
    item = run.items.get()
    replay_id = item.replay_id
    nodes = developer.get(f"/replays/{run.pk}/items/{item.pk}/", HTTP_HX_REQUEST="true").content.decode()  # the row opened
    assert "&lt;b&gt;drained&lt;/b&gt;" in nodes and "<b>drained</b>" not in nodes
    assert f'href="/calls/{replay_id}/"' in page and f'href="/calls/{original.pk}/"' in page
    assert "This call is a replay" in developer.get(f"/calls/{replay_id}/").content.decode()


def test_it_lets_only_developers_start_replays(backend_server, proxy, write_config):
    backend = backend_server({"filter": pass_all})
    server = proxy(write_config(config_for(backend.url)))
    post(server, "/extender/gpu/filter", fixture_bytes(FULL))
    server.flush()
    pk = Call.objects.get().pk

    for role in ("viewer", "auditor"):
        client = logged_in(role)
        assert client.post("/replays/", {"call": pk, "target_kind": "configured"}).status_code == 403
        assert client.post("/replays/", {"verb": "filter"}).status_code == 403
    assert ReplayRun.objects.count() == 0


def test_it_refuses_a_bad_target_from_the_form_with_the_reason(backend_server, proxy, write_config):
    server = proxy(write_config(config_for(backend_server({}).url)))
    response = logged_in("developer").post("/replays/", {"verb": "filter", "target_kind": "url", "url": "gopher://x"})
    assert response.status_code == 400 and "target.urlPrefix" in response.content.decode()


@pytest.fixture
def developer_login(transactional_db):
    user = User.objects.create_user("dev", password="pw")
    user.groups.add(Group.objects.get(name="developer"))
    return "dev", "pw"


def test_it_starts_a_batch_in_a_browser_and_shows_its_progress_and_counts(
    backend_server, proxy, write_config, developer_login, browser_page  # noqa: F811 (the ORM before the browser's loop)
):
    page = browser_page
    backend = backend_server({"filter": pass_all})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    for _ in range(5):
        post(server, "/extender/gpu/filter", fixture_bytes(NAMES))
    server.flush()
    backend.httpd.behaviours["filter"] = failing({"gpu-node-1": "cordoned"})

    page.goto(server.url + "/replays/")
    page.fill("#id_username", "dev")
    page.fill("#id_password", "pw")
    page.click("button[type=submit]")
    page.wait_for_url("**/replays/")
    page.select_option("select[name=verb]", "filter")
    page.fill("input[name=rate]", "5")
    page.click("form.replay-batch button[type=submit]")
    page.wait_for_url("**/replays/*/")
    page.wait_for_selector(".run-status:text('done')", timeout=30_000)  # the progress updates itself
    page.wait_for_function("document.querySelectorAll('table.items tr.changed').length == 5")  # then the list
    page.click("table.items details summary")
    shoot(page, "replay-run")

    assert page.text_content(".run-changed") == "5"
    assert page.text_content(".counts") and "passed->failed" in page.text_content(".counts")
    page.click(".counts a")
    page.wait_for_url("**kind=passed*")
    assert page.locator("table.items tr.changed").count() == 5
