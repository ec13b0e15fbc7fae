"""The decision diff, as truth tables: every kind of change, and what does not count."""
from __future__ import annotations

import pytest

from extproxy.replay.diff import MAX_NODE_CHANGES, Side, diff, ranks, winners


def d(node, result, reason=None, score=None, weight=1, backend="gpu"):
    weighted = None if score is None else score * weight * 10
    return {"node": node, "backend": backend, "result": result, "reason": reason, "score": score, "weighted_score": weighted}


def side(decisions, verb="filter", outcome="ok", error="", backend="gpu"):
    return Side(backend, verb, outcome, error, decisions)


def test_it_finds_nothing_when_nothing_changed():
    same = [d("a", "passed"), d("b", "failed", "busy")]
    result = diff(side(same), side(list(same)))
    assert not result.changed and result.nodes == [] and result.to_json()["kinds"] == {}


@pytest.mark.parametrize(
    "before, after, kind",
    [
        (d("a", "passed"), d("a", "failed", "gpu busy"), "passed->failed"),
        (d("a", "failed", "gpu busy"), d("a", "passed"), "failed->passed"),
        (d("a", "failed", "x"), d("a", "unresolvable", "x"), "failed->unresolvable"),
        (d("a", "unresolvable", "x"), d("a", "passed"), "unresolvable->passed"),
        (d("a", "failed", "gpu busy"), d("a", "failed", "no gpu"), "reason"),
        (d("a", "failed", None), d("a", "failed", "now a reason"), "reason"),
    ],
)
def test_it_names_each_flip_and_reason_change(before, after, kind):
    result = diff(side([before]), side([after]))
    assert result.changed and dict(result.kinds) == {kind: 1}
    assert result.nodes == [{"node": "a", "backend": "gpu", "kind": kind, "before": before["reason"] if kind != "reason" else before["reason"], "after": after["reason"]}]


def test_it_reports_raw_and_weighted_score_changes_ranks_and_the_winner():
    before = [d("a", "scored", score=8, weight=2), d("b", "scored", score=3, weight=2), d("c", "scored", score=1, weight=2)]
    after = [d("a", "scored", score=2, weight=2), d("b", "scored", score=3, weight=2), d("c", "scored", score=1, weight=2)]
    result = diff(side(before, "prioritize"), side(after, "prioritize"))
    assert result.kinds["score"] == 1 and result.kinds["weighted_score"] == 1
    assert result.kinds["rank"] == 2  # a fell from 1 to 2, b rose from 2 to 1
    assert result.winner == {"before": ["a"], "after": ["b"]} and result.kinds["winner"] == 1
    moves = {n["node"]: (n["before"], n["after"]) for n in result.nodes if n["kind"] == "rank"}
    assert moves == {"a": (1, 2), "b": (2, 1)}


def test_it_counts_a_weight_change_as_weighted_only():
    result = diff(side([d("a", "scored", score=5, weight=1)], "prioritize"), side([d("a", "scored", score=5, weight=3)], "prioritize"))
    assert dict(result.kinds) == {"weighted_score": 1}


def test_it_shares_ranks_on_ties_and_lists_every_tied_winner():
    scored = [d("a", "scored", score=5), d("b", "scored", score=5), d("c", "scored", score=1)]
    assert ranks(scored, "gpu") == {"a": 1, "b": 1, "c": 3}
    assert winners(scored, "gpu") == ["a", "b"]


@pytest.mark.parametrize(
    "was, now, kind",
    [("ok", "error", "outcome:ok->error"), ("ok", "timeout", "outcome:ok->timeout"), ("error", "ok", "outcome:error->ok")],
)
def test_it_reports_outcome_changes_and_nothing_else_then(was, now, kind):
    result = diff(side([d("a", "passed")] if was == "ok" else [], outcome=was), side([d("a", "passed")] if now == "ok" else [], outcome=now))
    assert result.outcome == {"before": was, "after": now} and dict(result.kinds) == {kind: 1} and result.nodes == []


def test_it_reports_a_changed_error_text():
    result = diff(side([], outcome="error", error="code 500"), side([], outcome="error", error="code 503"))
    assert result.error == {"before": "code 500", "after": "code 503"} and dict(result.kinds) == {"error": 1}


def test_it_reports_nodes_only_one_side_has():
    result = diff(side([d("a", "passed")]), side([d("b", "passed")]))
    assert dict(result.kinds) == {"removed": 1, "added": 1}


def test_it_compares_each_backend_of_a_combined_call_apart():
    before = [d("a", "passed", backend="combined"), d("a", "passed", backend="one"), d("a", "passed", backend="two")]
    after = [d("a", "failed", "x", backend="combined"), d("a", "passed", backend="one"), d("a", "failed", "x", backend="two")]
    result = diff(side(before, backend="combined"), side(after, backend="combined"))
    assert {(n["backend"], n["kind"]) for n in result.nodes} == {("combined", "passed->failed"), ("two", "passed->failed")}


def test_it_bounds_the_node_list_but_counts_every_change():
    n = MAX_NODE_CHANGES + 25
    result = diff(side([d(f"n{i}", "passed") for i in range(n)]), side([d(f"n{i}", "failed", "x") for i in range(n)]))
    assert len(result.nodes) == MAX_NODE_CHANGES and result.more_nodes == 25 and result.kinds["passed->failed"] == n


def test_a_preempt_decision_changes_with_its_pdb_violations_and_not_with_its_victims_order():
    def preempt(reason):
        return side([d("node-1", "passed", reason)], verb="preempt")

    assert not diff(preempt("victims: a, b"), preempt("victims: b, a")).changed  # as stored before sorting
    assert not diff(preempt("victims: a, b; PDB violations: 1"), preempt("victims: b, a; PDB violations: 1")).changed
    pdb = diff(preempt("victims: a, b"), preempt("victims: a, b; PDB violations: 1"))
    assert dict(pdb.kinds) == {"reason": 1} and pdb.nodes[0]["after"] == "victims: a, b; PDB violations: 1"
    assert dict(diff(preempt("victims: a, b"), preempt("victims: a, c")).kinds) == {"reason": 1}
    # Only a preempt decision's victims are a set: a filter reason is text.
    assert diff(side([d("n", "failed", "victims: a, b")]), side([d("n", "failed", "victims: b, a")])).changed


def test_an_old_combined_error_naming_no_url_is_the_same_error_as_the_one_recorded_now():
    """Combined calls recorded before their error named the path the scheduler posted to said
    "URL combined/preempt"; a replay of one, answered the same, is not an `error` change."""
    old = "failed preempt with extender at URL combined/preempt, code 502"
    now = "failed preempt with extender at URL /extender/preempt, code 502"
    assert diff(side([], verb="preempt", outcome="error", error=old, backend="combined"),
                side([], verb="preempt", outcome="error", error=now, backend="combined")).kinds == {}
    # Another status is still a change.
    assert diff(side([], verb="preempt", outcome="error", error=old, backend="combined"),
                side([], verb="preempt", outcome="error", error=now.replace("502", "500"), backend="combined")).kinds == {"error": 1}
