"""A batch replay goes on past a call it cannot replay: a call stored raw (its request cannot be
decoded), or a large reply that broke off or missed the deadline, costs one item's error, never
the run."""
from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest

from extproxy.config import RecordingConfig, RedactionConfig, parse_config
from extproxy.models import Call, ReplayItem, ReplayRun
from extproxy.recorder import Recorder, Trace
from extproxy.replay.runner import run_replay
from tests.conftest import fixture_bytes, pass_all
from tests.test_replay_scale import without_nagle

NAMES = "captured-kube-scheduler-1.24/filter-request.nodecache-true.json"


def gpu_config(url: str, **fields) -> object:
    return parse_config({"backends": [{"name": "gpu", "urlPrefix": url, "filterVerb": "filter",
                                       "nodeCacheCapable": True, "httpTimeout": "5s", **fields}]}, "<test>")


def record(bodies: list[bytes]) -> None:
    """Filter calls as the recorder stores them (raw when the request cannot be decoded)."""
    names = json.loads(fixture_bytes(NAMES))["NodeNames"]
    response = json.dumps({"NodeNames": names, "FailedNodes": {}, "Error": ""}).encode()
    now = time.time()
    Recorder(RecordingConfig(), RedactionConfig()).write_batch([Trace(
        verb="filter", backend="gpu", url="http://gpu", started_at=now + i / 1000, finished_at=now + i / 1000 + 0.001,
        request_body=body, status=200, response_body=response, answered_status=200, node_cache_capable=True, weight=1,
    ) for i, body in enumerate(bodies)])


def undecodable_bodies() -> list[bytes]:
    good = fixture_bytes(NAMES)
    bad_env = json.loads(good)
    bad_env["Pod"]["spec"]["containers"][0]["env"] = 5
    return [
        json.dumps(bad_env).encode(),
        good.replace(b'"name":"', b'"name":"\xff\xfe', 1),  # not UTF-8
        good.replace(b'"spec":{', b'"spec":{"deep":' + b"[" * 5000 + b"]" * 5000 + b",", 1),  # 5000 deep
    ]


@pytest.mark.django_db(transaction=True)
def test_calls_stored_raw_are_item_errors_and_the_batch_goes_on(backend_server):
    backend = backend_server({"filter": without_nagle(pass_all)})
    good = fixture_bytes(NAMES)
    record([good] + undecodable_bodies() + [good, good])
    raw = [c.pk for c in Call.objects.order_by("started_at") if c.findings and c.findings[0]["kind"].startswith("undecodable")]
    assert len(raw) == 3  # the recorder kept them raw

    run = ReplayRun.objects.create(selector={"filters": {"verb": "filter"}}, target={"kind": "configured"}, rate=0)
    run_replay(run, config=gpu_config(backend.url))

    run.refresh_from_db()
    assert (run.status, run.total, run.done, run.errors, run.changed, run.error) == ("done", 6, 6, 3, 0, "")
    items = {item.original_id: item for item in ReplayItem.objects.filter(run=run)}
    for call_id in raw:
        assert items[call_id].error.startswith("the recorded call cannot be replayed"), items[call_id].error
        assert items[call_id].replay is None
    assert sum(1 for item in items.values() if item.replay_id and not item.error) == 3


@pytest.mark.django_db(transaction=True)
def test_one_raw_call_replayed_alone_is_a_done_run_with_an_item_error(backend_server):
    backend = backend_server({"filter": without_nagle(pass_all)})
    record(undecodable_bodies()[2:])
    [call] = Call.objects.all()
    run = ReplayRun.objects.create(selector={"call": call.pk}, target={"kind": "configured"}, rate=0)
    run_replay(run, config=gpu_config(backend.url))
    run.refresh_from_db()
    assert (run.status, run.done, run.errors) == ("done", 1, 1)
    assert "RecursionError" in ReplayItem.objects.get(run=run).error


@pytest.mark.django_db(transaction=True)
def test_a_large_reply_that_breaks_off_or_runs_out_of_time_is_that_calls_outcome(backend_server):
    """Replies over the relay size are passed on as they arrive: one that ends early is judged as
    the proxy records it (the scheduler takes it as a failed call), and the batch goes on."""
    import socket

    from extproxy.replay.stored import item_diff
    from tests.test_relay import REPLY, first_half_then

    def closes(handler) -> None:
        handler.close_connection = True
        handler.connection.shutdown(socket.SHUT_RDWR)

    def stalls(handler) -> None:
        time.sleep(2)  # past the budget: httpTimeout 1s

    def whole(handler) -> None:
        handler.wfile.write(REPLY[len(REPLY) // 2:])

    plan = [first_half_then(closes), first_half_then(stalls), first_half_then(whole)]
    backend = backend_server({"filter": lambda handler, body: plan.pop(0)(handler, body)})
    record([fixture_bytes(NAMES)] * 3)
    run = ReplayRun.objects.create(selector={"filters": {"verb": "filter"}}, target={"kind": "configured"}, rate=0)
    run_replay(run, config=gpu_config(backend.url, httpTimeout="1s"))

    run.refresh_from_db()
    assert (run.status, run.total, run.done, run.errors, run.error) == ("done", 3, 3, 0, "")
    items = list(ReplayItem.objects.filter(run=run).order_by("id"))
    assert [item_diff(item)["outcome"] for item in items[:2]] == [{"before": "ok", "after": "error"},
                                                                 {"before": "ok", "after": "timeout"}]
    replays = [Call.objects.get(pk=item.replay_id) for item in items]
    assert replays[0].error == "unexpected EOF" and replays[1].error.startswith("no complete answer within")
    assert "claims a filtered node" in replays[2].error  # whole: judged as kube-scheduler would (names unknown)


@pytest.mark.django_db(transaction=True)
def test_progress_is_saved_before_waiting_for_the_next_call_at_a_slow_rate(backend_server, monkeypatch):
    import extproxy.replay.runner as runner
    from tests.test_replay_scale import record_calls

    backend = backend_server({"filter": without_nagle(pass_all)})
    record_calls(3)
    run = ReplayRun.objects.create(selector={"filters": {"verb": "filter"}}, target={"kind": "configured"}, rate=0.05)
    done_while_waiting = []

    def wait(seconds: float) -> None:  # 20 s a call: what the run's page reads meanwhile
        done_while_waiting.append((round(seconds), ReplayRun.objects.get(pk=run.pk).done))
        now[0] += seconds

    now = [time.monotonic()]  # the runner's clock: it moves only when the runner waits
    monkeypatch.setattr(runner, "time", SimpleNamespace(sleep=wait, monotonic=lambda: now[0]))
    # The rate's wait is check_cancelled's (a cancel cuts it short): here, the same fake wait.
    monkeypatch.setattr(runner, "check_cancelled", lambda run, seconds=0.0: wait(seconds) if seconds > 0 else None)
    run_replay(run, config=gpu_config(backend.url))

    assert done_while_waiting == [(20, 1), (20, 2)]
    run.refresh_from_db()
    assert (run.status, run.done) == ("done", 3)
