"""Retention's maxCalls keeps the scheduler's calls and replays apart: a replay run of the
whole store must not evict the recordings it replayed (a real backend, a real database)."""
from __future__ import annotations

import pytest

from extproxy.config import RetentionConfig, parse_config
from extproxy.models import Call, RecordingGap, ReplayRun
from extproxy.recording.retention import prune
from extproxy.replay.runner import run_replay
from tests.conftest import pass_all
from tests.test_replay_scale import record_calls, without_nagle

pytestmark = pytest.mark.django_db(transaction=True)


def test_max_calls_counts_recordings_and_replays_each_on_their_own(backend_server):
    backend = backend_server({"filter": without_nagle(pass_all)})
    config = parse_config({"backends": [{"name": "gpu", "urlPrefix": backend.url, "filterVerb": "filter",
                                         "nodeCacheCapable": True, "httpTimeout": "5s"}]}, "<test>")
    record_calls(50)
    originals = set(Call.objects.values_list("pk", flat=True))
    for _ in range(2):  # two runs: 100 replays, twice the bound
        run = ReplayRun.objects.create(selector={"filters": {"verb": "filter"}}, target={"kind": "configured"}, rate=0)
        run_replay(run, config=config)
        assert run.status == "done" and run.done == 50, run.error

    pruned = prune(RetentionConfig(max_age_seconds=0, max_calls=50))

    assert set(Call.objects.filter(is_replay=False).values_list("pk", flat=True)) == originals
    newest = list(Call.objects.filter(is_replay=True).order_by("-started_at", "-id").values_list("pk", flat=True))
    assert pruned.calls == 50 and len(newest) == 50
    assert set(newest) == set(ReplayRun.objects.order_by("-id").first().items.values_list("replay_id", flat=True))
    # Replays are not the scheduler's calls: their pruning is no gap of an export of those.
    assert sum(RecordingGap.objects.values_list("calls", flat=True)) == 0
    assert prune(RetentionConfig(max_age_seconds=0, max_calls=20)).calls == 60  # each kept to its newest 20
    assert sum(RecordingGap.objects.filter(reason="pruned-count").values_list("calls", flat=True)) == 30
