"""A batch the database refuses, stored call by call, so that one call cannot stop the record.

The Drainer retries a batch that failed to store for as long as the database is away: that is
an outage (OperationalError, InterfaceError: refused, cut off, locked, a deadlock), and the
batch waits in the spool. Any other failure (a DataError, a value a column cannot take) would
fail the same way on every retry while the spool filled behind it, until every call was dropped
as `spool-full`. Such a batch is stored apart instead (`StoreApart`):
- its Node objects and drop records first, without its calls;
- then each call in a transaction of its own;
- a call the database still refuses is stored as a raw record (bodies as received, finding
  `unstorable` with the database's reason), as a call that cannot be decoded is;
- and one refused even so is counted as dropped, reason `unstorable`.
Every step is idempotent (calls by their call_id, drop records by their values), so an outage
in the middle is retried from the step it stopped at.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

from ..config import RedactionConfig
from ..redaction import bounded_text
from .rows import MAX_FINDING_TEXT, Built, raw_call
from .trace import Trace

log = logging.getLogger(__name__)


def _outage_errors() -> tuple[type[BaseException], ...]:
    from django.db import InterfaceError, OperationalError

    errors: list[type[BaseException]] = [OperationalError, InterfaceError]
    try:  # COPY goes through psycopg's own cursor: its errors are not Django's
        import psycopg

        errors += [psycopg.OperationalError, psycopg.InterfaceError]
    except ImportError:
        pass
    return tuple(errors)


def is_outage(exc: BaseException) -> bool:
    """True for a failure that retrying the same batch later can get past."""
    return isinstance(exc, _outage_errors())


class StoreApart:
    """One refused batch's progress through the steps above; `run` resumes where an outage
    stopped it and raises only for an outage."""

    def __init__(self, writer: Any, traces: list[Trace], built: list[Built], new_nodes: list, used: Any,
                 gaps: Any, rules: RedactionConfig, drop: Callable[[str, int, float, float], None]) -> None:
        self.writer = writer
        self.traces, self.built = traces, built
        self.new_nodes, self.used, self.gaps = new_nodes, used, gaps
        self.rules = rules
        self.drop = drop  # (reason, calls, first, last): counted and noted as a gap
        self.nodes_stored: bool | None = None  # None: not tried yet
        self.next = 0  # the next call to store
        self.summaries: list[dict[str, Any]] = []
        self.refusal = ""  # the database's last reason, redacted

    def run(self) -> list[dict[str, Any]]:
        if self.nodes_stored is None:
            self.nodes_stored = self._try(lambda: self.writer.store([], self.new_nodes, self.used, self.gaps))
            if not self.nodes_stored and not self._try(lambda: self.writer.store([], [], (), self.gaps)):
                log.error("recorder: the database refused the drop records of a batch; they are counted only")
        while self.next < len(self.built):
            trace, rows = self.traces[self.next], self.built[self.next]
            if self.nodes_stored and self._try(lambda: self.summaries.extend(self.writer.store([rows], [], (), ()))):
                self.next += 1
                continue
            why = bounded_text(f"the database refused the call's record ({self.refusal})", self.rules, MAX_FINDING_TEXT)
            raw = raw_call(trace, "unstorable", why, self.rules)
            self.writer.mark_raw(trace.call_id)
            if not self._try(lambda: self.summaries.extend(self.writer.store([raw], [], (), ()))):
                log.error("recorder: call %s dropped: the database refused even its raw record (%s)",
                          trace.call_id, self.refusal)
                self.drop("unstorable", 1, trace.started_at, trace.finished_at)
            self.next += 1
        return self.summaries

    def _try(self, store: Callable[[], Any]) -> bool:
        try:
            store()
            return True
        except Exception as exc:
            if is_outage(exc):
                raise
            self.refusal = bounded_text(f"{type(exc).__name__}: {exc}".strip(), self.rules, 512)
            return False
