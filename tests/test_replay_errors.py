"""What a replay writes of its own errors: redacted and bounded as a call's error is, and a run's
error written only by the run that has one (a progress save must not undo `manage.py redact`)."""
from __future__ import annotations

import pytest

from extproxy.config import RedactionConfig, parse_config
from extproxy.models import ReplayItem, ReplayRun
from extproxy.nodeindex import NodeSets
from extproxy.recorder import NodeDeduper
from extproxy.recording.rows import MAX_ERROR_TEXT
from extproxy.replay.runner import Original, Result, run_replay
from extproxy.replay.storing import store
from tests.test_combined import failing
from tests.test_replay_scale import record_calls, without_nagle

SECRET = "hunter2-replay-secret"


def backend_config(backend_server):
    backend = backend_server({"filter": without_nagle(failing({"gpu-node-1": "cordoned"}))})
    return parse_config({"backends": [{"name": "gpu", "urlPrefix": backend.url, "filterVerb": "filter",
                                       "nodeCacheCapable": True, "httpTimeout": "5s"}]}, "<test>")


@pytest.mark.django_db(transaction=True)
def test_a_failed_runs_error_is_redacted_and_bounded(backend_server):
    config = backend_config(backend_server)
    record_calls(2)
    run = ReplayRun.objects.create(selector={"filters": {"verb": "filter"}}, target={"kind": "configured"}, rate=0)

    def fail(result) -> None:  # an exception whose text quotes a secret, at any length
        raise RuntimeError(f"cannot go on: password={SECRET} " + "x" * 100_000)

    run_replay(run, config=config, on_result=fail)
    run.refresh_from_db()
    assert run.status == "failed" and run.done == 1
    assert run.error.startswith("RuntimeError: cannot go on: password=[redacted]")
    assert SECRET not in run.error
    assert len(run.error) == MAX_ERROR_TEXT


@pytest.mark.django_db(transaction=True)
def test_an_items_error_is_redacted_and_bounded():
    run = ReplayRun.objects.create(selector={"call": 1}, target={"kind": "url", "url": "http://x"}, rate=0)
    original = Original(None, "filter", "gpu", "per-backend", b"{}", "ok", "", [])
    error = f"target http://dev:{SECRET}@extender.example:8888/ refused: token: {SECRET} " + "y" * 50_000
    store(Result("error", original, error=error), run, NodeDeduper(RedactionConfig()), NodeSets())
    item = ReplayItem.objects.get(run=run)
    assert SECRET not in item.error
    assert item.error.startswith("target http://dev:[redacted]@extender.example:8888/ refused: token: [redacted]")
    assert len(item.error) == MAX_ERROR_TEXT


@pytest.mark.django_db(transaction=True)
def test_progress_saves_leave_the_error_field_to_whoever_wrote_it_until_the_run_ends(backend_server, monkeypatch):
    import extproxy.replay.runner as runner

    monkeypatch.setattr(runner, "PROGRESS_EVERY", 0.0)  # a progress save after every call
    config = backend_config(backend_server)
    record_calls(3)
    run = ReplayRun.objects.create(selector={"filters": {"verb": "filter"}}, target={"kind": "configured"}, rate=0)
    seen = []

    def meanwhile(result) -> None:  # another process (redact, say) writes the field while the run goes on
        if seen:  # the progress saved since the last call left it as it was
            assert ReplayRun.objects.get(pk=run.pk).error == f"written meanwhile {len(seen)}"
        seen.append(ReplayRun.objects.get(pk=run.pk).done)
        ReplayRun.objects.filter(pk=run.pk).update(error=f"written meanwhile {len(seen)}")

    run_replay(run, config=config, on_result=meanwhile)
    run.refresh_from_db()
    assert seen == [1, 2, 3]  # the figures were written with each call's item, and saves went on between calls
    assert (run.status, run.done, run.error) == ("done", 3, "")  # the end writes the run's own


@pytest.mark.django_db(transaction=True)
def test_a_call_whose_pod_name_holds_nul_is_replayed_and_stored(backend_server):
    import json
    import time

    from extproxy.config import RecordingConfig
    from extproxy.models import Call
    from extproxy.recorder import Recorder, Trace
    from tests.conftest import fixture_json

    config = backend_config(backend_server)
    args = fixture_json("captured-kube-scheduler-1.24/filter-request.nodecache-true.json")
    args["Pod"]["metadata"]["name"] = "pod\u0000x"  # PostgreSQL takes no NUL in text
    now = time.time()
    Recorder(RecordingConfig(), RedactionConfig()).write_batch([Trace(
        verb="filter", backend="gpu", url="http://gpu", started_at=now, finished_at=now + 0.001,
        request_body=json.dumps(args).encode(), status=200, answered_status=200, node_cache_capable=True, weight=1,
        response_body=json.dumps({"NodeNames": args["NodeNames"], "FailedNodes": {}, "Error": ""}).encode())])
    run = ReplayRun.objects.create(selector={"filters": {"verb": "filter"}}, target={"kind": "configured"}, rate=0)
    run_replay(run, config=config)
    run.refresh_from_db()
    assert (run.status, run.done, run.errors, run.error) == ("done", 1, 0, "")
    assert Call.objects.get(is_replay=True).pod_name == "pod\ufffdx"
