"""Property tests: the combination part of extproxy.semantics against an independent emulation.

The emulation below is written from the reference's description of kube-scheduler's loops
(extender-protocol.md §3.3, §4.3, §4.4, §4.6; findNodesThatPassExtenders, prioritizeNodes,
callExtenders). It reads the generated backend behaviour directly; the implementation only ever
sees the JSON bytes of the replies, passed through the real judge_* functions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from extproxy.config import BackendConfig, ManagedResource
from extproxy.protocol import MetaVictims
from extproxy.semantics import (
    FilterChain,
    PreemptChain,
    combine_prioritize,
    combined_entry,
    interested,
    judge_prioritize,
    parallel_filter,
)

POOL = [f"n{i}" for i in range(6)]
FOREIGN = ["x1", "x2"]
RES = [f"example.com/r{i}" for i in range(3)]
REASONS = ["no gpu", "full", "taint"]
SETTINGS = settings(max_examples=200, deadline=None)


@dataclass
class Behaviour:
    name: str
    ignorable: bool
    ncc: bool
    managed: str | None  # a managed resource, or None: interested in every pod
    has_verb: bool
    kind: str  # "ok" | "http500" | "errfield" | "transport" | "float" (prioritize only)
    accept: frozenset
    failed: dict
    unres: dict
    extras: tuple  # names passed beyond the input (foreign or not)
    also_named: dict  # failure entries named whatever the input (status code, reason)
    form: str  # "names" | "nodes" | "none"
    weight: int = 1
    scores: tuple = ()

    def config(self) -> BackendConfig:
        return BackendConfig(
            name=self.name, url_prefix=f"http://{self.name}:80/s",
            filter_verb="filter" if self.has_verb else "", prioritize_verb="prioritize" if self.has_verb else "",
            preempt_verb="preempt" if self.has_verb else "", weight=self.weight, node_cache_capable=self.ncc,
            managed_resources=(ManagedResource(self.managed),) if self.managed else (), ignorable=self.ignorable,
        )


def behaviours(foreign: bool = True, also: bool = True):
    names = st.sampled_from(POOL + (FOREIGN if foreign else []))
    reason_map = st.dictionaries(st.sampled_from(POOL), st.sampled_from(REASONS), max_size=4)
    return st.builds(
        Behaviour,
        name=st.just(""),
        ignorable=st.booleans(),
        ncc=st.booleans(),
        managed=st.one_of(st.none(), st.sampled_from(RES)),
        has_verb=st.sampled_from([True, True, True, False]),
        kind=st.sampled_from(["ok"] * 6 + ["http500", "errfield", "transport"]),
        accept=st.frozensets(st.sampled_from(POOL)),
        failed=reason_map,
        unres=reason_map,
        extras=st.lists(names, max_size=2).map(tuple) if foreign else st.just(()),
        also_named=(st.dictionaries(st.sampled_from(POOL + FOREIGN),
                                    st.tuples(st.sampled_from(["f", "u"]), st.sampled_from(REASONS)), max_size=2)
                    if also else st.just({})),
        form=st.sampled_from(["names", "names", "nodes", "none"]),
        weight=st.integers(1, 5),
        scores=st.lists(st.tuples(st.sampled_from(POOL + FOREIGN), st.integers(-3, 15)), max_size=6).map(tuple),
    )


def named(bs: list[Behaviour]) -> list[Behaviour]:
    for i, b in enumerate(bs):
        b.name = f"b{i}"
    return bs


def make_pod(requested) -> dict:
    return {"spec": {"containers": [{"resources": {"limits": {r: "1" for r in requested}}}]}}


# ------------------------------------------------------------------ filter


def filter_answer(b: Behaviour, sent: list[str]):
    """What this backend says when sent ``sent``: (passed, failed, unresolvable)."""
    passed = [n for n in sent if n in b.accept] + list(b.extras)
    failed = {n: r for n, r in b.failed.items() if n in sent and n not in b.accept}
    unres = {n: r for n, r in b.unres.items() if n in sent and n not in b.accept}
    for n, (code, r) in b.also_named.items():
        (failed if code == "f" else unres)[n] = r
    return passed, failed, unres


def filter_body(b: Behaviour, sent: list[str]) -> tuple[int | None, bytes | str]:
    if b.kind == "transport":
        return None, "connection refused"
    if b.kind == "http500":
        return 500, b"oops"
    if b.kind == "errfield":
        return 200, json.dumps({"Error": f"{b.name} failed"}).encode()
    passed, failed, unres = filter_answer(b, sent)
    body = {"FailedNodes": failed, "FailedAndUnresolvableNodes": unres, "Error": ""}
    if b.form == "names":
        body["NodeNames"] = passed
    elif b.form == "nodes":
        body["Nodes"] = {"metadata": {}, "items": [{"metadata": {"name": n}} for n in passed]}
    return 200, json.dumps(body).encode()


def emulate_filter(bs: list[Behaviour], pod_resources, nodes: list[str]):
    """findNodesThatPassExtenders, step by step. Returns (feasible, statuses, error_backend)."""
    order = [b for b in bs if not b.ignorable] + [b for b in bs if b.ignorable]
    feasible = list(nodes)
    statuses: dict[str, tuple[str, str]] = {}
    for b in order:
        if not feasible:
            break
        if not b.has_verb or (b.managed is not None and b.managed not in pod_resources):
            continue
        failed_call = b.kind != "ok"
        if not failed_call:
            passed, failed, unres = filter_answer(b, feasible)
            if b.ncc and b.form == "names":
                if any(n not in feasible for n in passed):
                    failed_call = True
                else:
                    new = passed
            elif b.form == "nodes":
                new = passed
            else:
                new = []
        if failed_call:
            if b.ignorable:
                continue
            return [], statuses, b.name
        for n, r in unres.items():
            statuses[n] = ("U", r)
        for n, r in failed.items():
            if n not in unres:
                statuses[n] = ("F", r)
        feasible = new
    return feasible, statuses, ""


def as_statuses(res) -> dict:
    out = {n: ("F", r) for n, r in res.failed.items()}
    out.update({n: ("U", r) for n, r in res.unresolvable.items()})
    return out


inputs = st.lists(st.sampled_from(POOL), min_size=1, max_size=6, unique=True)
pods = st.frozensets(st.sampled_from(RES))


@SETTINGS
@given(st.lists(behaviours(), min_size=1, max_size=4).map(named), pods, inputs)
def test_filter_chain_matches_the_scheduler_loop(bs, pod_res, nodes):
    configs = [b.config() for b in bs]
    by_name = {b.name: b for b in bs}
    chain = FilterChain(nodes, interested(configs, make_pod(pod_res), "filter"))
    while (backend := chain.next_backend()) is not None:
        status, body = filter_body(by_name[backend.name], chain.remaining)
        if status is None:
            chain.apply(backend, None, body)
        else:
            chain.apply(backend, chain.judge(backend, status, body))
    res = chain.result()
    feasible, statuses, err_backend = emulate_filter(bs, pod_res, nodes)
    assert res.error_backend == err_backend and bool(res.error) == bool(err_backend)
    if not err_backend:
        assert res.passed == feasible
        assert as_statuses(res) == statuses


@SETTINGS
@given(st.lists(behaviours(foreign=False, also=False), min_size=1, max_size=4).map(named), pods, inputs)
def test_parallel_filter_equals_the_chain_for_per_node_backends(bs, pod_res, nodes):
    configs = interested([b.config() for b in bs], make_pod(pod_res), "filter")
    by_name = {b.name: b for b in bs}
    results = []
    for backend in configs:  # every backend sees the full input
        status, body = filter_body(by_name[backend.name], nodes)
        if status is None:
            results.append((backend, None, body))
        else:
            results.append((backend, FilterChain(nodes).judge(backend, status, body), ""))
    res = parallel_filter(nodes, results)
    feasible, statuses, err_backend = emulate_filter(bs, pod_res, nodes)
    assert res.error_backend == err_backend
    if not err_backend:
        assert res.passed == feasible and as_statuses(res) == statuses


# ------------------------------------------------------------------ prioritize


def prioritize_body(b: Behaviour) -> tuple[int | None, bytes]:
    if b.kind in ("transport", "http500"):
        return 500, b""
    items = [{"Host": h, "Score": s} for h, s in b.scores]
    raw = json.dumps(items).encode()
    if b.kind == "errfield" and items:  # a float score: the whole reply is discarded
        raw = raw.replace(f'"Score": {items[0]["Score"]}'.encode(), f'"Score": {items[0]["Score"]}.0'.encode(), 1)
    return 200, raw


def emulate_prioritize(bs: list[Behaviour], pod_res, feasible: list[str]) -> dict[str, int]:
    totals = {n: 0 for n in feasible}
    for b in bs:
        if not b.has_verb or (b.managed is not None and b.managed not in pod_res):
            continue
        if b.kind != "ok" and not (b.kind == "errfield" and not b.scores):
            continue
        for host, score in b.scores:
            if host in totals:
                totals[host] += score * b.weight * 10
    return totals


@SETTINGS
@given(st.lists(behaviours(), min_size=1, max_size=4).map(named), pods,
       st.lists(st.sampled_from(POOL), min_size=1, max_size=6))
def test_prioritize_matches_the_scheduler_sum(bs, pod_res, feasible):
    results = []
    for backend in interested([b.config() for b in bs], make_pod(pod_res), "prioritize"):
        b = next(x for x in bs if x.name == backend.name)
        status, body = prioritize_body(b)
        results.append((backend, judge_prioritize(backend, feasible, status, body)))
    totals = combine_prioritize(feasible, results)
    # the proxy is registered with weight 1: the scheduler adds total × 1 × 10
    assert {n: t * 1 * 10 for n, t in totals.items()} == emulate_prioritize(bs, pod_res, feasible)


# ------------------------------------------------------------------ preempt


@dataclass
class PBehaviour:
    name: str
    ignorable: bool
    managed: str | None
    has_verb: bool
    kind: str  # "ok" | "http500" | "transport"
    keep: frozenset  # nodes it keeps (of what it was sent)
    extra_nodes: tuple  # nodes it adds whatever it was sent (pool nodes, maybe unknown)
    drop_victims: frozenset  # nodes whose victims it empties
    null_nodes: frozenset  # nodes it answers with null
    bad_uid: frozenset  # nodes where it names a UID that is not there
    pdb: int

    def config(self) -> BackendConfig:
        return BackendConfig(name=self.name, preempt_verb="preempt" if self.has_verb else "",
                             managed_resources=(ManagedResource(self.managed),) if self.managed else (),
                             ignorable=self.ignorable)


node_sets = st.frozensets(st.sampled_from(POOL), max_size=3)
pbehaviours = st.builds(
    PBehaviour, name=st.just(""), ignorable=st.booleans(), managed=st.one_of(st.none(), st.sampled_from(RES)),
    has_verb=st.sampled_from([True, True, True, False]),
    kind=st.sampled_from(["ok"] * 5 + ["http500", "transport"]),
    keep=st.frozensets(st.sampled_from(POOL)), extra_nodes=st.lists(st.sampled_from(POOL), max_size=1).map(tuple),
    drop_victims=node_sets, null_nodes=st.frozensets(st.sampled_from(POOL), max_size=1),
    bad_uid=st.frozensets(st.sampled_from(POOL), max_size=1), pdb=st.integers(0, 3),
)
start_maps = st.dictionaries(st.sampled_from(POOL), st.integers(1, 3), min_size=0, max_size=5).map(
    lambda d: {n: [f"{n}-u{i}" for i in range(k)] for n, k in d.items()})


def preempt_answer(b: PBehaviour, sent: dict[str, list[str]], start: dict[str, list[str]]) -> dict:
    """node -> list of UIDs, or None for a JSON null."""
    out: dict[str, list[str] | None] = {}
    for n in list(sent) + list(b.extra_nodes):
        if n not in b.keep and n not in b.extra_nodes:
            continue
        pods = list(sent.get(n) or start.get(n) or ["ghost"])[:2]
        if n in b.drop_victims:
            pods = []
        if n in b.bad_uid:
            pods = pods + ["not-here"]
        out[n] = None if n in b.null_nodes else pods
    return out


def preempt_body(b: PBehaviour, sent, start) -> tuple[int | None, bytes | str]:
    if b.kind == "transport":
        return None, "i/o timeout"
    if b.kind == "http500":
        return 500, b""
    m = preempt_answer(b, sent, start)
    return 200, json.dumps({"NodeNameToMetaVictims": {
        n: None if v is None else {"Pods": [{"UID": u} for u in v], "NumPDBViolations": b.pdb} for n, v in m.items()
    }}).encode()


def emulate_preempt(bs: list[PBehaviour], pod_res, start: dict[str, list[str]]):
    """callExtenders; the scheduler's snapshot is modelled as the pods the proxy was given."""
    order = [b for b in bs if not b.ignorable] + [b for b in bs if b.ignorable]
    victims = {n: (list(p), 0) for n, p in start.items()}
    if not victims:
        return {}, ""
    for b in order:
        if not b.has_verb or (b.managed is not None and b.managed not in pod_res):
            continue
        ok = b.kind == "ok"
        if ok:
            reply = preempt_answer(b, {n: p for n, (p, _) in victims.items()}, start)
            for n, pods in reply.items():
                if any(n not in start or u not in start[n] for u in pods or []):
                    ok = False
                if pods is None:  # a nil *MetaVictims: convertToVictims panics; the proxy fails the call
                    ok = False
        if not ok:
            if b.ignorable:
                continue
            return {}, b.name
        new = {}
        for n, pods in reply.items():
            if not pods:
                if b.ignorable:
                    continue
                return {}, b.name
            new[n] = (pods, b.pdb)
        victims = new
        if not victims:
            break
    return victims, ""


@SETTINGS
@given(st.lists(pbehaviours, min_size=1, max_size=4).map(
    lambda bs: [PBehaviour(**{**b.__dict__, "name": f"p{i}"}) for i, b in enumerate(bs)]), pods, start_maps)
def test_preempt_chain_matches_the_scheduler_loop(bs, pod_res, start):
    by_name = {b.name: b for b in bs}
    chain = PreemptChain({n: MetaVictims(p, 0) for n, p in start.items()},
                         interested([b.config() for b in bs], make_pod(pod_res), "preempt"))
    while (backend := chain.next_backend()) is not None:
        sent = {n: mv.pods for n, mv in chain.remaining.items()}
        status, body = preempt_body(by_name[backend.name], sent, start)
        if status is None:
            chain.apply(backend, None, body)
        else:
            chain.apply(backend, chain.judge(backend, status, body))
    res = chain.result()
    victims, err_backend = emulate_preempt(bs, pod_res, start)
    assert res.error_backend == err_backend
    assert {n: (mv.pods, mv.num_pdb_violations) for n, mv in res.victims.items()} == victims


# ------------------------------------------------------------------ combined entry


@SETTINGS
@given(st.lists(behaviours(), min_size=1, max_size=4).map(named), st.lists(pods, min_size=1, max_size=4))
def test_the_combined_entry_is_interested_exactly_when_some_backend_is(bs, pod_list):
    configs = [b.config() for b in bs]
    entry = combined_entry(configs)
    assert isinstance(entry, dict)  # no binder, no ignoredByScheduler: always representable
    managed = {r["name"] for r in entry.get("managedResources") or []}
    for p in pod_list:
        entry_interested = not managed or bool(managed & set(p))
        assert entry_interested == any(c.interested_in(make_pod(p)) for c in configs)
    assert entry["ignorable"] == all(c.ignorable for c in configs)
    carry_nodes = [c for c in configs if c.filter_verb or c.prioritize_verb or c.preempt_verb]  # bind sends none
    assert entry["nodeCacheCapable"] == all(c.node_cache_capable for c in carry_nodes)
