"""A request that redaction changed is replayed as stored (the scheduler's bytes are gone), so its
target gets the redacted form: every such item, the run's count, the API and the command's table
say so, since a change there may be the redaction's and not the target's."""
from __future__ import annotations

import json
import re

from extproxy.models import ReplayItem
from tests.conftest import fixture_bytes
from tests.test_per_backend import config_for, post
from tests.test_replay import NAMES, recorded, replay_one, user_client, wait_for
from tests.test_replay_command import replay

NOTE = "a change here may come from the redaction"


def by_tier(handler, body: bytes) -> None:
    """An extender that passes every node to a Pod of tier lab and fails them for any other."""
    args = json.loads(body)
    tier = args["Pod"]["metadata"]["labels"].get("tier")
    failed = {} if tier == "lab" else {name: f"tier {tier} not served" for name in args["NodeNames"]}
    names = [name for name in args["NodeNames"] if name not in failed]
    handler.answer(200, json.dumps({"NodeNames": names, "FailedNodes": failed, "Error": ""}).encode())


def test_a_replay_of_a_redacted_request_says_so_in_the_item_the_run_and_the_table(
        backend_server, proxy, write_config, admin_client):
    backend = backend_server({"filter": by_tier})
    path = write_config({**config_for(backend.url, nodeCacheCapable=True), "redaction": {"redactLabels": ["tier"]}})
    server = proxy(path)
    post(server, "/extender/gpu/filter", fixture_bytes(NAMES))
    [call] = recorded(server, admin_client)

    run = replay_one(user_client("developer"), server, call["id"])

    [item] = run["items"]
    assert item["kinds"] == ["passed->failed"]  # the extender did not change: the redaction did
    assert any("tier" in mark for mark in item["request_redacted"]), item
    assert item["note"].startswith("request was redacted: ") and item["note"].endswith(NOTE)
    assert run["redacted"] == 1
    assert ReplayItem.objects.get(pk=item["id"]).request_marks == item["request_redacted"]

    code, out, _ = replay("--config", path, "--call", str(call["id"]))
    assert code == 1
    assert re.search(r"^request redacted +1$", out, re.M), out
    assert NOTE in out


def test_a_request_sent_as_received_carries_no_note(backend_server, proxy, write_config, admin_client):
    backend = backend_server({"filter": by_tier})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    post(server, "/extender/gpu/filter", fixture_bytes(NAMES))
    [call] = recorded(server, admin_client)

    run = replay_one(user_client("developer"), server, call["id"])

    [item] = run["items"]
    assert (item["kinds"], item["request_redacted"], item["note"], run["redacted"]) == ([], [], "", 0)


def test_an_item_keeps_at_most_20_marks_of_200_characters():
    from extproxy.replay.diff import MAX_MARK_TEXT, MAX_MARKS, kept_marks

    marks = [f"Nodes.items[{i}].metadata.labels['tier'] redacted" + "x" * 300 for i in range(25)]
    kept = kept_marks(marks)
    assert len(kept) == MAX_MARKS + 1 and kept[-1] == "and 5 more"
    assert all(len(mark) == MAX_MARK_TEXT for mark in kept[:-1])
    assert kept_marks(["a"]) == ["a"]


def test_a_fixtures_request_redactions_are_its_replays_marks():
    from extproxy.replay.runner import Original

    mark = "Pod.metadata.labels['tier'] redacted"
    data = {"call": {"verb": "filter", "backend": "gpu", "outcome": "ok"}, "request": {"Pod": None},
            "redactions": [mark, "response: NodeNames[0] redacted"]}
    assert Original.from_fixture(data).marks == [mark]  # the response's marks are not the request's
    assert Original.from_fixture({**data, "redactions": []}).marks == []


def test_the_replay_page_notes_the_redaction_where_a_call_changed_and_counts_the_rest(
        backend_server, proxy, write_config, admin_client):
    """Every item of a pod with a redacted value carried the note, changed or not: a page of
    identical notes on unchanged calls. The note belongs where a change may be the redaction's;
    the run's count says how many requests were redacted in all."""
    from django.contrib.auth.models import Group, User
    from django.test import Client

    from tests.conftest import pass_all

    def steady_or_by_tier(handler, body: bytes) -> None:  # pod "steady" passes whatever its tier
        (pass_all if json.loads(body)["Pod"]["metadata"]["name"] == "steady" else by_tier)(handler, body)

    backend = backend_server({"filter": steady_or_by_tier})
    server = proxy(write_config({**config_for(backend.url, nodeCacheCapable=True),
                                 "redaction": {"redactLabels": ["tier"]}}))
    steady = json.loads(fixture_bytes(NAMES))
    steady["Pod"]["metadata"]["name"] = "steady"
    post(server, "/extender/gpu/filter", fixture_bytes(NAMES))
    post(server, "/extender/gpu/filter", json.dumps(steady).encode())
    calls = {c["pod"]["name"]: c["id"] for c in recorded(server, admin_client)}
    assert len(calls) == 2
    developer = user_client("developer")
    started = developer.post(server.url + "/api/replays/", json={"calls": sorted(calls.values())}, timeout=60)
    assert started.status_code == 201, started.text
    run = wait_for(developer, server, started.json()["id"])
    assert (run["total"], run["redacted"], run["changed"]) == (2, 2, 1), run
    assert all(NOTE in item["note"] for item in run["items"])  # the API keeps it on every item

    user = User.objects.create_user("pages", password="pw")
    user.groups.add(Group.objects.get(name="developer"))
    viewer = Client()
    viewer.force_login(user)
    page = viewer.get(f"/replays/{run['id']}/")
    assert page.status_code == 200
    rows = {row.split("</td>", 1)[0].rsplit(">", 2)[-2].split("<")[0]: row
            for row in page.content.decode().split("<tr class=")[1:]}
    changed = calls[next(name for name in calls if name != "steady")]
    assert NOTE in rows[str(changed)] and NOTE not in rows[str(calls["steady"])], rows
    assert "2 request(s) redacted" in page.content.decode()
