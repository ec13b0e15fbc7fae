"""Recording: Trace -> spool -> database, in its own process; node store, attempts, rows,
live events, retention.

Modules, each owning one step (imports only go down this list, never up):
  trace      the Trace the hot path builds, and its spooled byte form
  spool      the durable on-disk spool: its format, cursors, locks, and the serving side's writer
  spool_reader  the recorder side of the spool: reading in order, committing, deleting, torn tails
  observe    what /metrics and /readyz show: spool depth/bytes/age, the recorder's counters
  dropcount  the serving process's drops by reason, written down as gap records in the spool
  handoff    the hot path's `submit` and the spool-writer thread (serving process)
  abandoned  what a killed serving process left where no serving process comes back: counted by the recorder
  caches     what is remembered by bytes: the size-bounded LRU, the redaction of a body's field
  blobs      compression, Node de-duplication, restoring stored bodies
  attempts   linking a pod's calls into scheduling attempts
  rows       Trace -> Call/BackendCall rows (judging, redaction, bounds, raw records)
  retention  deleting old calls and unreferenced nodes
  redact_again  one stored field under the redaction rules of now (pure)
  redact_stored  those rules over every record already kept (`manage.py redact`)
  writer     the recorder process's loop: spool -> rows -> database in batches
  live       live summaries to the channel layer after commit
  local      in-process recording for tools and unit tests
This package is the only writer of call records.
"""
from .blobs import NodeDeduper, compact_body, compress, decompress, restore_body
from .handoff import SpoolRecorder
from .live import LIVE_GROUP
from .trace import Trace, new_call_id

__all__ = [
    "LIVE_GROUP", "NodeDeduper", "SpoolRecorder", "Trace", "compact_body", "compress", "decompress",
    "new_call_id", "restore_body",
]
