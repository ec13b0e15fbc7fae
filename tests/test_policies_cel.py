"""CEL rules of the built-in policy module: compile errors, runtime errors, scores, speed."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from extproxy.policies import PolicyError, parse_policy

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "filter-request.nodecache-false.json"


@pytest.fixture()
def scenario() -> tuple[dict, list[dict]]:
    data = json.loads(FIXTURE.read_text())
    return copy.deepcopy(data["Pod"]), copy.deepcopy(data["Nodes"]["items"])


def cel_filter(expr: str, **extra) -> dict:
    return {"rules": [{"kind": "celFilter", "expression": expr, "reason": "GPU driver too old", **extra}]}


@pytest.mark.parametrize(
    "expr, passed",
    [
        ('node.metadata.labels["example.com/gpu.driver-version"] >= "550"', ["node-01", "node-02", "node-03"]),
        ('"example.com/gpu" in node.status.allocatable', ["node-01", "node-02", "node-03", "node-05"]),
        ('int(node.status.allocatable["pods"]) >= 110', ["node-01", "node-02", "node-03", "node-04", "node-05"]),
        ('node.metadata.labels["topology.kubernetes.io/zone"] == "eu-west-1b"', ["node-03", "node-04"]),
        ('pod.spec.tolerations.exists(t, t.key == "example.com/gpu")', ["node-01", "node-02", "node-03", "node-04", "node-05"]),
        ('size(node.status.images) > 0', ["node-01", "node-02", "node-03", "node-04", "node-05"]),
        ("false", []),
    ],
)
def test_it_filters_with_cel(scenario, expr, passed):
    pod, nodes = scenario
    out = parse_policy("p", cel_filter(expr)).filter(pod, nodes)
    assert out.passed == passed
    for name, reason in out.unresolvable.items():
        assert reason == "GPU driver too old" or reason.startswith("policy expression error: ")


def test_it_reports_false_as_resolvable_when_configured(scenario):
    pod, nodes = scenario
    out = parse_policy("p", cel_filter('node.metadata.name != "node-02"', unresolvable=False)).filter(pod, nodes)
    assert out.failed == {"node-02": "GPU driver too old"}
    assert out.unresolvable == {}


@pytest.mark.parametrize(
    "expr",
    ["node.metadata..name", "node.metadata.name ==", "(1 + ", "node.metadata.labels[", "1 +* 2"],
)
def test_it_rejects_cel_syntax_errors_with_the_field(expr):
    for rule_list in (cel_filter(expr), {"rules": [{"kind": "avoidTaints"}, {"kind": "celScore", "expression": expr}]}):
        with pytest.raises(PolicyError) as err:
            parse_policy("p", rule_list)
        index = len(rule_list["rules"]) - 1
        assert err.value.field == f"rules[{index}].expression"
        assert "syntax" in err.value.reason
        assert str(err.value).startswith(f"rules[{index}].expression: ")


@pytest.mark.parametrize(
    "expr, fragment",
    [
        ('node.metadata.labels["example.com/gpu.driver-version"] >= "550"', "no such key"),  # node-04 lacks it
        ('node.metadata.name + 1 == "x"', "no matching overload"),  # wrong type
        ("node.metadata.name", "not bool"),  # not a bool
    ],
)
def test_it_turns_cel_runtime_errors_into_reasons(scenario, expr, fragment):
    pod, nodes = scenario
    out = parse_policy("p", cel_filter(expr, unresolvable=False)).filter(pod, nodes)
    reason = out.unresolvable["node-04"]  # expression errors are always unresolvable
    assert reason.startswith("policy expression error: ")
    assert fragment in reason
    assert "%" not in reason and "\n" not in reason


@pytest.mark.parametrize(
    "expr, expected",
    [
        ("7", 7),
        ("3.4", 3),
        ("3.5", 4),
        ("42", 10),
        ("-3", 0),
        ("true", 0),  # not a number
        ('"5"', 0),
        ("int(node.status.allocatable[\"example.com/gpu\"]) * 2", None),  # error on node-04 -> 0
        ("1.0 / 0.0", 10),  # +inf clamps to 10
    ],
)
def test_it_scores_with_cel(scenario, expr, expected):
    pod, nodes = scenario
    scores = parse_policy("p", {"rules": [{"kind": "celScore", "expression": expr}]}).prioritize(pod, nodes)
    assert all(type(v) is int and 0 <= v <= 10 for v in scores.values())
    if expected is None:
        assert scores == {"node-01": 8, "node-02": 8, "node-03": 8, "node-04": 0, "node-05": 2}
    else:
        assert set(scores.values()) == {expected}


def test_it_reproduces_fixture_driver_rule_with_cel(scenario):
    pod, nodes = scenario
    expr = (
        'has(node.metadata.labels) && "example.com/gpu.driver-version" in node.metadata.labels && '
        'node.metadata.labels["example.com/gpu.driver-version"].matches("^(5[5-9][0-9]|[6-9][0-9][0-9])[.]")'
    )
    out = parse_policy("p", cel_filter(expr)).filter(pod, nodes)
    assert out.passed == ["node-01", "node-02", "node-03"]
    assert out.unresolvable == {"node-04": "GPU driver too old", "node-05": "GPU driver too old"}


def test_it_evaluates_cel_on_1000_nodes(scenario):
    pod, nodes = scenario
    big = []
    for i in range(1000):
        n = copy.deepcopy(nodes[i % 5])
        n["metadata"]["name"] = f"n{i:04d}"
        big.append(n)
    policy = parse_policy("p", cel_filter('node.metadata.labels["topology.kubernetes.io/zone"] != "eu-west-1c"'))
    out = policy.filter(pod, big)
    assert len(out.passed) == 800
