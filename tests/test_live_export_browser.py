"""The auditor's export from the dashboard: the live feed's filter bar selects calls, and the
form under it exports that selection (CSV, JSON Lines) with a time range, through the same
signed, hash-chained export as the API and `manage.py export`. The dashboard had no way to
export calls (only the audit trail, from the audit page). A real browser against a real server,
real backends on loopback and a real database; the file is checked by verify_export and its
count against the API's."""
from __future__ import annotations

import io
import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.conftest import fixture_bytes, pass_all, reply
from tests.test_live_browser import browser_page, log_in  # noqa: F401 (fixture)
from tests.test_per_backend import config_for, post
from tests.test_replay import NAMES, PRIORITIZE, user_client


def off_the_loop(function, *args):
    """Run database work outside Playwright's event loop (Django refuses it inside one)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(function, *args).result()


@pytest.fixture
def auditor_login(transactional_db):
    user = User.objects.create_user("audrey", password="pw")
    user.groups.add(Group.objects.get(name="auditor"))
    return "audrey", "pw", user_client("auditor")


@pytest.mark.browser
def test_an_auditor_exports_the_feeds_selection_and_it_verifies(backend_server, proxy, write_config, auditor_login,
                                                                 browser_page, tmp_path):
    page = browser_page
    backend = backend_server({"filter": pass_all, "prioritize": reply(200, [{"Host": "gpu-node-1", "Score": 3}])})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    for _ in range(3):
        post(server, "/extender/gpu/filter", fixture_bytes(NAMES))
        post(server, "/extender/gpu/prioritize", fixture_bytes(PRIORITIZE))
    server.flush()
    auditor = auditor_login[2]
    listed = auditor.get(server.url + "/api/calls/?verb=filter").json()["results"]
    assert len(listed) == 3

    log_in(page, server.url, auditor_login)
    page.select_option("#filters select[name=verb]", "filter")
    page.click("#filters button[type=submit]")  # applied without a reload: the form reads it when sent
    page.fill("#export input[name=since]", "2020-01-01T00:00:00Z")
    with page.expect_download() as download:
        page.click("#export button[value=csv]")
    path = tmp_path / "calls.csv"
    download.value.save_as(path)

    rows = path.read_text().splitlines()[1:]
    assert rows and all(",filter," in row for row in rows)
    manifest = auditor.get(server.url + f"/api/export/{off_the_loop(_newest_export_id)}/manifest/")
    assert manifest.status_code == 200, manifest.text
    data = manifest.json()
    assert data["exported_by"] == "audrey" and data["filters"].get("verb") == "filter" and data["range"]["since"].startswith("2020-01-01")
    # A range ending now while the proxy serves: every call is in it, nothing is missing, and it
    # is not called complete, since calls made in it may still be in flight (stored_up_to.py).
    assert data["calls"] == len(listed) and data["gaps"] == [] and data["complete"] is False
    assert "may still be in flight" in data["still_open"]["reason"]
    (tmp_path / "calls.csv.manifest.json").write_text(json.dumps(data))
    with pytest.raises(CommandError, match="unaltered: .* NOT complete .*still open"):
        off_the_loop(lambda: call_command("verify_export", str(path), stdout=io.StringIO()))


def _newest_export_id() -> str:
    """The id of the export the browser made (the response's X-Export-Id, as stored)."""
    from django.db import connection

    from extproxy.models import Export

    try:
        return str(Export.objects.order_by("-started_at", "-id").values_list("export_id", flat=True).first())
    finally:
        connection.close()


@pytest.mark.parametrize("role, shown", [("viewer", False), ("developer", False), ("auditor", True)])
def test_only_a_role_that_may_export_gets_the_form(role, shown, proxy, write_config, client):
    from django.contrib.auth.models import User

    proxy(write_config(config_for("http://127.0.0.1:9", nodeCacheCapable=True)))
    user = User.objects.create_user(f"{role}-user", password="pw")
    user.groups.add(Group.objects.get(name=role))
    client.force_login(user)
    page = client.get("/").content.decode()
    assert ('id="export"' in page) is shown and ("dashboard/export" in page) is shown
