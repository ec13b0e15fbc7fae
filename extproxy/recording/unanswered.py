"""Calls whose COMMIT the database took but never answered, found stored on the next try.

A batch's transaction can be committed on the server while its answer never reaches the
recorder (a server or pooler wedged right after the COMMIT; the deadline then shuts the
connection, deadline.py): the recorder holds the batch as not stored and tries again, and that
try finds the calls stored by their call_id and skips them, as it skips calls stored before a
restart. Those of a restart were counted by the process that stored them (it saves its counters
before moving the spool cursor); these were counted by no one, and were never sent to the live
stream. So the call ids each failed try of the batch attempted are remembered here, and those
found stored on a later try are this process's own unanswered commit: counted and published
then, once. The spool has one recorder, so nothing else stores the batch's calls meanwhile.
"""
from __future__ import annotations

from .rows import Built


class UnansweredCommits:
    """The call ids of the batch being stored that a failed try may have committed."""

    def __init__(self) -> None:
        self._tried: set[str] = set()

    def new_batch(self) -> None:
        self._tried.clear()

    def sort(self, built: list[Built]) -> tuple[list[Built], list[Built]]:
        """(not stored yet, stored by an earlier try of this batch that was never answered).
        A call_id repeated in the batch is taken once."""
        from ..models import Call

        ids = [call.call_id for call, _ in built]
        stored: dict[str, int] = {}
        for start in range(0, len(ids), 500):
            stored.update(Call.objects.filter(call_id__in=ids[start : start + 500]).values_list("call_id", "id"))
        fresh, unanswered, seen = [], [], set()
        for rows in built:
            call_id = rows[0].call_id
            if call_id in seen:
                continue
            seen.add(call_id)
            if call_id not in stored:
                fresh.append(rows)
            elif call_id in self._tried:
                rows[0].id = stored[call_id]  # its live summary names the stored row
                unanswered.append(rows)
        return fresh, unanswered

    def trying(self, built: list[Built]) -> None:
        """Before the commit: these may be stored whether or not an answer comes."""
        self._tried.update(call.call_id for call, _ in built)

    def answered(self, built: list[Built]) -> None:
        """The commit was answered: these are counted now, and must not be again."""
        self._tried.difference_update(call.call_id for call, _ in built)
