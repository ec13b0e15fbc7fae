"""Diffs stored before a combined call's parts were compared have no "parts" key: the run page,
a row's node changes, the API and `manage.py replay --json` read them, and say "not compared"
where an empty list would say that no backend's part changed."""
from __future__ import annotations

import json
import zlib
from datetime import timedelta

import msgspec
import pytest
from django.utils import timezone

from extproxy.models import Call, ReplayItem, ReplayRun
from extproxy.replay.paging import index_kinds
from extproxy.recorder import compress
from tests.conftest import fixture_bytes
from tests.test_replay import FULL
from tests.test_replay_pages import logged_in

pytestmark = pytest.mark.django_db(transaction=True)

# The shape replay/storing.store wrote before parts were compared: every key but "parts".
OLD_SHAPE = {"changed": True, "kinds": {"removed": 2}, "outcome": None, "error": None, "winner": None,
             "nodes": [{"node": "node-01", "backend": "b", "kind": "removed", "before": "scored", "after": None},
                       {"node": "node-03", "backend": "b", "kind": "removed", "before": "scored", "after": None}],
             "more_nodes": 0}


def recorded(form: str) -> Call:
    now = timezone.now()
    return Call.objects.create(verb="prioritize", backend="combined" if form == "combined" else "gpu", form=form,
                               started_at=now - timedelta(seconds=1), finished_at=now, outcome="ok", http_status=200,
                               attempt="", request_body=zlib.compress(b"R{}"), response_body=zlib.compress(b"R[]"),
                               decisions_blob=b"")


def run_of_old_diffs() -> tuple[ReplayRun, ReplayItem, ReplayItem]:
    run = ReplayRun.objects.create(selector={"filters": {}}, target={"kind": "configured"}, status="done",
                                   total=2, done=2, changed=2, counts={"removed": 2})
    blob = compress(msgspec.json.encode(OLD_SHAPE))
    combined = ReplayItem.objects.create(run=run, original=recorded("combined"), changed=True, kinds=["removed"], diff_blob=blob)
    single = ReplayItem.objects.create(run=run, original=recorded("per-backend"), changed=True, kinds=["removed"], diff_blob=blob)
    index_kinds([combined, single])  # as migration 0017 entered the kinds of items stored before it
    return run, combined, single



def test_the_run_page_says_a_combined_calls_parts_were_not_compared():
    run, combined, single = run_of_old_diffs()
    client = logged_in("developer")

    for query in ("", "?changed=1", "?kind=removed"):
        response = client.get(f"/replays/{run.pk}/{query}")
        assert response.status_code == 200
        rows = response.content.decode().split('<tr class="changed">')[1:]
        assert len(rows) == 2 and "removed ×2" in rows[0] and "2 node changes" in rows[0]
        assert "backend parts: not compared" in rows[0]  # the combined call's
        assert "not compared" not in rows[1]  # a per-backend call has no parts to compare
    combined.original.delete()  # pruned: whether it was combined is not known any more
    assert "backend parts: not compared" in client.get(f"/replays/{run.pk}/").content.decode()


def test_a_rows_node_changes_and_the_api_read_an_old_diff():
    run, combined, _ = run_of_old_diffs()
    client = logged_in("developer")

    fragment = client.get(f"/replays/{run.pk}/items/{combined.pk}/", HTTP_HX_REQUEST="true")
    assert fragment.status_code == 200 and fragment.content.decode().count("<tr><td>node-0") == 2
    item = client.get(f"/api/replays/{run.pk}/items/{combined.pk}/").json()
    assert "parts" in item["diff"] and item["diff"]["parts"] is None  # null: not compared, not "none changed"
    assert item["diff"]["kinds"] == {"removed": 2}
    listing = client.get(f"/api/replays/{run.pk}/?changed=1").json()
    assert listing["items_total"] == 2 and [i["kinds"] for i in listing["items"]] == [["removed"], ["removed"]]


def test_the_command_says_a_fixtures_parts_were_not_compared(tmp_path, write_config, backend_server, capsys):
    """A combined call's fixture without its parts (written by hand, or from before fixtures held
    them): its replay's parts are not compared, and --json says so (null), as the API does."""
    from django.core.management import call_command

    from tests.conftest import pass_all

    backend = backend_server({"filter": pass_all})
    config = write_config({"backends": [{"name": "b", "urlPrefix": f"{backend.url}/scheduler", "filterVerb": "filter",
                                         "weight": 1, "httpTimeout": "2s"}]})
    request = json.loads(fixture_bytes(FULL))
    fixture = {"call": {"id": 7, "verb": "filter", "backend": "combined", "form": "combined", "outcome": "error",
                        "error": "was down"},
               "request": request, "decisions": []}
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(fixture) + "\n")

    with pytest.raises(SystemExit) as exited:
        call_command("replay", "--fixtures", str(path), "--config", config, "--json")
    summary = json.loads(capsys.readouterr().out)
    assert exited.value.code == 1 and summary["changed"] == 1
    [changed] = summary["changed_calls"]
    assert "parts" in changed and changed["parts"] is None
