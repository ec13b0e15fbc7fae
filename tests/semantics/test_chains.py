"""Truth tables for the combination part of extproxy.semantics (kube-scheduler's rules)."""

from __future__ import annotations

import json

import pytest

from extproxy.config import BackendConfig, ManagedResource
from extproxy.protocol import HostPriority, MetaVictims
from extproxy.semantics import (
    COMBINED_TIMEOUT_MARGIN,
    CombinedRefusal,
    FilterChain,
    PreemptChain,
    bind_fallthrough,
    choose_binder,
    combine_prioritize,
    combined_caveats,
    combined_entry,
    interested,
    judge_bind,
    judge_filter,
    judge_preempt,
    judge_prioritize,
    listed_hosts,
    parallel_filter,
    prioritize_answer,
    reply_error_text,
    scheduler_order,
)

NAMES = ["n1", "n2", "n3", "n4"]
GPU = "example.com/gpu"


def be(name: str, **kw) -> BackendConfig:
    d = dict(url_prefix=f"http://{name}:80/s", filter_verb="filter", prioritize_verb="prioritize",
             preempt_verb="preempt", weight=1, node_cache_capable=True)
    d.update(kw)
    if "managed" in d:
        d["managed_resources"] = tuple(ManagedResource(r) for r in d.pop("managed"))
    return BackendConfig(name=name, **d)


def pod(requests=None, limits=None, where="containers") -> dict:
    res = {}
    if requests:
        res["requests"] = {r: "1" for r in requests}
    if limits:
        res["limits"] = {r: "1" for r in limits}
    return {"metadata": {"name": "p", "namespace": "d", "uid": "u"}, "spec": {where: [{"name": "c", "resources": res}]}}


def freply(names=None, nodes=None, failed=None, unres=None, error="") -> bytes:
    body: dict = {"NodeNames": names, "FailedNodes": failed, "Error": error}
    if nodes is not None:
        body["Nodes"] = {"metadata": {}, "items": [{"metadata": {"name": n}} for n in nodes]}
    if unres is not None:
        body["FailedAndUnresolvableNodes"] = unres
    return json.dumps(body).encode()


def drive(chain, steps):
    """Run a filter or preempt chain as the combined form does; (result, [(backend, what it was sent)]).

    steps: [(backend, status, body) or (backend, None, transport_error)].
    """
    called = []
    for backend, status, body in steps:
        if chain.done:
            break
        called.append((backend.name, chain.remaining))
        if status is None:
            chain.apply(backend, None, body)
        else:
            chain.apply(backend, chain.judge(backend, status, body))
    return chain.result(), called


def run_chain(steps, names=NAMES):
    return drive(FilterChain(names), steps)


# ------------------------------------------------------------------ order and interest


def test_it_moves_ignorable_backends_to_the_end():
    a, b, c, d = be("a", ignorable=True), be("b"), be("c", ignorable=True), be("d")
    assert [x.name for x in scheduler_order([a, b, c, d])] == ["b", "d", "a", "c"]


@pytest.mark.parametrize(
    "p, expected",
    [
        (pod(requests=[GPU]), ["gpu", "any"]),
        (pod(limits=[GPU]), ["gpu", "any"]),
        (pod(requests=[GPU], where="initContainers"), ["gpu", "any"]),
        (pod(requests=[GPU], where="ephemeralContainers"), ["any"]),
        (pod(requests=["cpu"]), ["any"]),
        ({}, ["any"]),
    ],
)
def test_it_selects_interested_backends_by_managed_resources(p, expected):
    backends = [be("gpu", managed=[GPU]), be("any")]
    assert [b.name for b in interested(backends, p, "filter")] == expected


def test_it_skips_backends_without_the_verb():
    backends = [be("a", filter_verb=""), be("b"), be("c", bind_verb="bind")]
    assert [b.name for b in interested(backends, {}, "filter")] == ["b", "c"]
    assert [b.name for b in interested(backends, {}, "bind")] == ["c"]


# ------------------------------------------------------------------ filter chain


def test_it_sends_each_backend_only_what_is_left():
    a, b = be("a"), be("b")
    res, called = run_chain([(a, 200, freply(["n1", "n3", "n4"], failed={"n2": "no"})),
                             (b, 200, freply(["n4", "n1"]))])
    assert called == [("a", NAMES), ("b", ["n1", "n3", "n4"])]
    assert res.passed == ["n4", "n1"] and res.failed == {"n2": "no"} and res.error == ""


def test_it_stops_when_nothing_is_left():
    a, b = be("a"), be("b")
    res, called = run_chain([(a, 200, freply([], unres={"n1": "x"})), (b, 200, freply(NAMES))])
    assert [c[0] for c in called] == ["a"] and res.passed == [] and res.unresolvable == {"n1": "x"}


def test_it_makes_no_call_for_an_empty_input():
    chain = FilterChain([], [be("a")])
    assert chain.done and chain.next_backend() is None and chain.result().passed == []


@pytest.mark.parametrize(
    "replies, failed, unres",
    [
        # same reply: unresolvable wins over failed
        ([freply(["n2", "n3", "n4"], failed={"n1": "f"}, unres={"n1": "u"})], {}, {"n1": "u"}),
        # later backend marks an unresolvable node failed: last writer wins (statuses.Set)
        ([freply(["n2", "n3", "n4"], unres={"n1": "u"}), freply(["n2"], failed={"n1": "f2"})],
         {"n1": "f2"}, {}),
        # later backend marks a failed node unresolvable
        ([freply(["n2", "n3", "n4"], failed={"n1": "f"}), freply(["n2"], unres={"n1": "u2"})],
         {}, {"n1": "u2"}),
        # later failed message replaces the earlier one
        ([freply(["n2", "n3", "n4"], failed={"n1": "f"}), freply(["n2"], failed={"n1": "g"})],
         {"n1": "g"}, {}),
    ],
)
def test_it_merges_failure_statuses_like_the_scheduler(replies, failed, unres):
    backends = [be("a"), be("b")]
    res, _ = run_chain([(backends[i], 200, r) for i, r in enumerate(replies)])
    assert res.failed == failed and res.unresolvable == unres


def test_it_skips_an_ignorable_backend_that_fails():
    a, b = be("a", ignorable=True), be("b")
    res, called = run_chain([(a, 500, b""), (b, 200, freply(["n1"]))])
    assert res.passed == ["n1"] and res.error == ""
    assert called[1] == ("b", NAMES)


@pytest.mark.parametrize(
    "status, body, error",
    [
        (500, b"", "failed filter with extender at URL http://a:80/s/filter, code 500"),
        (200, freply(error="boom"), "boom"),
        (200, b"", "EOF"),
        (None, "context deadline exceeded", "context deadline exceeded"),
    ],
)
def test_it_fails_the_attempt_on_a_non_ignorable_error(status, body, error):
    a, b = be("a"), be("b")
    res, called = run_chain([(a, status, body), (b, 200, freply(NAMES))])
    assert res.error == error and res.error_backend == "a" and res.passed == []
    assert [c[0] for c in called] == ["a"]


def test_it_fails_a_name_not_in_the_input_in_mode_true():
    a, b = be("a"), be("b")
    res, _ = run_chain([(a, 200, freply(["n1", "n2"])), (b, 200, freply(["n1", "n3"]))])
    assert 'claims a filtered node "n3"' in res.error and res.error_backend == "b"


def test_it_keeps_and_marks_a_name_not_in_the_input_in_mode_false():
    a, b = be("a", node_cache_capable=False), be("b", node_cache_capable=False)
    res, called = run_chain([(a, 200, freply(nodes=["n1", "zz"])), (b, 200, freply(nodes=["zz"]))])
    assert called[1] == ("b", ["n1", "zz"])
    assert res.passed == ["zz"]


@pytest.mark.parametrize("ncc, body", [(True, freply()), (False, freply()), (False, freply(names=NAMES))])
def test_it_passes_nothing_without_a_usable_list(ncc, body):
    res, _ = run_chain([(be("a", node_cache_capable=ncc), 200, body)])
    assert res.passed == [] and res.error == ""


def test_it_keeps_order_and_duplicates_as_returned():
    res, called = run_chain([(be("a"), 200, freply(["n3", "n1", "n3"])), (be("b"), 200, freply(["n1", "n3"]))])
    assert called[1][1] == ["n3", "n1", "n3"] and res.passed == ["n1", "n3"]


def test_it_refuses_apply_after_done():
    chain = FilterChain(["n1"])
    chain.apply(be("a"), None, "down")
    with pytest.raises(ValueError):
        chain.apply(be("b"), None, "down")


def test_next_backend_walks_the_given_order():
    a, b = be("a"), be("b")
    chain = FilterChain(NAMES, [a, b])
    assert chain.next_backend() is a
    chain.apply(a, chain.judge(a, 200, freply(["n1"])))
    assert chain.next_backend() is b
    chain.apply(b, chain.judge(b, 200, freply(["n1"])))
    assert chain.next_backend() is None and not chain.done


@pytest.mark.parametrize(
    "verdict, transport, expected",
    [
        (judge_filter(be("a", url_prefix="u"), NAMES, 200, freply(error="50% off")), "", "50% off"),
        (judge_filter(be("a", url_prefix="http://h/a%2Fb"), NAMES, 500, b""), "",
         "failed filter with extender at URL http://h/a%%2Fb/filter, code 500"),
        (None, "dial 100%", "dial 100%%"),
        (None, "", "no answer"),
    ],
)
def test_it_escapes_reply_errors_so_the_scheduler_prints_the_same(verdict, transport, expected):
    assert reply_error_text(verdict, transport) == expected


# ------------------------------------------------------------------ returned Node objects (mode false)


def obj(name: str, **labels: str) -> bytes:
    """A Node object as bytes, in a spelling no encoder of ours writes (so a re-encoding shows)."""
    return json.dumps({"metadata": {"name": name, "labels": labels}}, separators=(", ", ": ")).encode()


ORIGINAL = {n: obj(n) for n in ("n1", "n2", "n3")}
MARKED = {n: obj(n, checked="yes") for n in ("n1", "n2", "n3")}


def objects(*items: bytes) -> tuple[int, bytes]:
    """A mode-false reply returning exactly these Node objects."""
    return 200, b'{"Nodes": {"metadata": {}, "items": [' + b", ".join(items) + b']}, "FailedNodes": {}}'


def names_reply(*names: str) -> tuple[int, bytes]:
    return 200, freply(list(names))


def echo(sent_names, sent_items) -> tuple[int, bytes]:
    """A mode-false backend that passes every object it was sent, as sent."""
    return objects(*sent_items)


def run_objects(steps, names=("n1", "n2", "n3"), items=tuple(ORIGINAL.values())):
    """steps: [(backend, answer)], answer a (status, body) or a function of what the backend was sent."""
    chain = FilterChain(list(names), items=list(items) if items is not None else None)
    sent = []
    for backend, answer in steps:
        if chain.done:
            break
        sent.append((chain.remaining, chain.remaining_items))
        status, body = answer(chain.remaining, chain.remaining_items) if callable(answer) else answer
        chain.apply(backend, chain.judge(backend, status, body))
    return chain.result(), sent


FALSE, TRUE = be("a", node_cache_capable=False), be("b", node_cache_capable=True)
FALSE_B, FALSE_IGNORABLE = be("b", node_cache_capable=False), be("b", node_cache_capable=False, ignorable=True)


@pytest.mark.parametrize(
    "steps, second_sent, answer",
    [
        # returned objects replace the scheduler's: the next backend gets them, and so does the answer
        ([(FALSE, objects(*MARKED.values())), (FALSE_B, echo)], list(MARKED.values()), list(MARKED.values())),
        # a mode-true backend after: the scheduler keeps the returned objects for the names it passes
        ([(FALSE, objects(MARKED["n1"], MARKED["n2"])), (TRUE, names_reply("n2"))],
         [MARKED["n1"], MARKED["n2"]], [MARKED["n2"]]),
        # a mode-true backend first: the scheduler's own objects, for the names it passed
        ([(TRUE, names_reply("n1", "n3")), (FALSE_B, echo)], [ORIGINAL["n1"], ORIGINAL["n3"]],
         [ORIGINAL["n1"], ORIGINAL["n3"]]),
        # an ignorable backend that fails changes nothing
        ([(FALSE, objects(*MARKED.values())), (FALSE_IGNORABLE, (500, b""))], list(MARKED.values()),
         list(MARKED.values())),
        # an object for a name outside the input is kept, and sent on
        ([(FALSE, objects(ORIGINAL["n1"], obj("zz"))), (FALSE_B, echo)], [ORIGINAL["n1"], obj("zz")],
         [ORIGINAL["n1"], obj("zz")]),
        # the second backend's own returned objects are what the scheduler ends with
        ([(FALSE, objects(*MARKED.values())), (FALSE_B, objects(ORIGINAL["n2"]))], list(MARKED.values()),
         [ORIGINAL["n2"]]),
    ],
)
def test_it_carries_returned_node_objects_along_the_chain(steps, second_sent, answer):
    res, sent = run_objects(steps)
    assert sent[0][1] == list(ORIGINAL.values())
    assert sent[1][1] == second_sent
    assert res.error == "" and res.items == answer
    assert res.passed == [json.loads(item)["metadata"]["name"] for item in answer]


def test_it_knows_node_objects_once_a_backend_returns_them_in_names_mode():
    res, sent = run_objects([(FALSE, objects(MARKED["n1"])), (FALSE_B, echo)], items=None)
    assert sent[0][1] is None and sent[1][1] == [MARKED["n1"]] and res.items == [MARKED["n1"]]
    res, _ = run_objects([(TRUE, names_reply("n1"))], items=None)
    assert res.passed == ["n1"] and res.items is None


def test_it_answers_no_objects_when_the_chain_fails():
    res, _ = run_objects([(FALSE, objects(*MARKED.values())), (TRUE, (500, b""))])
    assert res.error and res.passed == [] and res.items is None


@pytest.mark.parametrize(
    "b, second, answer",
    [
        (TRUE, names_reply("n1"), [MARKED["n1"]]),  # names: the objects held, the first backend's
        (FALSE_B, objects(ORIGINAL["n2"]), [ORIGINAL["n2"]]),  # objects: the later backend's, in order
    ],
)
def test_parallel_filter_carries_returned_node_objects(b, second, answer):
    a = FALSE
    names = ["n1", "n2", "n3"]
    results = [(a, judge_filter(a, names, *objects(MARKED["n1"], MARKED["n2"]), keep_objects=True), ""),
               (b, judge_filter(b, names, *second, keep_objects=True), "")]
    res = parallel_filter(names, results, list(ORIGINAL.values()))
    assert res.items == answer


# ------------------------------------------------------------------ parallel filter


def test_parallel_filter_replays_the_chain():
    a, b, c = be("a"), be("b"), be("c")
    full = lambda backend, body: (backend, judge_filter(backend, NAMES, 200, body), "")  # noqa: E731
    res = parallel_filter(NAMES, [
        full(a, freply(["n1", "n2", "n3"], failed={"n4": "a4"})),
        full(b, freply(["n2", "n4", "n3"], failed={"n1": "b1"}, unres={"n4": "b4"})),
        full(c, freply(["n1"], failed={"n2": "c2", "n3": "c3", "n4": "c4"})),
    ])
    # b's word on n4 (removed by a) is dropped: the chain never sent it n4
    assert res.failed == {"n4": "a4", "n1": "b1", "n2": "c2", "n3": "c3"} and res.unresolvable == {}
    assert res.passed == []


def test_parallel_filter_ignores_backends_after_the_list_is_empty():
    a, b = be("a"), be("b")
    res = parallel_filter(NAMES, [(a, judge_filter(a, NAMES, 200, freply([])), ""), (b, None, "down")])
    assert res.error == "" and res.passed == []  # b's error is ignored: the chain would not have called it


def test_parallel_filter_errors_follow_the_chain_rules():
    a, b, c = be("a", ignorable=True), be("b"), be("c")
    res = parallel_filter(NAMES, [(a, None, "x"), (b, None, "down"), (c, None, "later")])
    assert res.error == "down" and res.error_backend == "b"  # a (ignorable) skipped, c never asked


def test_a_backend_the_proxy_did_not_call_is_named_in_the_proxys_words_not_as_an_exchange():
    """`Post "<url>": ...` is Go's client's word for an exchange that failed; a backend whose
    request the proxy could not build was never called, and the Error says so (`%` doubled as
    for any text that is not a backend's own Error field)."""
    a, b = be("a"), be("b")
    chain = FilterChain(NAMES)
    chain.apply(a, None, "no Node object for 100% of them", called=False)
    assert chain.result().reply_error == "extproxy: backend a was not called: no Node object for 100%% of them"
    assert chain.result().error == "no Node object for 100% of them"
    made = FilterChain(NAMES)
    made.apply(b, None, "connection refused")  # an exchange that failed keeps Go's form
    assert made.result().reply_error == 'Post "http://b:80/s/filter": connection refused'
    res = parallel_filter(NAMES, [(a, None, "no Node object"), (b, None, "refused")], not_called=["a"])
    assert res.reply_error == "extproxy: backend a was not called: no Node object"
    res = parallel_filter(NAMES, [(a, None, "refused")], not_called=["b"])
    assert res.reply_error == 'Post "http://a:80/s/filter": refused'


# ------------------------------------------------------------------ prioritize


def prio(backend, feasible, body, status=200):
    return backend, judge_prioritize(backend, feasible, status, body)


def hp(*pairs) -> bytes:
    return json.dumps([{"Host": h, "Score": s} for h, s in pairs]).encode()


@pytest.mark.parametrize(
    "results, expected",
    [
        ([("a", 1, hp(("n1", 3), ("n2", 10)))], {"n1": 3, "n2": 10, "n3": 0}),
        ([("a", 2, hp(("n1", 3))), ("b", 5, hp(("n1", 1), ("n3", 2)))], {"n1": 11, "n2": 0, "n3": 10}),
        ([("a", 1, hp(("n1", 3), ("n1", 4)))], {"n1": 7, "n2": 0, "n3": 0}),  # twice counts twice
        ([("a", 1, hp(("n1", -5), ("n2", 99)))], {"n1": -5, "n2": 99, "n3": 0}),  # no clamping
        ([("a", 1, hp(("zz", 9)))], {"n1": 0, "n2": 0, "n3": 0}),  # not feasible: ignored
        ([("a", 3, b'[{"Host":"n1","Score":5.0}]'), ("b", 1, hp(("n1", 2)))], {"n1": 2, "n2": 0, "n3": 0}),
    ],
)
def test_it_sums_weighted_scores(results, expected):
    feasible = ["n1", "n2", "n3"]
    rs = [prio(be(n, weight=w), feasible, body) for n, w, body in results]
    assert combine_prioritize(feasible, rs) == expected


def test_it_drops_failed_prioritizers_ignorable_or_not():
    feasible = ["n1", "n2"]
    rs = [prio(be("a", weight=2), feasible, hp(("n1", 3)), 500), (be("b", ignorable=True), None),
          prio(be("c", weight=1), feasible, hp(("n2", 4)))]
    assert combine_prioritize(feasible, rs) == {"n1": 0, "n2": 4}


@pytest.mark.parametrize(
    "results, expected",
    [
        ([("a", 200, hp(("n1", 3), ("n1", 4)))], {"n1"}),  # listed twice: listed
        ([("a", 200, hp(("n1", 0)))], {"n1"}),  # listed with 0: listed, it gets a tie-breaker
        ([("a", 200, hp(("zz", 9), ("n2", 1)))], {"n2"}),  # not offered: the scheduler ignores it
        ([("a", 200, hp())], set()),  # an empty list lists nothing
        ([("a", 500, hp(("n1", 3)))], set()),  # an error answer: its scores are dropped
        ([("a", 200, b'[{"Host":"n1","Score":5.0}]')], set()),  # undecodable: dropped whole
        ([("a", 200, hp(("n1", 1))), ("b", 200, hp(("n3", 0)))], {"n1", "n3"}),
        ([("a", 200, hp(("n1", 1))), ("b", None, b"")], {"n1"}),  # b gave no answer
    ],
)
def test_it_lists_the_hosts_some_prioritizer_listed_as_the_scheduler_holds_their_scores(results, expected):
    """prioritizeNodes gives a random tie-breaker to each feasible host some extender listed (any
    score, any number of times) and leaves every other host at 0."""
    feasible = ["n1", "n2", "n3"]
    rs = [prio(be(n), feasible, body, status) if status else (be(n), None) for n, status, body in results]
    assert listed_hosts(rs, every_host=False) == expected
    assert listed_hosts(rs, every_host=True) is None


def test_listed_hosts_come_from_the_verdict_not_from_the_decisions_reason_text():
    """The decisions are the record's; a verdict judged without them, or with other reasons, still
    says which hosts its backend listed."""
    a = be("a")
    verdict = judge_prioritize(a, ["n1", "n2"], 200, hp(("n1", 0)))
    assert verdict.listed == {"n1"}
    verdict.decisions = []
    assert listed_hosts([(a, verdict)], every_host=False) == {"n1"}


def test_prioritize_answer_lists_each_host_once():
    assert prioritize_answer(["n1", "n2", "n1"], {"n1": 5, "n2": 0}) == [HostPriority("n1", 5), HostPriority("n2", 0)]


# ------------------------------------------------------------------ preempt


def mv(*uids, pdb=0) -> MetaVictims:
    return MetaVictims(list(uids), pdb)


def preply(m: dict) -> bytes:
    return json.dumps({"NodeNameToMetaVictims": {
        n: (None if v is None else {"Pods": [{"UID": u} for u in v.pods], "NumPDBViolations": v.num_pdb_violations})
        for n, v in m.items()}}).encode()


START = {"n1": mv("u1", "u2"), "n2": mv("u3"), "n3": mv("u4")}


def run_preempt(steps, start=START):
    return drive(PreemptChain(start), steps)


def test_preempt_replies_replace_the_map():
    res, called = run_preempt([(be("a"), 200, preply({"n1": mv("u2", pdb=1), "n3": mv("u4")})),
                               (be("b"), 200, preply({"n3": mv("u4", pdb=2)}))])
    assert called[1][1] == {"n1": mv("u2", pdb=1), "n3": mv("u4")}
    assert res.victims == {"n3": mv("u4", pdb=2)} and res.error == ""


def test_an_empty_preempt_map_ends_the_chain():
    res, called = run_preempt([(be("a"), 200, preply({})), (be("b"), 200, preply({"n1": mv("u1")}))])
    assert res.victims == {} and len(called) == 1


def test_no_preempt_call_for_an_empty_map():
    assert PreemptChain({}).done


def test_an_ignorable_preempt_failure_is_skipped():
    res, called = run_preempt([(be("a", ignorable=True), 500, b""), (be("b"), 200, preply({"n2": mv("u3")}))])
    assert called[1][1] == START and res.victims == {"n2": mv("u3")} and res.error == ""


@pytest.mark.parametrize(
    "status, body, error",
    [
        (None, "timeout", "timeout"),
        (200, preply({"n1": mv("u9")}), "claims to preempt pod (UID: u9) on node: n1"),
        (200, preply({"n1": mv()}), 'expected at least one victim pod on node "n1"'),
    ],
)
def test_a_non_ignorable_preempt_failure_ends_in_error(status, body, error):
    res, called = run_preempt([(be("a"), status, body), (be("b"), 200, preply({"n2": mv("u3")}))])
    assert error in res.error and res.victims == {} and len(called) == 1


def test_an_ignorable_preempt_backend_drops_nodes_without_victims():
    res, _ = run_preempt([(be("a", ignorable=True), 200, preply({"n1": mv(), "n2": mv("u3")}))])
    assert res.victims == {"n2": mv("u3")} and res.error == ""


@pytest.mark.parametrize("ignorable", [True, False])
def test_a_null_victim_fails_the_call_instead_of_reaching_the_scheduler(ignorable):
    """A nil *MetaVictims (or *MetaPod) panics kube-scheduler in convertToVictims (extender.go),
    before callExtenders could drop the node: the proxy, in its place, fails that backend's call
    (an ignorable one is skipped, the map unchanged) and never answers a null victim."""
    res, called = run_preempt([(be("a", ignorable=ignorable), 200, preply({"n2": mv("u3"), "n3": None})),
                               (be("b"), 200, preply({"n1": mv("u1")}))])
    if ignorable:
        assert res.victims == {"n1": mv("u1")} and res.error == "" and len(called) == 2
    else:
        assert "nil *MetaVictims" in res.error and res.victims == {} and len(called) == 1


def test_an_ignorable_preempt_backend_left_with_nothing_ends_the_chain():
    res, called = run_preempt([(be("a", ignorable=True), 200, preply({"n1": mv()})), (be("b"), 200, preply({}))])
    assert res.victims == {} and len(called) == 1


def test_preempt_uids_are_checked_against_what_the_proxy_was_given():
    res, _ = run_preempt([(be("a"), 200, preply({"n1": mv("u1")})), (be("b"), 200, preply({"n1": mv("u2")}))])
    assert res.victims == {"n1": mv("u2")}
    v = judge_preempt(be("a", ignorable=True), {"n1": ["u1"]}, 200, preply({"n1": mv("u7"), "n2": mv()}))
    assert v.outcome == "error"  # a UID error is not rescued by dropping empty nodes


# ------------------------------------------------------------------ bind


def test_it_chooses_the_first_interested_binder():
    backends = [be("x", bind_verb="bind", managed=[GPU], ignorable=True), be("y")]
    assert choose_binder(backends, pod(requests=[GPU])).name == "x"
    assert choose_binder(backends, pod(requests=["cpu"])) is None


@pytest.mark.parametrize(
    "ignorable, answer, expected",
    [
        (False, judge_bind(be("b"), 200, b'{"Error":""}'), "bound"),
        (True, judge_bind(be("b"), 200, b'{"Error":""}'), "bound"),
        (False, judge_bind(be("b"), 200, b'{"Error":"no"}'), "error"),
        (True, judge_bind(be("b"), 500, b""), "default-binder"),
        (False, "timeout", "error"),
        (True, None, "default-binder"),
    ],
)
def test_bind_fallthrough(ignorable, answer, expected):
    assert bind_fallthrough(be("b", bind_verb="bind", ignorable=ignorable), answer) == expected


# ------------------------------------------------------------------ combined entry


def test_combined_entry_derives_every_field():
    backends = [
        be("a", managed=[GPU], http_timeout=2.0, node_cache_capable=False, prioritize_verb=""),
        be("b", managed=["example.com/fpga"], http_timeout=3.5, ignorable=True, bind_verb="", weight=4),
        be("c", managed=["example.com/nic"], bind_verb="bind", filter_verb="", preempt_verb="", http_timeout=1),
    ]
    entry = combined_entry(backends, url_prefix="http://proxy:8000/extender")
    assert entry == {
        "urlPrefix": "http://proxy:8000/extender",
        "filterVerb": "filter", "preemptVerb": "preempt", "prioritizeVerb": "prioritize",
        "weight": 1, "bindVerb": "bind",
        "httpTimeout": "6500ms",  # filter chain 2 + 3.5, plus the margin
        "nodeCacheCapable": False,
        "managedResources": [{"name": GPU, "ignoredByScheduler": False},
                             {"name": "example.com/fpga", "ignoredByScheduler": False},
                             {"name": "example.com/nic", "ignoredByScheduler": False}],
        "ignorable": False,
    }


@pytest.mark.parametrize(
    "backends, key, value",
    [
        ([be("a"), be("b", managed=[GPU])], "managedResources", None),  # a sees every pod
        ([be("a", ignorable=True), be("b", ignorable=True)], "ignorable", True),
        ([be("a", ignorable=True), be("b")], "ignorable", False),
        ([be("a"), be("b")], "nodeCacheCapable", True),
        ([be("a"), be("b", node_cache_capable=False)], "nodeCacheCapable", False),
        ([be("a", filter_verb="", prioritize_verb="", preempt_verb="")], "filterVerb", None),
        ([be("a", filter_verb="", prioritize_verb="")], "prioritizeVerb", None),
        ([be("a", bind_verb="")], "bindVerb", None),
        ([be("a", http_timeout=5), be("b", http_timeout=5)], "httpTimeout", f"{10 + int(COMBINED_TIMEOUT_MARGIN)}s"),
        ([be("a", filter_verb="", preempt_verb="", http_timeout=7), be("b", filter_verb="", preempt_verb="", http_timeout=3)],
         "httpTimeout", f"{7 + int(COMBINED_TIMEOUT_MARGIN)}s"),  # prioritize runs in parallel
    ],
)
def test_combined_entry_truth_table(backends, key, value):
    entry = combined_entry(backends)
    assert isinstance(entry, dict) and entry.get(key) == value


def test_combined_entry_parallel_filter_budget_is_the_slowest():
    backends = [be("a", http_timeout=5, preempt_verb=""), be("b", http_timeout=2, preempt_verb="")]
    assert combined_entry(backends, parallel_filter=True)["httpTimeout"] == "6s"


def test_combined_entry_keeps_ignored_by_scheduler():
    b = BackendConfig(name="a", filter_verb="filter", managed_resources=(ManagedResource(GPU, True),))
    assert combined_entry([b])["managedResources"] == [{"name": GPU, "ignoredByScheduler": True}]


@pytest.mark.parametrize(
    "backends, words",
    [
        ([], "no backends"),
        ([be("a", bind_verb="bind", ignorable=True), be("b")], "ignorable binder"),
        ([be("a"), BackendConfig(name="g", filter_verb="filter", managed_resources=(ManagedResource(GPU, True),))],
         "ignoredByScheduler"),
    ],
)
def test_combined_entry_refusals(backends, words):
    r = combined_entry(backends)
    assert isinstance(r, CombinedRefusal) and words in r.reason


def test_an_all_ignorable_set_with_an_ignorable_binder_is_represented():
    entry = combined_entry([be("a", bind_verb="bind", ignorable=True), be("b", ignorable=True)])
    assert entry["ignorable"] is True and entry["bindVerb"] == "bind"


def test_combined_caveats_name_the_narrow_binder():
    notes = combined_caveats([be("a", bind_verb="bind", managed=[GPU]), be("b")])
    assert any("binder 'a'" in n for n in notes)
    assert combined_caveats([be("a", bind_verb="bind"), be("b")]) == []
