"""A batch the database refuses, stored call by call, so that one call cannot stop the record.

The Drainer retries a batch that failed to store, with backoff, for as long as it fails: an
outage (the database refused the connection, cut it off, was locked) or a fault that is not
the batch's own (read-only, a permission or a table missing, a bug) loses nothing that way, the
batch waits in the spool. But a refusal of the data itself (DataError, IntegrityError: a value a
column cannot take) fails the same way on every retry while the spool fills behind it, until
every later call is dropped as `spool-full`. Such a batch is stored apart instead (`StoreApart`):
- its Node objects and drop records first, without its calls (the drop records alone when the
  Node objects are refused; the calls are then all stored raw, their bodies whole);
- then each call in a transaction of its own;
- a call the database still refuses is stored as a raw record (bodies as received, finding
  `unstorable` with the database's reason), as a call that cannot be decoded is;
- and one refused even so is counted as dropped, reason `unstorable`.
Any other failure on the way is raised to the Drainer, which retries; every step is idempotent
(calls by their call_id, drop records by their values) and `run` resumes at the step it stopped.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

from ..config import RedactionConfig
from ..gaps import Drop
from ..redaction import bounded_text
from .rows import MAX_FINDING_TEXT, Built, raw_call
from .trace import Trace

log = logging.getLogger(__name__)


def is_refusal(exc: BaseException) -> bool:
    """The database refused the data itself: it will refuse the same rows again. A string the
    driver cannot encode is one too (storable_text keeps such strings out; this is the net)."""
    from django.db import DataError, IntegrityError

    refusals: tuple[type[BaseException], ...] = (UnicodeEncodeError, DataError, IntegrityError)
    try:  # COPY goes through psycopg's own cursor: its errors are not Django's
        import psycopg

        refusals += (psycopg.DataError, psycopg.IntegrityError)
    except ImportError:
        pass
    return isinstance(exc, refusals)


class StoreApart:
    """One refused batch's progress through the steps above; `run` resumes where a failure
    other than a refusal stopped it."""

    def __init__(self, writer: Any, traces: list[Trace], built: list[Built], new_nodes: list, used: Any,
                 gaps: Any, rules: RedactionConfig, drop: Callable[[Drop], None]) -> None:
        self.writer = writer
        self.traces, self.built = traces, built
        self.new_nodes, self.used, self.gaps = new_nodes, used, gaps
        self.rules = rules
        self.drop = drop  # counted and noted as a gap
        self.nodes_stored: bool | None = None  # None: not tried yet
        self.gaps_stored = False
        self.next = 0  # the next call to store
        self.raw: Built | None = None  # the next call's raw record, once its own was refused
        self.summaries: list[dict[str, Any]] = []
        self.refusal = ""  # the database's last reason, redacted

    def run(self) -> list[dict[str, Any]]:
        if self.nodes_stored is None:
            self.nodes_stored = self._try(lambda: self.writer.store([], self.new_nodes, self.used, self.gaps))
            self.gaps_stored = self.nodes_stored
        if not self.gaps_stored:
            if not self._try(lambda: self.writer.store([], [], (), self.gaps)):
                log.error("recorder: the database refused a batch's drop records (%s); they are counted only",
                          self.refusal)
            self.gaps_stored = True
        while self.next < len(self.built):
            trace, rows = self.traces[self.next], self.built[self.next]
            if self.raw is None:
                if self.nodes_stored and self._try(lambda: self.summaries.extend(self.writer.store([rows], [], (), ()))):
                    self.next += 1
                    continue
                what = "the call's record" if self.nodes_stored else "the Node objects of the call's batch"
                why = bounded_text(f"the database refused {what} ({self.refusal})", self.rules, MAX_FINDING_TEXT)
                self.raw = raw_call(trace, "unstorable", why, self.rules)
                self.writer.mark_raw(trace.call_id)  # only this form of the call is stored from here on
            raw = self.raw
            if not self._try(lambda: self.summaries.extend(self.writer.store([raw], [], (), ()))):
                log.error("recorder: call %s dropped: the database refused even its raw record (%s)",
                          trace.call_id, self.refusal)
                self.drop(Drop("unstorable", 1, trace.started_at, trace.finished_at, f"call {trace.call_id}"))
            self.next, self.raw = self.next + 1, None
        return self.summaries

    def _try(self, store: Callable[[], Any]) -> bool:
        try:
            store()
            return True
        except Exception as exc:
            if not is_refusal(exc):
                raise
            self.refusal = bounded_text(f"{type(exc).__name__}: {exc}".strip(), self.rules, 512)
            return False
