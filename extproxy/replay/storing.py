"""A replayed call stored: its replay as a Call linked to the original (with its node set and
its parts), its ReplayItem with the diff, the item's kinds of change in the run's kind index
(paging.index_kinds), and the run's figures counting it, all in one transaction a call.

The result and the progress are the runner's (runner.Result, runner.Progress), not imported:
the runner imports this module.
"""
from __future__ import annotations

from typing import Any

import msgspec

from ..nodeindex import NodeSets
from ..recorder import NodeDeduper, compress
from ..recording.bulk import make_storable
from ..recording.rows import MAX_ERROR_TEXT
from ..redaction import bounded_text
from .paging import index_kinds


def store(result: Any, run, nodes: NodeDeduper, node_sets: NodeSets, progress: Any = None) -> Any:
    """Record the replay (linked to its original, with its node set), its ReplayItem with its
    kinds of change (paging.index_kinds), and the run's figures counting it (`progress`), in
    one transaction: whoever reads the run finds its figures equal to its stored items, also
    while it goes on (they were saved every PROGRESS_EVERY, and a page listed more calls of a
    kind than its total said). The item's error is redacted and bounded as a call's is: it can
    quote a target's URL with its password, or an exception's text of any length."""
    counted = progress.snapshot() if progress is not None else None
    try:
        return _store(result, run, nodes, node_sets, progress)
    except BaseException:
        if progress is not None and counted is not None:
            progress.restore(counted)  # the transaction is rolled back: so is the count
        raise


def _store(result: Any, run, nodes: NodeDeduper, node_sets: NodeSets, progress: Any) -> Any:
    from django.db import transaction

    from ..models import BackendCall, Call, NodeObject, ReplayItem

    replay = None
    with transaction.atomic():
        if result.call is not None:
            fresh, _ = nodes.take_batch()
            if fresh:
                NodeObject.objects.bulk_create(
                    [NodeObject(sha256=sha, name=name, data=compress(data)) for sha, (name, data) in fresh.items()],
                    ignore_conflicts=True,
                )
            replay = make_storable(result.call)
            replay.is_replay, replay.replay_of_id, replay.attempt = True, result.original.call_id, ""
            node_sets.assign([replay])  # build_call's pairs; a no-op while EXTPROXY_NODE_INDEX=0
            replay.save()
            for child in result.children:
                make_storable(child).call = replay
            BackendCall.objects.bulk_create(result.children)
        diff_json = result.diff.to_json() if result.diff else None
        item = ReplayItem.objects.create(
            run=run,
            original_id=result.original.call_id,
            replay=replay,
            changed=bool(result.diff and result.diff.changed),
            kinds=sorted(result.diff.kinds) if result.diff else [],
            diff_blob=compress(msgspec.json.encode(diff_json)) if diff_json else b"",
            error=bounded_text(result.error, nodes.rules, MAX_ERROR_TEXT),
            request_marks=result.original.marks if result.status == "replayed" else [],
        )
        index_kinds([item], not_replayed=result.status == "error")
        if progress is not None:
            progress.add(result)
            progress.write_figures()
    return replay
