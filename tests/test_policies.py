"""Tests of the built-in policy module (extproxy.policies), on the GPU fixture scenario."""

from __future__ import annotations

import copy
import json
import threading
from fractions import Fraction
from pathlib import Path

import pytest

from extproxy.policies import FilterOutcome, PolicyError, default_policy, parse_policy
from extproxy.policies.resources import Ledger, is_extended_resource, parse_quantity, pod_requests
from extproxy.policies.selector import parse_selector

FIXTURES = Path(__file__).resolve().parent / "fixtures"
GPU = "example.com/gpu"


def load(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


@pytest.fixture()
def pod() -> dict:
    return copy.deepcopy(load("filter-request.nodecache-false.json")["Pod"])


@pytest.fixture()
def nodes() -> list[dict]:
    return copy.deepcopy(load("filter-request.nodecache-false.json")["Nodes"]["items"])


def by_name(nodes: list[dict]) -> dict[str, dict]:
    return {n["metadata"]["name"]: n for n in nodes}


def gpu_pod(uid: str, gpus: int | str, node_ns: str = "other", labels: dict | None = None) -> dict:
    return {
        "metadata": {"uid": uid, "name": uid, "namespace": node_ns, "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {GPU: str(gpus)}}}]},
    }


DRIVER_CEL = (
    'node.metadata.labels["example.com/gpu.driver-version"]'
    '.matches("^(5[5-9][0-9]|[6-9][0-9][0-9])[.]")'
)

GPU_POLICY = {
    "rules": [
        {"kind": "requiredLabels", "labels": {"example.com/gpu.present": "true"}},
        {"kind": "avoidTaints", "effects": ["NoSchedule", "NoExecute"]},
        {"kind": "celFilter", "expression": DRIVER_CEL, "reason": "GPU driver too old"},
        {"kind": "resourceFit", "resources": [GPU]},
        {
            "kind": "preferredLabels",
            "labels": [
                {"key": "topology.kubernetes.io/zone", "value": "eu-west-1a", "weight": 8},
                {"key": "example.com/gpu.present", "weight": 2},
            ],
        },
    ]
}


# ----------------------------------------------------------------------------- fixture scenario


def test_it_reproduces_the_fixture_filter_result(pod, nodes):
    expected = load("filter-result.nodecache-true.json")
    policy = parse_policy("gpu", GPU_POLICY)
    # node-02: 3 of its 4 GPUs are held by a pod the policy has seen bound
    policy.record_binding(gpu_pod("holder", 3), "node-02")
    out = policy.filter(pod, nodes)
    assert isinstance(out, FilterOutcome)
    assert out.passed == expected["NodeNames"] == ["node-01", "node-03"]
    assert set(out.failed) == set(expected["FailedNodes"]) == {"node-02"}
    assert set(out.unresolvable) == set(expected["FailedAndUnresolvableNodes"]) == {"node-04", "node-05"}
    assert out.failed["node-02"] == "Insufficient example.com/gpu"
    assert out.unresolvable["node-04"] == "node(s) lack label example.com/gpu.present=true"
    assert out.unresolvable["node-05"] == "GPU driver too old"
    for reason in [*out.failed.values(), *out.unresolvable.values()]:
        assert "%" not in reason


def test_it_scores_the_fixture_as_ints_in_range(pod, nodes):
    policy = parse_policy("gpu", GPU_POLICY)
    feasible = [n for n in nodes if n["metadata"]["name"] in ("node-01", "node-03")]
    scores = policy.prioritize(pod, feasible)
    assert scores == {"node-01": 10, "node-03": 2}
    assert all(type(v) is int and 0 <= v <= 10 for v in scores.values())


def test_it_keeps_only_resolvable_nodes_in_preempt(pod, nodes):
    policy = parse_policy("gpu", GPU_POLICY)
    policy.record_binding(gpu_pod("holder", 3), "node-02")
    policy.filter(pod, nodes)
    v2, v3, v5 = gpu_pod("v2", 1), gpu_pod("v3", 1), gpu_pod("v5", 1)
    victims = {"node-02": [v2, v3], "node-03": [], "node-04": [v3], "node-05": [v5]}
    kept = policy.preempt(pod, victims)
    assert list(kept) == ["node-02"]
    assert kept["node-02"] == [v2, v3] and kept["node-02"][0] is v2


def test_it_reevaluates_preempt_with_given_nodes(pod, nodes):
    policy = parse_policy("gpu", GPU_POLICY)  # no filter call before
    victims = {name: [gpu_pod(f"v-{name}", 1)] for name in ("node-02", "node-04", "node-05")}
    assert set(policy.preempt(pod, victims)) == {"node-02", "node-04", "node-05"}  # nothing known
    assert set(policy.preempt(pod, victims, nodes=nodes)) == {"node-02"}


def test_it_applies_default_policy_to_the_fixture(pod, nodes):
    policy = default_policy()
    assert policy.name == "default" and policy.binds is False
    out = policy.filter(pod, nodes)
    assert out.passed == ["node-01", "node-02", "node-03"]  # pod tolerates the GPU taint
    assert out.failed == {}
    assert out.unresolvable == {"node-04": "Insufficient example.com/gpu", "node-05": "Insufficient example.com/gpu"}
    policy.record_binding(gpu_pod("a", 2), "node-01")
    scores = policy.prioritize(pod, nodes[:3])
    assert scores == {"node-01": 0, "node-02": 5, "node-03": 5}  # less loaded preferred


def test_it_default_policy_fails_untolerated_taints(pod, nodes):
    pod["spec"]["tolerations"] = []
    out = default_policy().filter(pod, nodes)
    assert out.passed == []
    assert out.unresolvable["node-01"] == "node(s) had untolerated taint {example.com/gpu: present}"
    assert out.unresolvable["node-04"] == "Insufficient example.com/gpu"


def test_it_default_policy_without_extended_requests_prefers_fewer_pods(nodes):
    plain = {"metadata": {"uid": "p", "namespace": "d"}, "spec": {"containers": [{"name": "c"}]}}
    policy = default_policy()
    assert policy.prioritize(plain, nodes) == {n["metadata"]["name"]: 10 for n in nodes}
    policy.record_binding({"metadata": {"uid": "x"}, "spec": {}}, "node-04")
    assert policy.prioritize(plain, nodes)["node-04"] == 0
    assert default_policy().filter(plain, nodes).passed == ["node-04"]  # the others are tainted


# ----------------------------------------------------------------------------- requiredLabels


@pytest.mark.parametrize(
    "rule, passed",
    [
        ({"labels": {"example.com/gpu.present": "true"}}, ["node-01", "node-02", "node-03", "node-05"]),
        ({"labels": {"topology.kubernetes.io/zone": "eu-west-1b"}}, ["node-03", "node-04"]),
        ({"fromPodLabel": {"topology.kubernetes.io/zone": "example.com/zone"}}, ["node-03", "node-04"]),
        ({"fromPodLabel": {"topology.kubernetes.io/zone": "no-such-pod-label"}}, None),  # skipped
        ({"selector": "topology.kubernetes.io/zone in (eu-west-1a,eu-west-1c)"}, ["node-01", "node-02", "node-05"]),
        ({"selector": "topology.kubernetes.io/zone notin (eu-west-1a,eu-west-1c)"}, ["node-03", "node-04"]),
        ({"selector": "topology.kubernetes.io/zone!=eu-west-1a"}, ["node-03", "node-04", "node-05"]),
        ({"selector": "topology.kubernetes.io/zone==eu-west-1c"}, ["node-05"]),
        ({"selector": "node.kubernetes.io/instance-type=g5.12xlarge"}, ["node-03"]),
        ({"selector": "example.com/gpu.present"}, ["node-01", "node-02", "node-03", "node-05"]),
        ({"selector": "!example.com/gpu.present"}, ["node-04"]),
        ({"selector": "example.com/rank>2"}, ["node-03", "node-05"]),
        ({"selector": "example.com/rank<2"}, ["node-01"]),
        ({"selector": "example.com/rank>=2, example.com/rank<=3"}, ["node-02", "node-03"]),
        ({"selector": "example.com/gpu.present=true, !example.com/rank"}, []),
        ({"selector": "example.com/gpu.present=true,topology.kubernetes.io/zone in (eu-west-1b)"}, ["node-03"]),
    ],
)
def test_it_filters_required_labels(pod, nodes, rule, passed):
    ranks = {"node-01": "1", "node-02": "2", "node-03": "3", "node-04": "x", "node-05": "5"}
    for n in nodes:
        n["metadata"]["labels"]["example.com/rank"] = ranks[n["metadata"]["name"]]
    pod["metadata"]["labels"]["example.com/zone"] = "eu-west-1b"
    policy = parse_policy("p", {"rules": [{"kind": "requiredLabels", **rule}]})
    out = policy.filter(pod, nodes)
    if passed is None:
        passed = [n["metadata"]["name"] for n in nodes]
    assert out.passed == passed
    assert out.failed == {}  # labels: unresolvable by default
    assert len(set(out.unresolvable.values())) <= 2


def test_it_names_the_pod_value_in_from_pod_label_reason(pod, nodes):
    pod["metadata"]["labels"]["example.com/zone"] = "eu-west-1c"
    policy = parse_policy(
        "p", {"rules": [{"kind": "requiredLabels", "fromPodLabel": {"topology.kubernetes.io/zone": "example.com/zone"}}]}
    )
    out = policy.filter(pod, nodes)
    assert out.passed == ["node-05"]
    assert set(out.unresolvable.values()) == {"node(s) lack label topology.kubernetes.io/zone=eu-west-1c"}


def test_it_reports_required_labels_as_resolvable_when_asked(pod, nodes):
    policy = parse_policy(
        "p", {"rules": [{"kind": "requiredLabels", "labels": {"example.com/gpu.present": "true"}, "unresolvable": False}]}
    )
    out = policy.filter(pod, nodes)
    assert out.failed == {"node-04": "node(s) lack label example.com/gpu.present=true"}
    assert out.unresolvable == {}


def test_it_gives_selector_reasons(pod, nodes):
    policy = parse_policy("p", {"rules": [{"kind": "requiredLabels", "selector": "disk in (ssd,nvme)"}]})
    out = policy.filter(pod, nodes)
    assert set(out.unresolvable.values()) == {"node(s) did not match label requirement disk in (ssd,nvme)"}


@pytest.mark.parametrize(
    "text, ok",
    [
        ("a=b", True),
        ("a==b", True),
        ("a!=b", True),
        ("a in (b,c)", True),
        ("a notin (b)", True),
        ("a", True),
        ("!a", True),
        ("a>5", True),
        ("a<-5", True),
        ("example.com/gpu.driver-major>=535, disk in (ssd,nvme), !maintenance", True),
        ("", False),
        ("a in ()", False),
        ("a in (b", False),
        ("a>x", False),
        ("a,,b", False),
        ("a b", False),
        ("a,", False),
        ("Bad_Domain/x=y", False),
        ("a=b c", False),
    ],
)
def test_it_parses_selectors(text, ok):
    if ok:
        assert parse_selector(text)
    else:
        with pytest.raises(ValueError):
            parse_selector(text)
        with pytest.raises(PolicyError) as err:
            parse_policy("p", {"rules": [{"kind": "requiredLabels", "selector": text}]})
        assert err.value.field == "rules[0].selector"


# ----------------------------------------------------------------------------- avoidTaints


@pytest.mark.parametrize(
    "toleration, tolerated",
    [
        ({"key": GPU, "operator": "Equal", "value": "present", "effect": "NoSchedule"}, True),
        ({"key": GPU, "value": "present", "effect": "NoSchedule"}, True),  # operator defaults to Equal
        ({"key": GPU, "operator": "Equal", "value": "absent", "effect": "NoSchedule"}, False),
        ({"key": GPU, "operator": "Exists"}, True),  # any effect
        ({"key": GPU, "operator": "Exists", "effect": "NoExecute"}, False),  # effect mismatch
        ({"operator": "Exists"}, True),  # empty key + Exists tolerates everything
        ({"operator": "Exists", "effect": "NoSchedule"}, True),
        ({"key": "other", "operator": "Exists"}, False),
        ({"key": GPU, "operator": "Bogus", "value": "present"}, False),
    ],
)
def test_it_matches_tolerations(pod, nodes, toleration, tolerated):
    pod["spec"]["tolerations"] = [toleration]
    policy = parse_policy("p", {"rules": [{"kind": "avoidTaints"}]})
    out = policy.filter(pod, nodes)
    if tolerated:
        assert out.passed == ["node-01", "node-02", "node-03", "node-04", "node-05"]
    else:
        assert out.passed == ["node-04"]
        assert set(out.unresolvable.values()) == {"node(s) had untolerated taint {example.com/gpu: present}"}


@pytest.mark.parametrize(
    "effects, taint_effect, fails",
    [
        (["NoSchedule"], "NoSchedule", True),
        (["NoSchedule"], "NoExecute", False),
        (["NoExecute"], "NoExecute", True),
        (["NoSchedule", "NoExecute"], "PreferNoSchedule", False),
        (["PreferNoSchedule"], "PreferNoSchedule", True),
    ],
)
def test_it_only_checks_listed_taint_effects(pod, nodes, effects, taint_effect, fails):
    pod["spec"]["tolerations"] = []
    node = by_name(nodes)["node-04"]
    node["spec"]["taints"] = [{"key": "maint", "effect": taint_effect}]
    out = parse_policy("p", {"rules": [{"kind": "avoidTaints", "effects": effects}]}).filter(pod, [node])
    assert (out.unresolvable == {"node-04": "node(s) had untolerated taint {maint: }"}) is fails
    assert (out.passed == ["node-04"]) is not fails


# ----------------------------------------------------------------------------- resources


@pytest.mark.parametrize(
    "text, value",
    [
        ("2", Fraction(2)),
        ("500m", Fraction(1, 2)),
        ("1Gi", Fraction(2**30)),
        ("64042172Ki", Fraction(64042172 * 1024)),
        ("1k", Fraction(1000)),
        ("1M", Fraction(10**6)),
        ("1e3", Fraction(1000)),
        ("1.5E-2", Fraction(15, 1000)),
        ("0.5", Fraction(1, 2)),
        (".5", Fraction(1, 2)),
        ("-1", Fraction(-1)),
        ("+3", Fraction(3)),
        ("100n", Fraction(1, 10**7)),
        (3, Fraction(3)),
    ],
)
def test_it_parses_quantities(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1Ki1", "1K", "1 Gi", "1e", "--1", None, True])
def test_it_rejects_bad_quantities(text):
    with pytest.raises(ValueError):
        parse_quantity(text)


def test_it_orders_quantities_correctly():
    assert parse_quantity("1Gi") > parse_quantity("1G") > parse_quantity("953Mi")
    assert parse_quantity("1000m") == parse_quantity("1") == parse_quantity("1e0")


@pytest.mark.parametrize(
    "name, extended",
    [(GPU, True), ("nvidia.com/gpu", True), ("cpu", False), ("hugepages-2Mi", False),
     ("kubernetes.io/batch", False), ("node.kubernetes.io/x", False), ("requests.example.com/gpu", False)],
)
def test_it_tells_extended_resources(name, extended):
    assert is_extended_resource(name) is extended


def test_it_computes_pod_requests_with_init_containers_and_limits(pod):
    assert pod_requests(pod)[GPU] == 2
    assert pod_requests(pod)["cpu"] == 6
    pod["spec"]["initContainers"][0]["resources"] = {"limits": {GPU: "3"}, "requests": {"cpu": "8"}}
    req = pod_requests(pod)
    assert req[GPU] == 3 and req["cpu"] == 8  # max(sum of containers, any init container)
    pod["spec"]["containers"].append({"name": "b", "resources": {"requests": {GPU: "2"}}})
    assert pod_requests(pod)[GPU] == 4
    pod["spec"]["overhead"] = {"cpu": "250m"}
    assert pod_requests(pod)["cpu"] == Fraction(33, 4)
    assert pod_requests(pod, [GPU]) == {GPU: 4}


@pytest.mark.parametrize(
    "held_on_02, need, node02",
    [
        (0, 2, "passed"),
        (2, 2, "passed"),
        (3, 2, "failed"),
        (4, 1, "failed"),
        (0, 5, "unresolvable"),  # allocatable 4 alone too small
    ],
)
def test_it_fits_resources_against_the_ledger(pod, nodes, held_on_02, need, node02):
    pod["spec"]["containers"][0]["resources"]["requests"][GPU] = str(need)
    pod["spec"]["containers"][0]["resources"]["limits"][GPU] = str(need)
    policy = parse_policy("p", {"rules": [{"kind": "resourceFit", "resources": [GPU]}]})
    if held_on_02:
        policy.record_binding(gpu_pod("h", held_on_02), "node-02")
    out = policy.filter(pod, nodes)
    where = "passed" if "node-02" in out.passed else "failed" if "node-02" in out.failed else "unresolvable"
    assert where == node02
    assert out.unresolvable["node-04"] == "Insufficient example.com/gpu"


def test_it_frees_resources_on_forget(pod, nodes):
    policy = parse_policy("p", {"rules": [{"kind": "resourceFit"}]})
    policy.record_binding(gpu_pod("h1", 2), "node-01")
    policy.record_binding(gpu_pod("h2", 1), "node-01")
    assert "node-01" in policy.filter(pod, nodes).failed
    policy.forget_pod("h2")
    assert "node-01" in policy.filter(pod, nodes).passed
    policy.forget_pod("never-seen")  # ignored


def test_it_replaces_a_rebound_pod_in_the_ledger():
    ledger = Ledger()
    ledger.record(gpu_pod("a", 2), "n1")
    ledger.record(gpu_pod("a", 2), "n2")
    assert len(ledger) == 1
    assert ledger.used([GPU]) == {"n2": {GPU: 2}}


def test_it_bounds_the_ledger_forgetting_the_oldest():
    ledger = Ledger(max_pods=3)
    for i in range(5):
        ledger.record(gpu_pod(f"p{i}", 1), f"n{i}")
    assert len(ledger) == 3
    assert set(ledger.used([GPU])) == {"n2", "n3", "n4"}
    assert Ledger().max_pods == 100_000


def test_it_guards_the_ledger_across_threads():
    ledger = Ledger(max_pods=100_000)

    def work(t: int) -> None:
        for i in range(500):
            ledger.record(gpu_pod(f"t{t}-{i}", 1), "n")
            if i % 2:
                ledger.forget(f"t{t}-{i}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(ledger) == 8 * 250
    assert ledger.used([GPU]) == {"n": {GPU: 2000}}


# ----------------------------------------------------------------------------- scores


@pytest.mark.parametrize(
    "labels, expected",
    [
        ([{"key": "topology.kubernetes.io/zone", "value": "eu-west-1a", "weight": 5}],
         {"node-01": 10, "node-02": 10, "node-03": 0, "node-04": 0, "node-05": 0}),
        ([{"key": "example.com/gpu.present", "weight": 1}, {"key": "node.kubernetes.io/instance-type", "value": "g5.12xlarge", "weight": 2}],
         {"node-01": 3, "node-02": 3, "node-03": 10, "node-04": 0, "node-05": 3}),
        ([{"key": "nope", "weight": 1}], {f"node-0{i}": 0 for i in range(1, 6)}),
    ],
)
def test_it_scores_preferred_labels(pod, nodes, labels, expected):
    policy = parse_policy("p", {"rules": [{"kind": "preferredLabels", "labels": labels}]})
    assert policy.prioritize(pod, nodes) == expected


def test_it_scores_zero_without_score_rules(pod, nodes):
    policy = parse_policy("p", {"rules": [{"kind": "avoidTaints"}]})
    assert policy.prioritize(pod, nodes) == {f"node-0{i}": 0 for i in range(1, 6)}


def test_it_spreads_over_topology_domains(pod, nodes):
    policy = parse_policy(
        "p", {"rules": [{"kind": "spread", "topologyKey": "topology.kubernetes.io/zone",
                         "matchLabels": {"app.kubernetes.io/name": "trainer"}}]}
    )
    assert set(policy.prioritize(pod, nodes).values()) == {10}
    trainer = {"app.kubernetes.io/name": "trainer"}
    policy.record_binding(gpu_pod("t1", 1, "ml-team", trainer), "node-01")
    policy.record_binding(gpu_pod("t2", 1, "ml-team", trainer), "node-02")
    policy.record_binding(gpu_pod("t3", 1, "ml-team", trainer), "node-03")
    policy.record_binding(gpu_pod("other-ns", 1, "elsewhere", trainer), "node-05")
    policy.record_binding(gpu_pod("other-app", 1, "ml-team", {"app.kubernetes.io/name": "x"}), "node-05")
    scores = policy.prioritize(pod, nodes)
    # zone a: 2 pods, zone b: 1, zone c: 0
    assert scores == {"node-01": 0, "node-02": 0, "node-03": 5, "node-04": 5, "node-05": 10}
    # zone a's pods (on node-01/02) still count when only a new zone-a node is a candidate
    fresh = copy.deepcopy(nodes[0])
    fresh["metadata"]["name"] = "node-06"
    assert policy.prioritize(pod, [fresh, nodes[4]]) == {"node-06": 0, "node-05": 10}


def test_it_spreads_by_the_pods_own_labels_by_default(pod, nodes):
    policy = parse_policy("p", {"rules": [{"kind": "spread", "topologyKey": "topology.kubernetes.io/zone"}]})
    policy.record_binding(copy.deepcopy(pod) | {"metadata": pod["metadata"] | {"uid": "sib"}}, "node-05")
    scores = policy.prioritize(pod, nodes)
    assert scores["node-05"] == 0 and scores["node-01"] == 10


def test_it_combines_score_rules_by_weight(pod, nodes):
    policy = parse_policy(
        "p",
        {"rules": [
            {"kind": "preferredLabels", "ruleWeight": 3, "labels": [{"key": "topology.kubernetes.io/zone", "value": "eu-west-1a", "weight": 1}]},
            {"kind": "celScore", "weight": 1, "expression": "2"},
        ]},
    )
    scores = policy.prioritize(pod, nodes)
    assert scores == {"node-01": 8, "node-02": 8, "node-03": 1, "node-04": 1, "node-05": 1}  # (30+2)/4, 2/4 rounds up
    assert all(type(v) is int for v in scores.values())


# ----------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    "data, field",
    [
        ([], "policy"),
        ({"bind": "yes"}, "bind"),
        ({"rules": {}}, "rules"),
        ({"colour": 1}, "colour"),
        ({"rules": ["x"]}, "rules[0]"),
        ({"rules": [{"kind": "magic"}]}, "rules[0].kind"),
        ({"rules": [{"kind": "avoidTaints", "effect": ["NoSchedule"]}]}, "rules[0].effect"),
        ({"rules": [{"kind": "avoidTaints", "effects": ["Never"]}]}, "rules[0].effects[0]"),
        ({"rules": [{"kind": "requiredLabels"}]}, "rules[0]"),
        ({"rules": [{"kind": "requiredLabels", "labels": {"bad key!": "x"}}]}, "rules[0].labels.bad key!"),
        ({"rules": [{"kind": "requiredLabels", "labels": {"a": "b"}, "unresolvable": "no"}]}, "rules[0].unresolvable"),
        ({"rules": [{"kind": "avoidTaints"}, {"kind": "resourceFit", "resources": "gpu"}]}, "rules[1].resources"),
        ({"rules": [{"kind": "preferredLabels", "labels": [{"key": "a", "weight": 0}]}]}, "rules[0].labels[0].weight"),
        ({"rules": [{"kind": "spread"}]}, "rules[0].topologyKey"),
        ({"rules": [{"kind": "celFilter", "reason": "x"}]}, "rules[0].expression"),
        ({"rules": [{"kind": "celFilter", "expression": "true", "reason": "50% off"}]}, "rules[0].reason"),
        ({"rules": [{"kind": "celScore", "expression": "1", "weight": -1}]}, "rules[0].weight"),
    ],
)
def test_it_rejects_invalid_policies_with_a_field(data, field):
    with pytest.raises(PolicyError) as err:
        parse_policy("p", data)
    assert err.value.field == field
    assert str(err.value) == f"{field}: {err.value.reason}"


def test_it_parses_bind_and_the_documented_example():
    policy = parse_policy(
        "full",
        {
            "bind": True,
            "rules": [
                {"kind": "requiredLabels", "labels": {"example.com/gpu.present": "true"},
                 "fromPodLabel": {"topology.kubernetes.io/zone": "example.com/zone"},
                 "selector": "example.com/gpu.driver-major>=535, disk in (ssd,nvme), !maintenance",
                 "unresolvable": True},
                {"kind": "avoidTaints", "effects": ["NoSchedule", "NoExecute"]},
                {"kind": "resourceFit", "resources": [GPU]},
                {"kind": "preferredLabels", "labels": [{"key": "example.com/gpu.model", "value": "a100", "weight": 5},
                                                       {"key": "disktype", "weight": 2}]},
                {"kind": "spread", "topologyKey": "topology.kubernetes.io/zone", "matchLabels": {"app": "trainer"}},
                {"kind": "celFilter", "expression": 'node.metadata.labels["example.com/gpu.driver-major"] >= "535"',
                 "reason": "GPU driver too old", "unresolvable": True},
                {"kind": "celScore", "expression": "1 + 1", "weight": 1},
            ],
        },
    )
    assert policy.name == "full" and policy.binds is True
    assert parse_policy("empty", {}).binds is False


# ----------------------------------------------------------------------------- robustness, speed


def test_it_never_raises_on_odd_node_data(pod, nodes):
    odd = [{"metadata": {"name": "weird"}, "spec": {"taints": "oops"}, "status": {"allocatable": {GPU: "lots"}}}]
    policy = parse_policy("gpu", GPU_POLICY)
    out = policy.filter(pod, nodes + odd)
    assert "weird" in out.unresolvable
    scores = policy.prioritize(pod, nodes + odd)
    assert all(type(v) is int and 0 <= v <= 10 for v in scores.values())


def many_nodes(nodes: list[dict], count: int) -> list[dict]:
    out = []
    for i in range(count):
        n = copy.deepcopy(nodes[i % len(nodes)])
        n["metadata"]["name"] = f"n{i:05d}"
        out.append(n)
    return out


def test_it_filters_5000_nodes(pod, nodes):
    big = many_nodes(nodes, 5000)
    rules = [r for r in GPU_POLICY["rules"] if r["kind"] != "celFilter"]
    policy = parse_policy("fast", {"rules": rules})
    out = policy.filter(pod, big)
    assert len(out.passed) == 3000
