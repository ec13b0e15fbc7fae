"""Replay selections and inputs that must be refused with a reason, through the real API,
dashboard and command: a selection of no call, a malformed fixture file, odd form digits,
query flags."""
from __future__ import annotations

import json

import pytest

from extproxy.models import AuditEvent, ReplayRun
from tests.conftest import fixture_bytes, pass_all
from tests.test_per_backend import config_for, post
from tests.test_replay import NAMES, recorded, user_client, wait_for
from tests.test_replay_command import replay
from tests.test_replay_pages import logged_in


@pytest.fixture
def one_filter(backend_server, proxy, write_config, admin_client):
    backend = backend_server({"filter": pass_all})
    path = write_config(config_for(backend.url, nodeCacheCapable=True))
    server = proxy(path)
    post(server, "/extender/gpu/filter", fixture_bytes(NAMES))
    [call] = recorded(server, admin_client)
    return server, path, call


def test_a_selection_of_no_call_is_refused_not_reported_as_unchanged(one_filter):
    server, path, call = one_filter
    developer = user_client("developer")
    missing = call["id"] + 424242

    gone = developer.post(server.url + "/api/replays/", json={"call": missing, "wait": True})
    assert gone.status_code == 404 and f"no recorded call {missing}" in gone.text
    none = developer.post(server.url + "/api/replays/", json={"calls": [missing, missing + 1]})
    assert none.status_code == 404 and none.json()["missing"] == [missing, missing + 1], none.text
    none = developer.post(server.url + "/api/replays/", json={"calls": [missing], "allow_missing": True})
    assert none.status_code == 400 and "matches no recorded call" in none.json()["calls"]
    empty = developer.post(server.url + "/api/replays/", json={"filters": {"namespace": "nowhere"}})
    assert empty.status_code == 400 and "filters" in empty.json()
    assert ReplayRun.objects.count() == 0
    page = logged_in("developer").post("/replays/", {"call": missing, "target_kind": "configured"})
    assert page.status_code == 400 and f"no recorded call {missing}" in page.content.decode()

    code, out, err = replay("--config", path, "--call", str(missing), "--no-record")
    assert code == 2 and f"name no recorded call (pruned or mistyped): {missing}" in err, out + err
    code, out, err = replay("--config", path, "--call", str(missing), "--no-record", "--allow-missing")
    assert code == 2 and "no call was replayed" in err, out + err
    code, _, err = replay("--config", path, "--call", str(missing))
    assert code == 2, err
    assert replay("--config", path, "--call", str(call["id"]), "--no-record")[0] == 0  # still fine when found


def test_calls_naming_missing_ids_are_refused_naming_them_unless_allowed(backend_server, proxy, write_config,
                                                                         admin_client):
    """Some of the ids of `calls` (API) or `--call` (command) name no recorded call: the run of
    the others would let a CI gate pass on fewer calls than it named. A 404 (exit 2) naming the
    missing ids, at most 20 of them; asked to allow them, the others run and the answer names them."""
    backend = backend_server({"filter": pass_all})
    path = write_config(config_for(backend.url, nodeCacheCapable=True))
    server = proxy(path)
    for _ in range(2):
        post(server, "/extender/gpu/filter", fixture_bytes(NAMES))
    there = sorted(c["id"] for c in recorded(server, admin_client))
    gone = [there[-1] + 1000 + n for n in range(25)]
    developer = user_client("developer")

    refused = developer.post(server.url + "/api/replays/", json={"calls": there + gone})
    assert refused.status_code == 404, refused.text
    body = refused.json()
    assert body["missing"] == gone[:20] and body["missing_count"] == 25
    assert f"25 of the 27 call ids name no recorded call (pruned or mistyped): {gone[0]}," in body["calls"]
    assert "and 5 more" in body["calls"] and "allow_missing" in body["calls"]
    assert ReplayRun.objects.count() == 0
    odd = developer.post(server.url + "/api/replays/", json={"calls": there, "allow_missing": "yes"})
    assert odd.status_code == 400 and "allow_missing" in odd.json()

    allowed = developer.post(server.url + "/api/replays/", json={"calls": there + gone[:3], "allow_missing": True})
    assert allowed.status_code == 201, allowed.text
    assert allowed.json()["missing"] == gone[:3] and allowed.json()["missing_count"] == 3
    run = wait_for(developer, server, allowed.json()["id"])
    assert (run["status"], run["total"], run["done"]) == ("done", 2, 2)
    event = AuditEvent.objects.filter(action="replay").latest("id")
    assert event.detail["missing_count"] == 3

    ids = [arg for i in there + gone[:2] for arg in ("--call", str(i))]
    code, out, err = replay("--config", path, *ids, "--no-record")
    assert code == 2 and f"2 of the 4 call ids name no recorded call (pruned or mistyped): {gone[0]}, {gone[1]}" in err, out + err
    code, out, err = replay("--config", path, *ids, "--no-record", "--allow-missing", "--json")
    summary = json.loads(out)
    assert code == 0 and summary["replayed"] == 2 and summary["missing_calls"] == gone[:2], out + err
    assert f"{gone[0]}, {gone[1]}; replaying the others" in err
    assert replay("--config", path, *[a for i in there for a in ("--call", str(i))], "--no-record")[0] == 0


def test_a_malformed_single_document_fixture_file_exits_2_with_the_reason(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "extproxy_fixture": 1,\n  "call": {oops}\n}\n')

    code, out, err = replay("--fixtures", str(bad))

    assert code == 2 and "bad.json: not a fixture" in err and "Traceback" not in err, out + err


def test_the_replay_form_refuses_odd_digits_with_the_field(one_filter):
    server, _, call = one_filter
    developer = logged_in("developer")
    for form, field in [
        ({"call": "²", "target_kind": "configured"}, "call"),
        ({"call": "-", "target_kind": "configured"}, "call"),
        ({"call": call["id"], "target_kind": "url", "url": server.url + "/x", "weight": "²"}, "weight"),
        ({"verb": "filter", "target_kind": "url", "url": server.url + "/x", "weight": "٣"}, "weight"),
    ]:
        page = developer.post("/replays/", form)
        assert page.status_code == 400 and field in page.content.decode(), (form, page.content[:300])
    assert ReplayRun.objects.count() == 0
    started = developer.post("/replays/", {"call": str(call["id"]), "target_kind": "url", "url": server.url + "/x",
                                           "filter_verb": "filter", "weight": "3"})
    assert started.status_code == 302 and ReplayRun.objects.get().target["weight"] == 3


@pytest.mark.parametrize("value,changed_only", [("0", False), ("false", False), ("", False), ("1", True), ("true", True)])
def test_the_changed_flag_of_a_run_means_what_it_says(one_filter, value, changed_only):
    server, _, call = one_filter
    developer = user_client("developer")
    run = developer.post(server.url + "/api/replays/", json={"call": call["id"], "wait": True}).json()
    assert run["changed"] == 0 and len(run["items"]) == 1

    items = developer.get(server.url + f"/api/replays/{run['id']}/?changed={value}").json()["items"]
    assert len(items) == (0 if changed_only else 1)
    refused = developer.get(server.url + f"/api/replays/{run['id']}/?changed=maybe")
    assert refused.status_code == 400 and "changed" in refused.json()


def test_a_target_urls_password_is_never_shown_nor_audited(backend_server, one_filter, admin_client):
    server, path, call = one_filter
    other = backend_server({"filter": pass_all})
    secret_url = other.url.replace("http://", "http://dev:hunter2@")
    developer = user_client("developer")

    run = developer.post(server.url + "/api/replays/", json={
        "call": call["id"], "wait": True, "target": {"kind": "url", "url": secret_url, "filterVerb": "filter"}}).json()
    assert run["status"] == "done" and run["errors"] == 0 and len(other.received) == 1  # the secret still reached it
    assert replay("--config", path, "--call", str(call["id"]), "--url", secret_url, "--filter-verb", "filter")[0] == 0

    shown = [
        developer.get(server.url + "/api/replays/").text,
        developer.get(server.url + f"/api/replays/{run['id']}/").text,
        admin_client.get(server.url + "/api/audit/").text,
    ]
    pages = logged_in("developer")
    shown += [pages.get("/replays/").content.decode(), pages.get(f"/replays/{run['id']}/").content.decode()]
    for text in shown:
        assert "hunter2" not in text and "dev:[redacted]@127.0.0.1" in text, text[:500]
    assert all(r.target["url"] == secret_url for r in ReplayRun.objects.all())  # kept where the runner reads it


def _bomb(levels: int) -> str:
    lines = ["rules: [{kind: requiredLabels, selector: example.com/gpu.product}]", "description:",
             '  - &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"  - &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_policy_rules_with_aliases_or_past_the_bound_are_refused(one_filter):
    server, _, call = one_filter
    pages = logged_in("developer")
    rules = "rules: [{kind: requiredLabels, selector: example.com/gpu.product}]\n"
    for text, reason in [(_bomb(6), "aliases"), (rules + "#" * 70_000 + "\n", "at most 65536 characters")]:
        page = pages.post("/replays/", {"call": call["id"], "target_kind": "policy", "rules": text})
        assert page.status_code == 400 and reason in page.content.decode(), page.content[:400]
    described = {"kind": "policy", "rules": {"rules": [{"kind": "requiredLabels", "selector": "a"}], "description": "x" * 70_000}}
    api = user_client("developer").post(server.url + "/api/replays/", json={"call": call["id"], "target": described})
    assert api.status_code == 400 and "at most 65536 bytes" in api.json()["target"], api.text
    assert ReplayRun.objects.count() == 0 and AuditEvent.objects.filter(action="replay").count() == 0

    started = pages.post("/replays/", {"call": call["id"], "target_kind": "policy", "rules": rules})
    assert started.status_code == 302 and ReplayRun.objects.get().target["rules"]["rules"][0]["kind"] == "requiredLabels"


def test_the_commands_rules_file_refuses_aliases_as_the_dashboard_does(one_filter, tmp_path):
    """One loader for policy rules given as text: a small --rules file of nested aliases would
    expand to gigabytes (9^levels items) as the target is checked and stored."""
    _, path, call = one_filter
    bomb, plain = tmp_path / "bomb.yaml", tmp_path / "rules.yaml"
    bomb.write_text(_bomb(5))
    plain.write_text("rules: [{kind: requiredLabels, selector: example.com/gpu.product}]\n")

    code, out, err = replay("--config", path, "--call", str(call["id"]), "--rules", str(bomb), "--no-record")
    assert code == 2 and "--rules: not YAML or JSON: aliases (*name) are not allowed" in err, out + err
    code, out, err = replay("--config", path, "--call", str(call["id"]), "--rules", str(plain), "--no-record",
                            "--node-cache-capable", "true")
    assert code in (0, 1) and "replayed" in out, out + err  # the same rules without aliases are taken
