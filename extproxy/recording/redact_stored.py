"""The current redaction rules applied to every record already kept (`manage.py redact`).

Walks each table in key order, in batches bounded by rows and by stored bytes, and writes only the
fields that change, a batch in one transaction. A run that stops half way is run again: what it
wrote stays written, and redacting a field again changes nothing. Only fields are updated, never
whole rows, so the recorder may keep writing (it adds rows; it does not rewrite these fields).

Node objects are judged first (which change under the rules, and how: the bodies that refer to
them gain the marks) and written last. A run stopped in between leaves bodies that announce a
redaction not yet made, never a Node redacted that its bodies do not mention; run again, it makes
it. At most NODE_MARKS_MAX of them are held at once: past that, the bodies are read again for each
further set, only to mark them. Rows recorded after the run began are not read (the processes run
the new rules by then). What a field becomes is redact_again.py's; this module reads and writes.
"""
from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from django.db import OperationalError, models, transaction
from django.db.models import Max
from django.db.models.functions import Coalesce, Length

from ..config import RedactionConfig
from . import redact_again
from .rows import MAX_ERROR_TEXT

log = logging.getLogger(__name__)

BATCH_ROWS = 200
BATCH_BYTES = 32 << 20  # stored bytes read at once (one row larger than this is read alone)
_KEYS_AT_ONCE = 2000
# Node objects the rules change, held with their marks at once (a few hundred bytes each). A rule
# that changes more (one label of every node, over every version of each kept) takes more rounds.
NODE_MARKS_MAX = 100_000
WRITE_ATTEMPTS = 5


@dataclass(frozen=True)
class Table:
    """Which fields of a model hold what, for redaction."""

    model: type[models.Model]
    texts: tuple[tuple[str, int], ...] = ()  # (field, the length it was cut to when stored)
    bodies: tuple[str, ...] = ()
    decisions: tuple[str, ...] = ()
    findings: tuple[str, ...] = ()
    diffs: tuple[str, ...] = ()  # a replay's compressed diff

    @property
    def name(self) -> str:
        return self.model._meta.label

    @property
    def blobs(self) -> tuple[str, ...]:
        return self.bodies + self.decisions + self.diffs

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.texts) + self.blobs + self.findings


def record_tables() -> tuple[Table, ...]:
    """extproxy's own tables that hold what a Pod, a backend or the scheduler wrote."""
    from ..models import BackendCall, Call, ReplayItem, ReplayRun

    call = dict(texts=(("error", MAX_ERROR_TEXT),), bodies=("request_body", "response_body"),
                decisions=("decisions_blob",), findings=("findings",))
    return (
        Table(Call, **call),  # type: ignore[arg-type]
        Table(BackendCall, **call),  # type: ignore[arg-type]
        Table(ReplayItem, texts=(("error", MAX_ERROR_TEXT),), diffs=("diff_blob",)),
        Table(ReplayRun, texts=(("error", MAX_ERROR_TEXT),)),
    )


@dataclass
class Tally:
    examined: Counter = field(default_factory=Counter)  # table -> rows read
    changed: Counter = field(default_factory=Counter)  # "table.field" -> rows whose field changed
    failed: Counter = field(default_factory=Counter)  # table -> rows that could not be redacted
    passes: int = 0  # over the bodies: one, and one more for each further NODE_MARKS_MAX Node objects


class RedactionRun:
    """One run over the record: `run` (the node store judged, each table, the node store written)."""

    def __init__(self, rules: RedactionConfig, *, dry_run: bool = False, batch_rows: int = BATCH_ROWS,
                 batch_bytes: int = BATCH_BYTES, progress: Callable[[Tally], None] | None = None) -> None:
        self.rules = rules
        self.dry_run = dry_run
        self.batch_rows = batch_rows
        self.batch_bytes = batch_bytes
        self.progress = progress or (lambda tally: None)
        self.tally = Tally()
        self.node_marks: dict[str, list[str]] = {}
        self.bodies = redact_again.Bodies(rules, self.node_marks)

    def run(self, tables: tuple[Table, ...]) -> Tally:
        """Every table once; past NODE_MARKS_MAX changed Node objects, the bodies again for each
        further set of them (only to mark those), so that what is held stays bounded."""
        after: str | None = None
        first = True
        while True:
            after = self.nodes(after)
            if first or self.node_marks:
                self.tally.passes += 1
                for table in tables:
                    self.table(table, marks_only=not first)
            self.write_nodes()
            self.node_marks.clear()
            first = False
            if after is None:
                return self.tally

    # node objects ----------------------------------------------------------------------
    def nodes(self, after: str | None = None) -> str | None:
        """Which Node objects after key `after` the rules change, with their marks (nothing written
        yet): up to NODE_MARKS_MAX of them. The key to go on after, or None when none is left."""
        from ..models import NodeObject

        name = NodeObject._meta.label
        for rows in self._batches(NodeObject, ("data",), after=after):
            for row in rows:
                self.tally.examined[name] += 1
                answer = self._node(row)
                if answer is not None:
                    self.node_marks[row.pk] = answer[1]
                    if len(self.node_marks) >= NODE_MARKS_MAX:
                        return row.pk
            self.progress(self.tally)
        return None

    def _node(self, row: Any) -> tuple[bytes, list[str]] | None:
        try:
            return redact_again.node(row.data, self.rules)
        except Exception:  # an unreadable Node object is counted and said; the others go on
            log.exception("redact: Node object %s could not be redacted", row.pk)
            self.tally.failed[row._meta.label] += 1
            return None

    def write_nodes(self) -> None:
        """Redact the Node objects judged by `nodes`, in place, under their keys."""
        from ..models import NodeObject

        name = NodeObject._meta.label
        keys = sorted(self.node_marks)
        for start in range(0, len(keys), self.batch_rows):
            updates = []
            for row in NodeObject.objects.filter(pk__in=keys[start:start + self.batch_rows]).only("data"):
                answer = self._node(row)
                if answer is not None:
                    updates.append((row.pk, {"data": answer[0]}))
                    self.tally.changed[f"{name}.data"] += 1
            self._write(NodeObject, updates)
            self.progress(self.tally)

    # the other tables --------------------------------------------------------------------
    def table(self, table: Table, marks_only: bool = False) -> None:
        """Each row of the table; with `marks_only`, only bodies (to mark Node objects judged since)."""
        if marks_only and not table.bodies:
            return
        for rows in self._batches(table.model, table.blobs, table.bodies if marks_only else table.fields):
            updates = []
            for row in rows:
                if not marks_only:
                    self.tally.examined[table.name] += 1
                changes = self._row(table, row, marks_only)
                if changes:
                    updates.append((row.pk, changes))
                    for name in changes:
                        self.tally.changed[f"{table.name}.{name}"] += 1
            self._write(table.model, updates)
            self.progress(self.tally)

    def _row(self, table: Table, row: Any, marks_only: bool = False) -> dict[str, Any]:
        """The row's fields that change. A field that cannot be read is logged and counted, and
        the row's other fields are redacted all the same."""
        kinds: list[tuple[str, Callable[[Any], Any]]] = [(name, self.bodies.body) for name in table.bodies]
        if not marks_only:
            kinds += [
                *((name, lambda value, limit=limit: redact_again.text(value, self.rules, limit)) for name, limit in table.texts),
                *((name, lambda value: redact_again.findings(value, self.rules)) for name in table.findings),
                *((name, lambda value: redact_again.decisions(value, self.rules)) for name in table.decisions),
                *((name, lambda value: redact_again.replay_diff(value, self.rules)) for name in table.diffs),
            ]
        changes: dict[str, Any] = {}
        failed = False
        for name, redact in kinds:
            try:
                value = redact(getattr(row, name))
            except Exception:  # one odd field must not stop the run
                log.exception("redact: %s %s: %s could not be redacted", table.name, row.pk, name)
                failed = True
                continue
            if value is not None:
                changes[name] = value
        if failed:
            self.tally.failed[table.name] += 1
        return changes

    # reading and writing -----------------------------------------------------------------
    def _batches(self, model: type[models.Model], blobs: tuple[str, ...], fields: tuple[str, ...] | None = None,
                 after: Any = None) -> Iterator[list[Any]]:
        """The rows in key order, a list at a time: at most `batch_rows`, and at most `batch_bytes`
        of the blob fields unless one row alone holds more. Only rows up to the last key there is
        when it starts: rows recorded meanwhile follow the new rules already (the processes were
        restarted with them), and a recorder that writes faster than this reads is not chased."""
        size: Any = sum((Coalesce(Length(name), 0) for name in blobs), models.Value(0))
        ceiling = model.objects.aggregate(last=Max("pk"))["last"]
        if ceiling is None:
            return
        last = after
        while True:
            query = model.objects.order_by("pk").filter(pk__lte=ceiling)
            if last is not None:
                query = query.filter(pk__gt=last)
            sizes = list(query.annotate(stored_size=size).values_list("pk", "stored_size")[:_KEYS_AT_ONCE])
            if not sizes:
                return
            group: list[Any] = []
            held = 0
            for pk, bytes_ in sizes:
                if group and (len(group) >= self.batch_rows or held + bytes_ > self.batch_bytes):
                    yield self._rows(model, group, fields or blobs)
                    group, held = [], 0
                group.append(pk)
                held += bytes_ or 0
            yield self._rows(model, group, fields or blobs)
            last = sizes[-1][0]

    @staticmethod
    def _rows(model: type[models.Model], keys: list[Any], fields: tuple[str, ...]) -> list[Any]:
        return list(model.objects.filter(pk__in=keys).order_by("pk").only(*fields))

    def _write(self, model: type[models.Model], updates: list[tuple[Any, dict[str, Any]]]) -> None:
        """One transaction; tried again when the database refused it for now (SQLite locked,
        a PostgreSQL deadlock); after WRITE_ATTEMPTS its rows are counted as failed and the run
        goes on (run again, they are redacted then)."""
        if self.dry_run or not updates:
            return
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            try:
                self._update(model, updates)
                return
            except OperationalError as exc:
                log.warning("redact: writing %d %s rows failed (attempt %d of %d): %s",
                            len(updates), model._meta.label, attempt, WRITE_ATTEMPTS, exc)
                if attempt < WRITE_ATTEMPTS:
                    time.sleep(min(0.1 * 2 ** attempt, 2.0))
        self.tally.failed[model._meta.label] += len(updates)

    @staticmethod
    def _update(model: type[models.Model], updates: list[tuple[Any, dict[str, Any]]]) -> None:
        with transaction.atomic():
            for pk, changes in updates:
                model.objects.filter(pk=pk).update(**changes)
