"""A batch that takes longer than EXTPROXY_DB_STATEMENT_DEADLINE, stored in halves.

The deadline (deadline.py) ends a store that goes on too long, whether the database is away or
the batch itself is too much for it in that time (large calls, a slow disk, a lock held longer
than the deadline). Retried whole, such a batch failed the same way for ever while the spool
filled behind it. So when a store fails on the deadline and the database still answers a
transaction of its own (`answers`), the batch is split in two and each half stored in turn,
down to a single call. A single call that still fails on it stays in the spool (a record is
never dropped): it is retried with backoff, counted under `over-deadline`, logged at most once a
second, and `extproxy_recorder_over_deadline` is 1 until it is stored. A database that answers
nothing is an outage, retried whole as before.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Collection

from ..gaps import Drop
from ..ratelog import RateLimitedLog
from .deadline import DeadlinePassed
from .rows import Built
from .trace import Trace

log = logging.getLogger(__name__)
_ratelog = RateLimitedLog(log, interval=1.0)

OVER_DEADLINE = "over-deadline"
QUERY_CANCELED = "57014"  # SQLSTATE of a statement the server ended (its statement_timeout among them)


@dataclass
class Piece:
    """A batch, or part of one: its calls, and what is stored with its first part only (its new
    Node objects, the nodes it touches, its drop records), so a later part finds them stored."""

    traces: list[Trace]
    built: list[Built]
    new_nodes: list = field(default_factory=list)
    used: Collection[str] = ()
    gaps: Collection[Drop] = ()

    def halves(self) -> list[Piece]:
        middle = len(self.built) // 2
        return [Piece(self.traces[:middle], self.built[:middle], self.new_nodes, self.used, self.gaps),
                Piece(self.traces[middle:], self.built[middle:])]


def on_the_deadline(exc: BaseException) -> bool:
    """The store ended on the deadline: the watchdog's (DeadlinePassed) or the server's own
    statement_timeout (SET LOCAL in the store's transaction), which ends a long statement first."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, DeadlinePassed) or getattr(seen, "sqlstate", None) == QUERY_CANCELED:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def answers(seconds: float, wrapper: Any, stop: Any) -> bool:
    """Whether the database commits an empty transaction within the deadline: the same way a
    batch is stored (a COMMIT that is taken and never answered is no answer)."""
    from django.db import transaction

    from .deadline import Deadline, close_quietly

    try:
        with Deadline(seconds, wrapper, stop, "recorder: probe"), transaction.atomic(using=wrapper.alias):
            with wrapper.cursor() as cursor:
                cursor.execute("SELECT 1")
        return True
    except Exception:
        close_quietly(wrapper)
        return False


def note_over_deadline(calls: int, deadline: float, error: str) -> None:
    _ratelog.emit(logging.ERROR, OVER_DEADLINE, "recorder: %d call(s) alone take longer than "
                  "EXTPROXY_DB_STATEMENT_DEADLINE (%g s) to store, while the database answers; kept in the "
                  "spool and retried (%s)", calls, deadline, error)
