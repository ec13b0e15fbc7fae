"""Rows -> database: one transaction per batch (`BatchWriter`), for the recorder's loop (writer.py).

Stores a batch's calls, their backend parts, its new Node objects and drop records in one
transaction under the recorder's deadline (deadline.py); skips calls already stored by their
call_id (unanswered.py tells which of those a failed try of this batch stored); keeps Node
objects it refers to fresh, and stores again those a retention pass deleted meanwhile. This is
the only writer of call records. Must not run in the serving process.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from typing import Any, Collection

from ..config import RedactionConfig
from ..gaps import Drop, note_drops
from ..nodeindex import NodeSets
from .attempts import AttemptTracker
from .blobs import NodeDeduper, compress, nodes_carried
from .bulk import insert_rows, live_summary
from .deadline import Deadline
from .retention import TOUCH_EVERY
from .rows import Built, build_or_raw
from .trace import Trace
from .unanswered import UnansweredCommits

log = logging.getLogger(__name__)


class BatchWriter:
    """Rows -> database: one transaction per batch; node de-duplication across batches."""

    def __init__(self, redaction: RedactionConfig) -> None:
        self.redaction = redaction
        self.attempts = AttemptTracker()
        self.nodes = NodeDeduper(redaction)
        self.node_sets = NodeSets()
        self._touched: OrderedDict[str, float] = OrderedDict()
        self.raw = 0  # raw records stored: counted when stored, so a batch read again is not counted twice
        self._raw_ids: set[str] = set()  # call ids of the batch being built that are raw records
        self._traces: list[Trace] = []  # the batch being built: its bodies hold its Node objects
        self.nodes_stored_again = 0  # Node objects retention deleted while remembered here, stored again
        self.deadline = 0.0  # seconds one store may take (deadline.py); 0: no bound
        self.stop: threading.Event | None = None  # the process's stop: ends a store waiting on the database
        self.unanswered = UnansweredCommits()  # a failed try's commit the database took, found on the next

    def mark_raw(self, call_id: str) -> None:
        """The batch's call `call_id` is now a raw record (apart.py): counted as one when stored."""
        self._raw_ids.add(call_id)

    def build(self, traces: list[Trace]) -> tuple[list[Built], list, set[str]]:
        """The unsaved rows of a batch: (call, children) pairs, new Node objects, nodes used."""
        from ..models import NodeObject

        built = []
        self._raw_ids = set()
        for trace in traces:
            rows, raw = build_or_raw(trace, self.redaction, self.attempts, self.nodes)
            if raw:
                self._raw_ids.add(rows[0].call_id)
            built.append(rows)
        fresh, used = self.nodes.take_batch()
        new_nodes = [NodeObject(sha256=sha, name=name, data=compress(data)) for sha, (name, data) in fresh.items()]
        self._traces = traces
        self.unanswered.new_batch()
        return built, new_nodes, used - fresh.keys()

    def store(self, built: list[Built], new_nodes: list, used: Collection[str] = (),
              gaps: Collection[Drop] = ()) -> list[dict[str, Any]]:
        """One transaction; on failure nothing is stored and the same rows can be stored again.
        `gaps`: calls dropped (reason, calls, first and last time), stored as RecordingGap rows.

        Returns the summaries (the live stream's payload) of the calls newly stored.
        """
        from django.db import connections, transaction

        from ..models import BackendCall, Call, NodeObject

        with Deadline(self.deadline, connections["default"], self.stop) as deadline, transaction.atomic():
            deadline.set_server_limit()
            if new_nodes:  # one already stored (before a restart, say) is refreshed as if touched
                NodeObject.objects.bulk_create(new_nodes, update_conflicts=True, unique_fields=["sha256"],
                                               update_fields=["last_seen"], batch_size=500)
            gone = self._touch_nodes(used)
            if gone:
                self._store_again(gone)
            fresh, unanswered = self.unanswered.sort(built)
            self.unanswered.trying(fresh)
            calls = [call for call, _ in fresh]
            self.node_sets.assign(calls)
            insert_rows(Call, calls, conflict="call_id")
            children = []
            for call, kids in fresh:
                for kid in kids:
                    kid.pk = None
                    kid.call = call
                    children.append(kid)
            insert_rows(BackendCall, children)
            note_drops(gaps)
        self.unanswered.answered(fresh + unanswered)
        self.raw += sum(call.call_id in self._raw_ids for call, _ in fresh + unanswered)
        return [live_summary(call, kids) for call, kids in fresh + unanswered]

    def _touch_nodes(self, used: Collection[str]) -> list[str]:
        """Refresh last_seen of nodes still in use, each at most every TOUCH_EVERY seconds.

        Returns those found gone: deleted by a retention pass (this recorder's, another
        replica's, `manage.py prune`) while this writer still remembered them. A node it touched
        within TOUCH_EVERY cannot be one (retention keeps nodes seen within twice that).
        """
        from django.db import transaction
        from django.utils import timezone as dj_timezone

        from ..models import NodeObject

        now = time.monotonic()
        stale = [sha for sha in used if now - self._touched.get(sha, -TOUCH_EVERY) >= TOUCH_EVERY]
        gone: list[str] = []
        for start in range(0, len(stale), 500):
            chunk = stale[start : start + 500]
            if NodeObject.objects.filter(sha256__in=chunk).update(last_seen=dj_timezone.now()) < len(chunk):
                found = set(NodeObject.objects.filter(sha256__in=chunk).values_list("sha256", flat=True))
                gone += [sha for sha in chunk if sha not in found]
        if stale:  # only once stored: a batch stored again after a failure touches them again
            transaction.on_commit(lambda: self._remember_touched(stale, now))
        return gone

    def _remember_touched(self, shas: list[str], when: float) -> None:
        for sha in shas:
            self._touched[sha] = when
            self._touched.move_to_end(sha)
        while len(self._touched) > 200_000:
            self._touched.popitem(last=False)

    def _store_again(self, gone: list[str]) -> None:
        """Store again the Node objects of this batch that a retention pass deleted.

        Their bytes are in the batch's bodies: cut afresh, they give the same keys. Others this
        writer remembers may be gone too; each is found so when a later batch refers to it (not
        touched within TOUCH_EVERY, so touched then).
        """
        from django.db import transaction

        from ..models import NodeObject

        bodies = [body for trace in self._traces for part in (trace, *trace.backend_calls)
                  for body in (part.request_body, part.response_body)]
        carried = nodes_carried(bodies, self.redaction)
        again = [NodeObject(sha256=sha, name=carried[sha][0], data=compress(carried[sha][1]))
                 for sha in gone if sha in carried]
        NodeObject.objects.bulk_create(again, ignore_conflicts=True, batch_size=500)
        transaction.on_commit(lambda: setattr(self, "nodes_stored_again", self.nodes_stored_again + len(again)))
        log.warning("recorder: %d Node object(s) this batch refers to had been deleted by a retention pass; "
                    "stored again", len(again))
        if len(again) < len(gone):  # cannot happen unless cutting a body differs from the first time
            log.error("recorder: %d Node object(s) this batch refers to are gone and not in its bodies; "
                      "their calls will show them as no longer stored", len(gone) - len(again))

    def write(self, traces: list[Trace]) -> list[dict[str, Any]]:
        """Build and store at once (tools and tests that hold traces in hand)."""
        return self.store(*self.build(traces))
