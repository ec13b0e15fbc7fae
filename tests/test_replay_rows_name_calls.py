"""The replay run page names each row's call: its verb, its backend and its pod, linked to the
pod's page. A row showed only call ids, so a developer opened each changed call to learn which
pod's decision had changed. Real traffic through a real extproxy, replayed against a changed
backend; the pod's name is untrusted text."""
from __future__ import annotations

import html
import json
import re

import pytest

from extproxy.models import Call, ReplayRun
from tests.conftest import fixture_bytes, pass_all
from tests.test_combined import failing
from tests.test_per_backend import config_for, post
from tests.test_replay import FULL
from tests.test_replay_pages import logged_in

pytestmark = pytest.mark.django_db(transaction=True)

HOSTILE_POD = "web-<i>x</i>"


def test_each_row_names_its_calls_verb_backend_and_pod(backend_server, proxy, write_config):
    backend = backend_server({"filter": pass_all})
    server = proxy(write_config(config_for(backend.url)))
    request = json.loads(fixture_bytes(FULL))
    request["Pod"]["metadata"]["name"] = HOSTILE_POD
    post(server, "/extender/gpu/filter", json.dumps(request).encode())
    server.flush()
    original = Call.objects.get()
    backend.httpd.behaviours["filter"] = failing({"gpu-node-2": "drained"})
    developer = logged_in("developer")
    response = developer.post("/replays/", {"call": original.pk, "target_kind": "configured"})
    run = ReplayRun.objects.get()

    page = developer.get(response["Location"]).content.decode()
    row = page.split('<table class="items">', 1)[1].split("</table>", 1)[0]
    assert "<th>call</th>" in row
    assert "filter" in row and "gpu" in row
    assert f"{original.pod_namespace}/web-&lt;i&gt;x&lt;/i&gt;" in row and "<i>x</i>" not in row
    link = re.search(r'<a class="pod" href="([^"]+)"', row).group(1)
    pod_page = developer.get(html.unescape(link))
    assert pod_page.status_code == 200 and "web-&lt;i&gt;x&lt;/i&gt;" in pod_page.content.decode()
    assert run.items.get().changed
