"""Tests for the judge part of extproxy.semantics: one backend's reply, read like kube-scheduler."""

from __future__ import annotations

import json

import msgspec
import pytest

from extproxy.config import BackendConfig
from extproxy.protocol import MetaVictims
from extproxy.semantics import Result, judge_bind, judge_filter, judge_preempt, judge_prioritize
from tests.conftest import FIXTURES as FIX

URL = "http://backend:8888/scheduler"
NAMES = ["node-01", "node-02", "node-03", "node-04", "node-05"]


def be(name: str, **kw) -> BackendConfig:
    """A backend with every verb, at URL (the judges read its name, target, mode and weight)."""
    fields = dict(url_prefix=URL, weight=1, node_cache_capable=True, filter_verb="filter",
                  prioritize_verb="prioritize", preempt_verb="preempt", bind_verb="bind")
    return BackendConfig(name=name, **{**fields, **kw})


def fx(name: str) -> bytes:
    return (FIX / name).read_bytes()


def kinds(v) -> list[str]:
    return [f["kind"] for f in v.findings]


def results(v) -> dict:
    return {d.node: (d.result, d.reason) for d in v.decisions}


# ------------------------------------------------------------------ common rules


@pytest.mark.parametrize("status", [201, 204, 301, 400, 404, 500, 503])
@pytest.mark.parametrize(
    "call, verb",
    [
        (lambda s, b: judge_filter(be("b", node_cache_capable=True), NAMES, s, b), "filter"),
        (lambda s, b: judge_prioritize(be("b", weight=1), NAMES, s, b), "prioritize"),
        (lambda s, b: judge_bind(be("b"), s, b), "bind"),
        (lambda s, b: judge_preempt(be("b"), {"node-02": ["u"]}, s, b), "preempt"),
    ],
)
def test_it_fails_every_non_200(call, verb, status):
    v = call(status, b'{"Error":""}')
    assert v.outcome == "error"
    assert v.error == f"failed {verb} with extender at URL {URL}/{verb}, code {status}"
    assert kinds(v) == ["non-200"] and v.decisions == []


@pytest.mark.parametrize(
    "body, kind",
    [(b"", "empty-body"), (b"  \n", "empty-body"), (b"{", "undecodable"), (b"nope", "undecodable"),
     (b"[]", "undecodable"), (b'{"Error":5,"NodeNameToMetaVictims":5,"NodeNames":5}', "undecodable"), (b"5", "undecodable")],
)
@pytest.mark.parametrize(
    "call",
    [
        lambda b: judge_filter(be("b", node_cache_capable=True), NAMES, 200, b),
        lambda b: judge_bind(be("b"), 200, b),
        lambda b: judge_preempt(be("b"), {"node-02": ["u"]}, 200, b),
    ],
)
def test_it_fails_undecodable_bodies(call, body, kind):
    v = call(body)
    assert v.outcome == "error" and v.error and v.decisions == []
    assert kinds(v) == [kind]


@pytest.mark.parametrize(
    "call",
    [
        lambda b: judge_filter(be("b", node_cache_capable=True), NAMES, 200, b),
        lambda b: judge_bind(be("b"), 200, b),
    ],
)
def test_it_fails_error_under_200(call):
    v = call(b'{"Error":"boom", "NodeNames":["node-01"], "FailedNodes":{"node-02":"x"}}')
    assert (v.outcome, v.error, v.decisions) == ("error", "boom", [])
    assert kinds(v) == ["error-under-200"]


def test_it_ignores_error_keys_in_preempt_replies():
    # ExtenderPreemptionResult has no Error field: the key is unknown and ignored
    v = judge_preempt(be("b"), {"node-02": ["u"]}, 200, b'{"Error":"boom"}')
    assert (v.outcome, v.error) == ("ok", "")
    assert judge_preempt(be("b"), {"node-02": ["u"]}, 200, b'{"Error":5}').outcome == "ok"


def test_it_accepts_trailing_bytes_and_null_bodies():
    v = judge_bind(be("b"), 200, b'{"Error":""} garbage')
    assert (v.outcome, v.error) == ("ok", "")
    assert judge_bind(be("b"), 200, b"null").outcome == "ok"
    f = judge_filter(be("b", node_cache_capable=True), NAMES, 200, b"null")
    assert f.outcome == "ok" and f.passed == [] and "no-list" in kinds(f)


# ------------------------------------------------------------------ filter


def test_it_reads_the_filter_fixture_in_names_mode():
    v = judge_filter(be("gpu", node_cache_capable=True), NAMES, 200, fx("filter-result.nodecache-true.json"))
    assert v.outcome == "ok" and v.findings == []
    assert v.passed == ["node-01", "node-03"]
    assert v.failed == {"node-02": "example.com/gpu: 2 of 4 devices are held by lower-priority pods; need 2 free"}
    assert set(v.unresolvable) == {"node-04", "node-05"}
    assert [d.result for d in v.decisions] == ["passed", "failed", "passed", "unresolvable", "unresolvable"]
    assert all(d.backend == "gpu" and d.score is None for d in v.decisions)


def test_it_reads_the_filter_fixture_in_objects_mode():
    v = judge_filter(be("gpu", node_cache_capable=False), NAMES, 200, fx("filter-result.nodecache-false.json"))
    assert v.outcome == "ok" and v.findings == []
    assert v.passed == ["node-01", "node-03"]
    assert results(v)["node-04"][0] == "unresolvable"


def test_it_reads_the_legacy_lowercase_filter_fixture():
    v = judge_filter(be("gpu", node_cache_capable=True), NAMES, 200, fx("filter-result.legacy-lowercase-keys.json"))
    assert v.outcome == "ok"
    assert v.passed == ["node-01", "node-03"]
    assert results(v)["node-02"][0] == "failed"
    assert results(v)["node-04"] == ("failed", None)
    assert kinds(v) == ["dropped-without-reason"]
    assert "node-04, node-05" in v.findings[0]["detail"]


def test_it_fails_the_filter_error_fixture():
    v = judge_filter(be("gpu", node_cache_capable=True), NAMES, 200, fx("filter-result.error.json"))
    assert (v.outcome, v.error) == ("error", "gpu inventory unavailable: upstream timeout after 2s")


def _nodes(*names: str) -> dict:
    return {"metadata": {}, "items": [{"metadata": {"name": n}} for n in names]}


@pytest.mark.parametrize(
    "mode, reply, outcome, passed, finding",
    [
        # names mode: NodeNames wins, must be a subset
        (True, {"NodeNames": ["node-01"]}, "ok", ["node-01"], None),
        (True, {"NodeNames": ["node-01", "node-99"]}, "error", None, "name-not-in-input"),
        (True, {"NodeNames": [], "Nodes": _nodes("node-01")}, "ok", [], None),
        (True, {"NodeNames": None, "Nodes": _nodes("node-02")}, "ok", ["node-02"], None),
        (True, {"Nodes": _nodes("node-99")}, "ok", ["node-99"], "name-not-in-input"),
        (True, {}, "ok", [], "no-list"),
        (True, {"NodeNames": None, "Nodes": None}, "ok", [], "no-list"),
        # objects mode: only Nodes is read, unchecked
        (False, {"Nodes": _nodes("node-01")}, "ok", ["node-01"], None),
        (False, {"Nodes": _nodes("node-01", "node-99")}, "ok", ["node-01", "node-99"], "name-not-in-input"),
        (False, {"NodeNames": ["node-01"]}, "ok", [], "wrong-list-for-mode"),
        (False, {"NodeNames": ["node-01"], "Nodes": _nodes("node-02")}, "ok", ["node-02"], None),
        (False, {"Nodes": {"items": []}}, "ok", [], None),
        (False, {"Nodes": {"items": None}}, "ok", [], None),
        (False, {}, "ok", [], "no-list"),
        # legacy spelling in both modes
        (True, {"nodenames": ["node-03"]}, "ok", ["node-03"], None),
        (False, {"nodes": {"items": [{"metadata": {"name": "node-03"}}]}}, "ok", ["node-03"], None),
    ],
)
def test_it_applies_the_filter_list_truth_table(mode, reply, outcome, passed, finding):
    reply = {**reply, "FailedNodes": {n: "no" for n in NAMES if n not in json.dumps(reply)}}
    v = judge_filter(be("b", node_cache_capable=mode), NAMES, 200, json.dumps(reply).encode())
    assert v.outcome == outcome
    if outcome == "error":
        assert v.error == (
            f'extender "{URL}" claims a filtered node "node-99" which is not found in the input node list'
        )
        assert v.decisions == [] and v.passed is None
    else:
        assert v.passed == passed
        assert len(v.decisions) == len(NAMES)
        for d in v.decisions:
            assert d.result == ("passed" if d.node in passed else "failed")
    if finding:
        assert finding in kinds(v)
    else:
        assert [k for k in kinds(v) if k != "dropped-without-reason"] == []


@pytest.mark.parametrize(
    "failed, unres, node02",
    [
        ({"node-02": "a"}, {}, ("failed", "a")),
        ({}, {"node-02": "b"}, ("unresolvable", "b")),
        ({"node-02": "a"}, {"node-02": "b"}, ("unresolvable", "b")),  # unresolvable wins
        ({}, {}, ("failed", None)),
        ({"node-02": None}, {}, ("failed", "")),
    ],
)
def test_it_gives_unresolvable_precedence(failed, unres, node02):
    body = json.dumps({"NodeNames": ["node-01"], "FailedNodes": failed,
                       "FailedAndUnresolvableNodes": unres}).encode()
    v = judge_filter(be("b", node_cache_capable=True), ["node-01", "node-02"], 200, body)
    assert results(v)["node-02"] == node02
    assert results(v)["node-01"] == ("passed", None)
    if node02[0] == "unresolvable":
        assert "node-02" not in v.failed and v.unresolvable["node-02"] == node02[1]
    assert ("dropped-without-reason" in kinds(v)) == (node02[1] is None)


def test_it_notes_failure_names_outside_the_input_and_passed_and_failed():
    body = json.dumps({"NodeNames": ["node-01"], "FailedNodes": {"node-01": "x", "ghost": "y"}}).encode()
    v = judge_filter(be("b", node_cache_capable=True), ["node-01"], 200, body)
    assert v.outcome == "ok" and v.passed == ["node-01"]
    assert set(kinds(v)) == {"unknown-failed-name", "passed-and-failed"}


# ------------------------------------------------------------------ prioritize


def test_it_reads_the_prioritize_fixtures():
    for name in ("prioritize-result.json", "prioritize-result.legacy-lowercase-keys.json"):
        v = judge_prioritize(be("b", weight=5), ["node-01", "node-03"], 200, fx(name))
        assert v.outcome == "ok" and v.findings == []
        assert v.scores == {"node-01": 8, "node-03": 3}
        assert [(d.node, d.result, d.score, d.weighted_score) for d in v.decisions] == [
            ("node-01", "scored", 8, 400), ("node-03", "scored", 3, 150)]


@pytest.mark.parametrize(
    "score, kind",
    [(b"5.0", "float-score"), (b"5.5", "float-score"), (b'"5"', "string-score"),
     (b"true", "undecodable"), (b"1e1", "float-score")],
)
def test_it_discards_the_whole_reply_for_non_integer_scores(score, kind):
    body = b'[{"Host":"node-01","Score":8},{"Host":"node-03","Score":' + score + b"}]"
    v = judge_prioritize(be("b", weight=1), ["node-01", "node-03"], 200, body)
    assert v.outcome == "error" and v.decisions == [] and v.scores is None
    assert kinds(v) == [kind]
    assert v.error.startswith("json: cannot unmarshal ")


@pytest.mark.parametrize(
    "reply, weight, scores, reasons, found",
    [
        ([], 1, {"a": 0, "b": 0}, {"a": "no score returned", "b": "no score returned"}, []),
        ([{"Host": "a", "Score": 3}], 2, {"a": 3, "b": 0}, {"a": None, "b": "no score returned"}, []),
        ([{"Host": "a", "Score": 3}, {"Host": "a", "Score": 4}], 1, {"a": 7, "b": 0},
         {"a": None, "b": "no score returned"}, ["duplicate-name"]),
        ([{"Host": "z", "Score": 3}, {"Host": "b", "Score": 1}], 1, {"a": 0, "b": 1},
         {"a": "no score returned", "b": None}, ["name-not-in-input"]),
        ([{"Host": "a", "Score": 11}, {"Host": "b", "Score": -1}], 1, {"a": 11, "b": -1},
         {"a": None, "b": None}, ["score-out-of-range", "score-out-of-range"]),
        ([{"Host": "a", "Score": None}], 1, {"a": 0, "b": 0}, {"a": None, "b": "no score returned"}, []),
        (None, 1, {"a": 0, "b": 0}, {"a": "no score returned", "b": "no score returned"}, []),
    ],
)
def test_it_applies_the_prioritize_truth_table(reply, weight, scores, reasons, found):
    v = judge_prioritize(be("b", weight=weight), ["a", "b"], 200, json.dumps(reply).encode())
    assert v.outcome == "ok"
    assert v.scores == scores
    assert {d.node: d.reason for d in v.decisions} == reasons
    assert {d.node: d.weighted_score for d in v.decisions} == {
        n: s * weight * 10 for n, s in scores.items()}
    assert kinds(v) == found


def test_it_fails_prioritize_on_empty_body_and_object_reply():
    assert kinds(judge_prioritize(be("b", weight=1), ["a"], 200, b"")) == ["empty-body"]
    v = judge_prioritize(be("b", weight=1), ["a"], 200, b'{"Host":"a","Score":1}')
    assert v.outcome == "error" and kinds(v) == ["undecodable"]


# ------------------------------------------------------------------ bind


@pytest.mark.parametrize(
    "body, outcome, error",
    [
        (fx("bind-result.json"), "ok", ""),
        (fx("bind-result.error.json"), "error",
         'Operation cannot be fulfilled on pods/binding "trainer-7d9c5b6f8-b4x2s": pod '
         'trainer-7d9c5b6f8-b4x2s is already assigned to node "node-03"'),
        (b"{}", "ok", ""),
        (b'{"error":"x"}', "error", "x"),
        (b'{"Error":null}', "ok", ""),
    ],
)
def test_it_judges_bind_replies(body, outcome, error):
    v = judge_bind(be("b"), 200, body)
    assert (v.outcome, v.error, v.decisions) == (outcome, error, [])


# ------------------------------------------------------------------ preempt

INPUT = {"node-02": ["e22bba58-41e9-514f-be15-cdca249f41b7"],
         "node-03": ["bbf3e57f-9c21-526d-bc7b-764060222c6c", "fafeac27-3212-55d0-95df-9ad338e018fe"]}


def test_it_reads_the_preempt_fixture():
    v = judge_preempt(be("b"), INPUT, 200, fx("preempt-result.json"))
    assert v.outcome == "ok" and v.findings == []
    assert v.victims == {"node-02": MetaVictims(["e22bba58-41e9-514f-be15-cdca249f41b7"], 0)}
    assert results(v) == {"node-02": ("passed", "victims: e22bba58-41e9-514f-be15-cdca249f41b7"),
                          "node-03": ("failed", "dropped by backend")}


def _pre(m) -> bytes:
    return json.dumps({"NodeNameToMetaVictims": m}).encode()


@pytest.mark.parametrize(
    "body, outcome, error, found",
    [
        (_pre({"node-03": {"Pods": [{"UID": "fafeac27-3212-55d0-95df-9ad338e018fe"}], "NumPDBViolations": 0}}),
         "ok", "", []),
        (_pre({"node-02": {"Pods": [{"UID": "bbf3e57f-9c21-526d-bc7b-764060222c6c"}]}}), "error",
         f'extender "{URL}" claims to preempt pod (UID: bbf3e57f-9c21-526d-bc7b-764060222c6c) on node: '
         "node-02, but the pod is not found on that node", ["victim-not-in-input"]),
        (_pre({"node-09": {"Pods": [{"UID": "x"}]}}), "error",
         f'extender "{URL}" claims to preempt pod (UID: x) on node: node-09, but the pod is not found on that node',
         ["node-not-in-input"]),
        (_pre({"node-02": {"Pods": []}}), "error", 'expected at least one victim pod on node "node-02"',
         ["empty-victims"]),
        (_pre({"node-02": {"Pods": None}}), "error", 'expected at least one victim pod on node "node-02"',
         ["empty-victims"]),
        # a nil *MetaVictims or *MetaPod: convertToVictims dereferences it, the scheduler panics
        (_pre({"node-02": None}), "error",
         "extproxy: victims of node 'node-02' are null (a nil *MetaVictims): kube-scheduler dereferences it "
         "in convertToVictims (pkg/scheduler/extender.go) and panics", ["nil-victim"]),
        (_pre({"node-02": {"Pods": [{"UID": INPUT["node-02"][0]}, None]}}), "error",
         "extproxy: victims of node 'node-02' are a Pods list holding 1 null(s) (nil *MetaPod): kube-scheduler "
         "dereferences it in convertToVictims (pkg/scheduler/extender.go) and panics", ["nil-victim"]),
        (_pre({}), "ok", "", []),
        (_pre(None), "ok", "", []),
        (json.dumps({"NodeNameToVictims": {"node-02": {"Pods": [{}]}}}).encode(), "ok", "",
         ["wrong-preempt-form"]),
        (json.dumps({"nodeNameToMetaVictims": {"node-02": {"pods": [{"uid": INPUT["node-02"][0]}]}}}).encode(),
         "ok", "", []),
    ],
)
def test_it_applies_the_preempt_truth_table(body, outcome, error, found):
    v = judge_preempt(be("b"), INPUT, 200, body)
    assert (v.outcome, v.error) == (outcome, error)
    assert kinds(v) == found
    if outcome == "ok":
        assert [d.node for d in v.decisions] == list(INPUT)
        for d in v.decisions:
            assert d.result == ("passed" if d.node in v.victims else "failed")
    else:
        assert v.decisions == [] and v.victims is None


def test_it_keeps_reported_pdb_violations_as_given():
    body = _pre({"node-03": {"Pods": [{"UID": INPUT["node-03"][1]}, {"UID": INPUT["node-03"][0]}],
                             "NumPDBViolations": 7}})
    v = judge_preempt(be("b"), INPUT, 200, body)
    assert v.victims["node-03"] == MetaVictims([INPUT["node-03"][1], INPUT["node-03"][0]], 7)
    # The victims as a set (sorted), and the count: a change of either is a change of the decision.
    assert results(v)["node-03"][1] == f"victims: {', '.join(sorted(INPUT['node-03']))}; PDB violations: 7"


@pytest.mark.parametrize("text", ["disk 95% full", "%s %d %v", "plain"])
def test_it_makes_error_text_survive_the_schedulers_fmt_errorf(text):
    # Go's fmt.Errorf(format) prints "%%" as "%": emulate that and get the text back.
    from extproxy.engine import error_text
    from extproxy.semantics import go_format_safe

    import re

    def fmt_errorf(format_string: str) -> str:  # "%%" prints "%"; any other "%" starts a verb
        return re.sub(r"%%|%", lambda m: "%" if m.group() == "%%" else "%!(MISSING)", format_string)

    assert fmt_errorf("disk 95% full") != "disk 95% full"  # the emulation garbles what Go garbles

    assert fmt_errorf(go_format_safe(text)) == text
    assert fmt_errorf(error_text("gpu", text)) == f"extproxy: backend gpu: {text}"


def test_it_encodes_decisions_as_the_stored_json_objects():
    v = judge_prioritize(be("b", weight=2), ["node-01"], 200, b'[{"Host":"node-01","Score":3}]')
    stored = msgspec.json.encode(v.decisions)
    assert stored == (b'[{"node":"node-01","backend":"b","result":"scored","reason":null,"score":3,'
                      b'"weighted_score":60}]')
    assert json.loads(stored)[0]["result"] == Result.SCORED == "scored"


@pytest.mark.parametrize("text, quoted", [
    ("node-01", '"node-01"'),
    ('a"b\\c', '"a\\"b\\\\c"'),
    ("tab\there\n", '"tab\\there\\n"'),
    ("\x00\x1f\x7f\x85", '"\\x00\\x1f\\x7f\\u0085"'),
    ("\u00e9\u2028\U0001f600\ufffd\U000e0001", '"\u00e9\\u2028\U0001f600\ufffd\\U000e0001"'),
])
def test_go_quote_writes_what_gos_percent_q_writes(text, quoted):
    """strconv.Quote: printable characters as they are, Go's escapes for the rest."""
    from extproxy.semantics.judge import go_quote

    assert go_quote(text) == quoted
