"""The decision diff: what changed between a recorded call and its replay.

Both sides are what the recorder made of a call (outcome, error, and the decisions that the
judges of `extproxy.semantics` produced from the replies), so a combined call's outcome is the
scheduler's on both sides. Compared per (backend, node):

* `passed->failed` and every other flip between passed, failed, unresolvable and scored
  (a node only one side has is `added` or `removed`);
* `reason`: same result, other reason; `score` (raw) and `weighted_score` changes;
* `rank`: a node's place among the call's own scores (1 = best, ties share a place);
* `winner`: the best-scored node(s) of the call itself (prioritize: what the extenders add
  for the scheduler's choice), before and after;
* `outcome` (ok, error, timeout; e.g. `outcome:ok->timeout`; then no node is compared, as
  the scheduler drops a failed reply whole, but the error texts and the parts are shown) and
  `error` text changes (but for the URL the text names as the one posted to: a replay against
  another build posts to another URL);
* `part:<before>-><after>`: a combined call's part (one backend's) that went another way. The
  scheduler goes on without a failed prioritizer (or ignorable filter), so the call's own
  outcome stays `ok` and the nodes alone would only say that backend's verdicts went missing
  (`removed`), not that its replacement was down or too slow. A part one side did not make is
  `absent`.

Pure: no Django, no I/O. The per-node list is bounded (MAX_NODE_CHANGES); counts are not.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

MAX_NODE_CHANGES = 500
VICTIMS = "victims: "  # how a preempt decision's reason begins (semantics/judge.py victims_reason)
MAX_MARKS = 20  # redaction marks kept with a replayed item; the rest counted
MAX_MARK_TEXT = 200  # characters of each
# Where an error text names the URL it was posted to (semantics/judge.py for a non-200 answer,
# semantics/errors.py for no answer): the target's URL by design in a replay against another
# build, so not compared.
POSTED_TO = re.compile(r'(?<=with extender at URL )\S+(?=, code \d)|(?<=Post ")[^"]*(?=": )')


def kept_marks(marks: list[str]) -> list[str]:
    """The redaction marks of a replayed request as an item keeps them (bounded)."""
    kept = [str(mark)[:MAX_MARK_TEXT] for mark in marks[:MAX_MARKS]]
    if len(marks) > MAX_MARKS:
        kept.append(f"and {len(marks) - MAX_MARKS} more")
    return kept


def redaction_note(marks: list[str]) -> str:
    """What a replay of a request that was not sent as received must say with its diff: the
    target got the redacted bytes, so a change may be the redaction's, not the target's."""
    if not marks:
        return ""
    return f"request was redacted: {'; '.join(marks)}; a change here may come from the redaction"


@dataclass
class Side:
    """One side of the comparison: what the recorder stored for a call."""

    backend: str  # the call's own backend ("combined" for the combined form)
    verb: str
    outcome: str
    error: str
    decisions: list[dict]
    # A combined call's parts: backend -> (outcome, error); None where not known (per-backend
    # calls, the shadows), and then not compared.
    parts: dict[str, tuple[str, str]] | None = None


@dataclass
class Diff:
    kinds: Counter = field(default_factory=Counter)  # kind -> number of nodes (or 1 for call-level)
    nodes: list[dict] = field(default_factory=list)  # {"node","backend","kind","before","after"}
    more_nodes: int = 0  # node changes past MAX_NODE_CHANGES, counted but not listed
    outcome: dict | None = None
    error: dict | None = None
    winner: dict | None = None
    parts: list[dict] = field(default_factory=list)  # {"backend","before","after","error_before","error_after"}

    @property
    def changed(self) -> bool:
        return bool(self.kinds)

    def to_json(self) -> dict[str, Any]:
        return {
            "changed": self.changed,
            "kinds": dict(sorted(self.kinds.items())),
            "outcome": self.outcome,
            "error": self.error,
            "winner": self.winner,
            "parts": self.parts,
            "nodes": self.nodes,
            "more_nodes": self.more_nodes,
        }

    def _node(self, node: str, backend: str, kind: str, before: Any, after: Any) -> None:
        self.kinds[kind] += 1
        if len(self.nodes) < MAX_NODE_CHANGES:
            self.nodes.append({"node": node, "backend": backend, "kind": kind, "before": before, "after": after})
        else:
            self.more_nodes += 1


def _by_key(decisions: Iterable[dict]) -> dict[tuple[str, str], dict]:
    return {(d.get("backend") or "", d.get("node") or ""): d for d in decisions}


def ranks(decisions: Iterable[dict], backend: str) -> dict[str, int]:
    """Competition ranking by weighted score (1 = best; equal scores share a place)."""
    scores = {d["node"]: d.get("weighted_score") or 0 for d in decisions if d.get("backend") == backend and d.get("result") == "scored"}
    ordered = sorted(scores.values(), reverse=True)
    return {node: ordered.index(score) + 1 for node, score in scores.items()}


def winners(decisions: Iterable[dict], backend: str) -> list[str]:
    """The best-scored node(s) of `backend`'s scores; several on a tie (the scheduler then
    picks one at random, after adding its own plugins' scores)."""
    scores = {d["node"]: d.get("weighted_score") or 0 for d in decisions if d.get("backend") == backend and d.get("result") == "scored"}
    if not scores:
        return []
    best = max(scores.values())
    return sorted(node for node, score in scores.items() if score == best)


def diff(before: Side, after: Side) -> Diff:
    result = Diff()
    if before.outcome != after.outcome:
        # The call itself went another way: its nodes' verdicts on the failing side are not the
        # scheduler's (it drops a failed reply whole), so they are not compared one by one.
        # The error texts (not a kind of their own: the outcome's is the change) and the parts
        # say why: "ok -> error" alone sent the developer to the replayed call to learn it.
        result.outcome = {"before": before.outcome, "after": after.outcome}
        result.kinds[f"outcome:{before.outcome}->{after.outcome}"] += 1
        if before.error != after.error:
            result.error = {"before": before.error, "after": after.error}
        _compare_parts(result, before.parts, after.parts)
        return result
    if POSTED_TO.sub("<url>", before.error) != POSTED_TO.sub("<url>", after.error):
        result.error = {"before": before.error, "after": after.error}
        result.kinds["error"] += 1
    _compare_parts(result, before.parts, after.parts)
    old, new = _by_key(before.decisions), _by_key(after.decisions)
    for key in list(old) + [k for k in new if k not in old]:
        _compare_node(result, key, old.get(key), new.get(key), before.verb == "preempt")
    _compare_ranks(result, before, after)
    return result


ABSENT = ("absent", "")


def parts_of(backend_calls: Iterable[Any]) -> dict[str, tuple[str, str]]:
    """A combined call's parts (BackendCall rows, stored or not) as Side.parts takes them."""
    return {part.backend: (part.outcome, part.error) for part in backend_calls}


def _compare_parts(result: Diff, before: dict[str, tuple[str, str]] | None,
                   after: dict[str, tuple[str, str]] | None) -> None:
    if before is None or after is None:
        return
    for backend in list(before) + [b for b in after if b not in before]:
        (was, was_error), (now, now_error) = before.get(backend, ABSENT), after.get(backend, ABSENT)
        if was != now:
            result.kinds[f"part:{was}->{now}"] += 1
            result.parts.append({"backend": backend, "before": was, "after": now,
                                 "error_before": was_error, "error_after": now_error})


def _compare_node(result: Diff, key: tuple[str, str], was: dict | None, now: dict | None, preempt: bool) -> None:
    backend, node = key
    if was is None or now is None:
        kind = "added" if was is None else "removed"
        present = now if was is None else was
        assert present is not None
        result._node(node, backend, kind, None if was is None else was["result"], None if now is None else now["result"])
        return
    if was["result"] != now["result"]:
        result._node(node, backend, f"{was['result']}->{now['result']}", was.get("reason"), now.get("reason"))
        return
    if not _same_reason(was.get("reason") or "", now.get("reason") or "", preempt):
        result._node(node, backend, "reason", was.get("reason"), now.get("reason"))
    if was.get("score") != now.get("score"):
        result._node(node, backend, "score", was.get("score"), now.get("score"))
    if was.get("weighted_score") != now.get("weighted_score"):
        result._node(node, backend, "weighted_score", was.get("weighted_score"), now.get("weighted_score"))


def _same_reason(was: str, now: str, preempt: bool) -> bool:
    """Reasons alike; a preempt decision's victims compared as a set (judge.victims_reason sorts
    them, a decision stored before it did may list them in the reply's order)."""
    if was == now:
        return True
    if not (preempt and was.startswith(VICTIMS) and now.startswith(VICTIMS)):
        return False
    return _victims_key(was) == _victims_key(now)


def _victims_key(reason: str) -> tuple[list[str], str]:
    uids, _, violations = reason[len(VICTIMS):].partition("; ")
    return sorted(uids.split(", ")), violations


def _compare_ranks(result: Diff, before: Side, after: Side) -> None:
    if before.verb != "prioritize":
        return
    backends = {d.get("backend") for d in before.decisions + after.decisions if d.get("result") == "scored"}
    for backend in sorted(b for b in backends if b):
        old, new = ranks(before.decisions, backend), ranks(after.decisions, backend)
        for node in old:
            if node in new and old[node] != new[node]:
                result._node(node, backend, "rank", old[node], new[node])
    was, now = winners(before.decisions, before.backend), winners(after.decisions, after.backend)
    if was != now:
        result.winner = {"before": was, "after": now}
        result.kinds["winner"] += 1
    elif was:
        result.winner = {"before": was, "after": now}  # unchanged, shown for context
