"""What kube-scheduler makes of extender replies.

Pure functions, no Django, no I/O. Sections:

* **Judge** (this part): how kube-scheduler reads ONE backend's reply to one verb, given the HTTP
  status and body it received (reference: extender-protocol.md §1, §4.3-4.6, §5). Timeouts and
  transport errors are decided by the caller; the judge only sees a status and a body.
* **Combination**: how kube-scheduler combines several backends (order, interest, the filter
  chain, weighted scores, the preempt chain, the binder) and the single extender entry of the
  combined form; its API and the interpretation choices are listed at the top of that section.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from extproxy.protocol import (
    MAX_EXTENDER_PRIORITY,
    MIN_EXTENDER_PRIORITY,
    MetaVictims,
    HostPriority,
    ProtocolError,
    decode_binding_result,
    decode_filter_result,
    decode_host_priority_list,
    decode_preemption_result,
    envelope_keys,
)

if TYPE_CHECKING:  # annotations only: semantics needs no config loading at run time
    from extproxy.config import BackendConfig, ManagedResource

# =============================================================================================
# Judge: one backend's reply, read the way kube-scheduler reads it
# =============================================================================================

#: MaxNodeScore / MaxExtenderPriority (integer arithmetic, as in the scheduler).
SCORE_FACTOR = 100 // MAX_EXTENDER_PRIORITY


@dataclass
class Verdict:
    outcome: str  # "ok" or "error" (timeouts/transport errors are decided by the caller)
    error: str  # "" when ok; otherwise the text the scheduler would report
    decisions: list[dict]  # {"node","backend","result","reason","score","weighted_score"}
    findings: list[dict]  # {"kind","detail"}: protocol breaches worth showing, even when ok
    passed: list[str] | None = None  # filter: names that pass, as the scheduler would take them
    failed: dict[str, str] | None = None  # filter: Unschedulable reasons (after precedence)
    unresolvable: dict[str, str] | None = None  # filter: UnschedulableAndUnresolvable reasons
    scores: dict[str, int] | None = None  # prioritize: raw Score per input host (summed)
    victims: dict[str, MetaVictims] | None = None  # preempt: accepted map


def _decision(
    node: str,
    backend: str,
    result: str,
    reason: str | None = None,
    score: int | None = None,
    weighted: int | None = None,
) -> dict:
    return {
        "node": node,
        "backend": backend,
        "result": result,
        "reason": reason,
        "score": score,
        "weighted_score": weighted,
    }


def _finding(kind: str, detail: str) -> dict:
    return {"kind": kind, "detail": detail}


def _fail(error: str, findings: list[dict]) -> Verdict:
    return Verdict(outcome="error", error=error, decisions=[], findings=findings)


def _full_url(url: str, verb: str) -> str:
    return url.rstrip("/") + "/" + verb


def _precheck(verb: str, url: str, status: int, body: bytes) -> Verdict | None:
    """The non-200 rule (§1): the body is not even read."""
    if status != 200:
        return _fail(
            f"failed {verb} with extender at URL {_full_url(url, verb)}, code {status}",
            [_finding("non-200", f"HTTP status {status}; only 200 counts as success")],
        )
    return None


def _decode_failure(exc: ProtocolError, body: bytes) -> Verdict:
    if exc.kind == "eof":
        kind, detail = "empty-body", "200 with an empty body fails to decode (EOF)"
    elif exc.kind in ("float-score", "string-score"):
        kind, detail = exc.kind, f"{exc}; the whole reply is discarded"
    else:
        kind, detail = "undecodable", str(exc)
    return _fail(str(exc), [_finding(kind, detail)])


def _error_under_200(text: str, findings: list[dict]) -> Verdict:
    findings.append(_finding("error-under-200", f"reply carries Error: {text}"))
    return _fail(text, findings)


def judge_filter(
    backend: str,
    node_cache_capable: bool,
    input_names: list[str],
    status: int,
    body: bytes,
    url: str = "",
    *,
    verb: str = "filter",
    with_decisions: bool = True,
) -> Verdict:
    """Read a filter reply as kube-scheduler does (§4.3, §5 items 3-5, 7, 9).

    ``with_decisions=False`` skips the per-node decisions (and the dropped-without-reason
    finding that comes from them): the combined form's hot path needs only the lists and maps.

    ``url`` is the backend's urlPrefix (the extender's name in scheduler messages); the non-200
    message uses ``<url>/<verb>`` like the scheduler does.
    """
    pre = _precheck(verb, url, status, body)
    if pre is not None:
        return pre
    try:
        r = decode_filter_result(body, names_only=True)  # only the names of returned Nodes matter
    except ProtocolError as exc:
        return _decode_failure(exc, body)
    findings: list[dict] = []
    if r.error:
        return _error_under_200(r.error, findings)

    input_set = set(input_names)
    passed: list[str]
    if node_cache_capable and r.node_names is not None:
        outside = set(r.node_names) - input_set
        for name in r.node_names if outside else ():  # the first one outside, in reply order
            if name in outside:
                findings.append(
                    _finding("name-not-in-input", f"NodeNames lists {name!r}, not in the input")
                )
                return _fail(
                    f'extender "{url}" claims a filtered node "{name}" which is not found in the '
                    "input node list",
                    findings,
                )
        passed = list(r.node_names)
    elif r.nodes is not None:
        passed = []
        for node in r.nodes:
            md = node.get("metadata") if isinstance(node, dict) else None
            raw_name = md.get("name") if isinstance(md, dict) else None
            name = raw_name if isinstance(raw_name, str) else ""
            passed.append(name)
            if name not in input_set:
                findings.append(
                    _finding(
                        "name-not-in-input",
                        f"Nodes returns {name!r}, not in the input; the scheduler accepts it "
                        "unchecked and uses the returned object",
                    )
                )
    else:
        passed = []
        if r.node_names is not None:
            findings.append(
                _finding(
                    "wrong-list-for-mode",
                    "nodeCacheCapable is false but the reply has only NodeNames: no node passes",
                )
            )
        else:
            findings.append(
                _finding("no-list", "reply has neither NodeNames nor Nodes: no node passes")
            )

    passed_set = set(passed)
    if len(passed_set) != len(passed):
        seen: set[str] = set()
        dups = [n for n in passed if n in seen or seen.add(n)]  # type: ignore[func-returns-value]
        findings.append(_finding("duplicate-name", f"listed more than once: {', '.join(dups)}"))

    unresolvable = dict(r.failed_and_unresolvable)
    failed = {k: v for k, v in r.failed_nodes.items() if k not in unresolvable}

    for name in sorted(set(unresolvable) | set(r.failed_nodes)):
        if name not in input_set:
            findings.append(
                _finding("unknown-failed-name", f"failure maps name {name!r}, not in the input")
            )
        elif name in passed_set:
            findings.append(
                _finding("passed-and-failed", f"{name!r} passes and is also listed as failed")
            )

    decisions: list[dict] = []
    dropped: list[str] = []
    for name in input_names if with_decisions else ():
        if name in passed_set:
            decisions.append(_decision(name, backend, "passed"))
        elif name in unresolvable:
            decisions.append(_decision(name, backend, "unresolvable", unresolvable[name]))
        elif name in failed:
            decisions.append(_decision(name, backend, "failed", failed[name]))
        else:
            decisions.append(_decision(name, backend, "failed", None))
            dropped.append(name)
    if dropped:
        findings.append(
            _finding("dropped-without-reason", f"dropped with no reason: {', '.join(dropped)}")
        )
    return Verdict(
        outcome="ok",
        error="",
        decisions=decisions,
        findings=findings,
        passed=passed,
        failed=failed,
        unresolvable=unresolvable,
    )


def judge_prioritize(
    backend: str,
    weight: int,
    input_names: list[str],
    status: int,
    body: bytes,
    url: str = "",
    *,
    verb: str = "prioritize",
) -> Verdict:
    """Read a prioritize reply as kube-scheduler does (§4.4, §5 item 2).

    On error the scheduler drops this backend's scores (scheduling goes on): outcome "error".
    """
    pre = _precheck(verb, url, status, body)
    if pre is not None:
        return pre
    try:
        items = decode_host_priority_list(body)
    except ProtocolError as exc:
        return _decode_failure(exc, body)
    findings: list[dict] = []
    input_set = set(input_names)
    scores: dict[str, int] = {}
    for hp in items:
        if hp.host not in input_set:
            findings.append(
                _finding("name-not-in-input", f"score for {hp.host!r}, not in the input: ignored")
            )
            continue
        if not MIN_EXTENDER_PRIORITY <= hp.score <= MAX_EXTENDER_PRIORITY:
            findings.append(
                _finding(
                    "score-out-of-range",
                    f"{hp.host!r} scored {hp.score}, outside "
                    f"{MIN_EXTENDER_PRIORITY}..{MAX_EXTENDER_PRIORITY}; not clamped",
                )
            )
        if hp.host in scores:
            findings.append(
                _finding("duplicate-name", f"{hp.host!r} scored more than once: summed")
            )
        scores[hp.host] = scores.get(hp.host, 0) + hp.score
    decisions: list[dict] = []
    out: dict[str, int] = {}
    for name in input_names:
        if name in out:
            continue
        got = scores.get(name)
        s = got if got is not None else 0
        out[name] = s
        decisions.append(
            _decision(
                name,
                backend,
                "scored",
                None if got is not None else "no score returned",
                s,
                s * weight * SCORE_FACTOR,
            )
        )
    return Verdict(outcome="ok", error="", decisions=decisions, findings=findings, scores=out)


def judge_bind(
    backend: str, status: int, body: bytes, url: str = "", *, verb: str = "bind"
) -> Verdict:
    """Read a bind reply (§4.5, §5 item 14): 200 with an empty Error counts as bound."""
    pre = _precheck(verb, url, status, body)
    if pre is not None:
        return pre
    try:
        r = decode_binding_result(body)
    except ProtocolError as exc:
        return _decode_failure(exc, body)
    if r.error:
        return _error_under_200(r.error, [])
    return Verdict(outcome="ok", error="", decisions=[], findings=[])


def judge_preempt(
    backend: str,
    input_victims: dict[str, list[str]],
    status: int,
    body: bytes,
    url: str = "",
    *,
    verb: str = "preempt",
) -> Verdict:
    """Read a preempt reply (§4.6, §5 item 6). ``input_victims``: node -> UIDs sent.

    The reply map replaces the input. Every UID must be one given for that node; a node that was
    not in the input is an error; a node with null/empty Pods is an error.
    """
    pre = _precheck(verb, url, status, body)
    if pre is not None:
        return pre
    try:
        r = decode_preemption_result(body)
    except ProtocolError as exc:
        return _decode_failure(exc, body)
    findings: list[dict] = []
    reply = r.node_to_meta_victims
    if not reply:
        folded = {k.lower() for k in envelope_keys(body)}
        if "nodenametovictims" in folded and "nodenametometavictims" not in folded:
            findings.append(
                _finding(
                    "wrong-preempt-form",
                    "reply holds only NodeNameToVictims, which the scheduler ignores: "
                    "decodes to an empty map (no preemption)",
                )
            )
    error = ""
    # Pass 1, like ProcessPreemption: each UID must be a pod the scheduler knows on that node.
    for node, mv in reply.items():
        if mv is None:
            continue
        given = input_victims.get(node)
        for uid in mv.pods:
            if given is None or uid not in given:
                kind = "victim-not-in-input" if given is not None else "node-not-in-input"
                findings.append(
                    _finding(kind, f"pod UID {uid!r} on node {node!r} was not given for that node")
                )
                if not error:
                    error = (
                        f'extender "{url}" claims to preempt pod (UID: {uid}) on node: {node}, '
                        "but the pod is not found on that node"
                    )
    # Pass 2, like callExtenders: every node kept needs at least one victim.
    for node, mv in reply.items():
        if mv is None or not mv.pods:
            findings.append(
                _finding(
                    "empty-victims",
                    f"node {node!r} kept with {'null' if mv is None else 'no'} victims",
                )
            )
            if not error:
                error = f'expected at least one victim pod on node "{node}"'
    if error:
        return _fail(error, findings)
    accepted: dict[str, MetaVictims] = {n: mv for n, mv in reply.items() if mv is not None}
    decisions: list[dict] = []
    for node in input_victims:
        mv = accepted.get(node)
        if mv is not None:
            decisions.append(_decision(node, backend, "passed", "victims: " + ", ".join(mv.pods)))
        else:
            decisions.append(_decision(node, backend, "failed", "dropped by backend"))
    return Verdict(outcome="ok", error="", decisions=decisions, findings=findings, victims=accepted)


# =============================================================================================
# Combination: several backends, combined the way kube-scheduler combines its extenders
# =============================================================================================
#
# Pure decisions for the combined endpoints (/extender/filter, /prioritize, /preempt, /bind) and
# for `scheduler_config --combined`. The engine does the I/O; these functions and step machines
# decide what the scheduler would have done calling each backend itself (reference §3.3, §4, §5;
# upstream schedule_one.go findNodesThatPassExtenders / prioritizeNodes / extendersBinding and
# preemption.go callExtenders, current releases).
#
# API
# ---
# scheduler_order(backends) -> list[BackendConfig]
#     non-ignorable in config order, then ignorable in config order (buildExtenders).
# interested(backends, pod, verb) -> list[BackendConfig]
#     scheduler_order, keeping those with that verb set and interested in the pod
#     (managedResources in requests or limits of containers/initContainers).
# FilterChain(input_names, backends=())
#     .next_backend() -> BackendConfig | None   (when built with the interested backends)
#     .remaining -> list[str]    exactly what the next backend is sent (order, duplicates kept)
#     .done -> bool              nothing left, or a non-ignorable error ended the chain
#     .judge(backend, status, body) -> Verdict    judge_filter with the current input
#     .apply(backend, verdict | None, transport_error="")
#     .result() -> CombinedFilter
# parallel_filter(input_names, results) -> CombinedFilter     (the `parallelFilter: true` option)
# combine_prioritize(feasible, results) -> dict[str, int]     Σ Score × weight per feasible host
# prioritize_answer(feasible, totals) -> list[HostPriority]   one entry per host, feasible order
# judge_preempt_for(backend, input_victims, status, body) -> Verdict   judge_preempt + ignorable rule
# PreemptChain(victims, backends=())
#     .next_backend() / .remaining / .done / .judge(backend, status, body)
#     .apply(backend, verdict | None, transport_error="") / .result() -> CombinedPreempt
# choose_binder(backends, pod) -> BackendConfig | None
# bind_fallthrough(binder, verdict_or_error) -> "bound" | "error" | "default-binder"
# combined_entry(backends, *, url_prefix="", parallel_filter=False) -> dict | CombinedRefusal
# combined_caveats(backends) -> list[str]
# reply_error_text(verdict, transport_error="") -> str
#
# Choices where the scheduler's behaviour needed interpretation
# -------------------------------------------------------------
# * Failure statuses across backends: current releases write each backend's maps with
#   `statuses.Set` (unresolvable entries first, then failed entries not in the SAME backend's
#   unresolvable map), so across backends the LAST backend to name a node wins, code and
#   message: a node marked unresolvable by backend 1 and failed by backend 3 ends Unschedulable
#   with backend 3's message. (Releases before the NodeToStatus rewrite aggregated reasons and
#   kept UnschedulableAndUnresolvable once set; current wins, and one reply cannot carry several
#   messages per node anyway.) A node in the passed list keeps any status it was given; the
#   combined reply carries it too, so the scheduler sets the same status.
# * A backend's failure maps may name nodes it was not sent (the scheduler does not check);
#   they are applied like any other entry.
# * Mode false (nodeCacheCapable: false): names a backend returns that were not in its input
#   are kept, as the scheduler keeps the returned Node objects; FilterStep.added and
#   CombinedFilter.added mark them (the engine must forward the returned Node objects).
# * Error texts: `error` is the backend's text as judged. What the proxy must put in its own
#   Error field for the scheduler to end with the same text is `reply_error`: an Error field
#   from a backend is passed verbatim (the scheduler uses it as a format string either way),
#   any other text (HTTP status, decode error, transport error) has `%` doubled, so that the
#   scheduler's fmt.Errorf prints it unchanged.
# * Preempt: ignorable backends get their empty-victim nodes dropped instead of failing
#   (callExtenders); judge_preempt does not know the flag, so judge_preempt_for (and
#   PreemptChain.judge) apply it. UIDs are checked against the map the proxy was given by the
#   scheduler (not the shrinking map of the chain), which is the nearest the proxy gets to the
#   scheduler's own check against the pods on the node.
# * Bind: a default-binder outcome means the scheduler runs its Bind plugins. For a combined
#   entry that is ignorable the engine gets exactly that by answering the error; otherwise it
#   has to bind through the API itself (the DefaultBinder's action), see combined_caveats.

FILTER_OUTCOMES = ("ok", "skipped", "error", "unneeded")
#: Added to the sequential time budget of the combined entry's httpTimeout.
COMBINED_TIMEOUT_MARGIN = 1.0
COMBINED_VERBS = {"filter": "filter", "prioritize": "prioritize", "preempt": "preempt", "bind": "bind"}


def scheduler_order(backends: Sequence[BackendConfig]) -> list[BackendConfig]:
    """The order of every phase: non-ignorable in config order, then ignorable (§3.3)."""
    return [b for b in backends if not b.ignorable] + [b for b in backends if b.ignorable]


def interested(backends: Sequence[BackendConfig], pod: dict, verb: str) -> list[BackendConfig]:
    """Backends the scheduler would call for ``verb`` ("filter", ...), in scheduler order (§4.1)."""
    return [b for b in scheduler_order(backends) if b.verb_string(verb) and b.interested_in(pod)]


def go_format_safe(text: str) -> str:
    """Text that comes out unchanged when the scheduler passes it to fmt.Errorf as the format."""
    return text.replace("%", "%%")


def reply_error_text(verdict: Verdict | None, transport_error: str = "") -> str:
    """The Error text the proxy answers so that the scheduler ends with this backend's error.

    An Error field from the backend goes verbatim (the scheduler formats it with fmt.Errorf in
    both setups); any other failure text has ``%`` doubled so fmt.Errorf prints it unchanged.
    """
    if verdict is not None and any(f["kind"] == "error-under-200" for f in verdict.findings):
        return verdict.error
    text = verdict.error if verdict is not None else (transport_error or "no answer")
    return go_format_safe(text)


def _failure(verdict: Verdict | None, transport_error: str) -> str:
    if verdict is None:
        return transport_error or "no answer"
    return verdict.error if verdict.outcome != "ok" else ""


# ---------------------------------------------------------------------------------- filter


@dataclass
class FilterStep:
    """What one backend did to the chain."""

    backend: str
    outcome: str  # "ok" | "skipped" (ignorable error) | "error" (ends the chain) | "unneeded"
    input: list[str]
    error: str = ""
    passed: list[str] | None = None  # ok: this backend's passed list (the new feasible list)
    removed: list[str] | None = None  # ok: input names it did not pass
    added: list[str] | None = None  # ok, mode false: passed names not in its input (kept)
    failed: dict[str, str] | None = None  # ok: Unschedulable entries it wrote
    unresolvable: dict[str, str] | None = None  # ok: UnschedulableAndUnresolvable entries
    unasked: list[str] | None = None  # parallel: judged names the chain would not have sent it


@dataclass
class CombinedFilter:
    """The combined filter answer.

    With ``error`` set the answer is the error alone (``reply_error`` in the Error field): the
    scheduler discards lists and maps of a failed call and fails the attempt (no preemption).
    Otherwise reply ``passed`` (in order, duplicates kept) with ``failed``/``unresolvable``;
    each node is in at most one map, so the scheduler sets exactly these statuses.
    """

    passed: list[str]
    failed: dict[str, str]
    unresolvable: dict[str, str]
    error: str = ""
    reply_error: str = ""
    error_backend: str = ""
    added: list[str] = field(default_factory=list)  # final names not in the original input
    status_by: dict[str, str] = field(default_factory=dict)  # node -> backend whose entry stands
    steps: list[FilterStep] = field(default_factory=list)


class _Statuses:
    """The scheduler's NodeToStatus as extenders write it: Set, last writer wins."""

    def __init__(self) -> None:
        self.code: dict[str, tuple[str, str, str]] = {}  # node -> (code, message, backend)

    def write(self, backend: str, failed: dict[str, str], unresolvable: dict[str, str]) -> None:
        for name, msg in unresolvable.items():
            self.code[name] = ("unresolvable", msg, backend)
        for name, msg in failed.items():
            if name not in unresolvable:  # precedence inside one reply only
                self.code[name] = ("failed", msg, backend)

    def maps(self) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
        failed = {n: m for n, (c, m, _) in self.code.items() if c == "failed"}
        unres = {n: m for n, (c, m, _) in self.code.items() if c == "unresolvable"}
        return failed, unres, {n: b for n, (_, _, b) in self.code.items()}


class FilterChain:
    """Sequential filter over backends, as findNodesThatPassExtenders does (§4.2 step 4, §4.3).

    Feed it the backends from ``interested(backends, pod, "filter")`` in that order (or build
    it with them and use ``next_backend``). Each backend is sent exactly ``remaining``; its
    passed list IS the new feasible list (order and duplicates as returned; in mode false
    names outside its input are kept and marked). The chain is ``done`` once nothing is left
    (no further calls) or a non-ignorable backend failed (the attempt fails with that error).
    An ignorable backend's failure is skipped with the list unchanged.
    """

    def __init__(self, input_names: list[str], backends: Sequence[BackendConfig] = ()) -> None:
        self.input_names = list(input_names)
        self._input_set = set(input_names)
        self._remaining = list(input_names)
        self._queue = list(backends)
        self._statuses = _Statuses()
        self.steps: list[FilterStep] = []
        self.error = ""
        self.reply_error = ""
        self.error_backend = ""

    @property
    def remaining(self) -> list[str]:
        return list(self._remaining)

    @property
    def done(self) -> bool:
        return bool(self.error) or not self._remaining

    def next_backend(self) -> BackendConfig | None:
        if self.done or not self._queue:
            return None
        return self._queue[0]

    def judge(self, backend: BackendConfig, status: int, body: bytes) -> Verdict:
        """The chain's reading of a reply (no per-node decisions: the recorder makes those)."""
        return judge_filter(
            backend.name, backend.node_cache_capable, self._remaining, status, body,
            backend.url_prefix, verb=backend.filter_verb or "filter", with_decisions=False,
        )

    def apply(
        self, backend: BackendConfig, verdict: Verdict | None, timed_out_or_transport_error: str = ""
    ) -> None:
        if self.done:
            raise ValueError(f"filter chain is done; {backend.name} must not be called")
        if self._queue and self._queue[0].name == backend.name:
            self._queue.pop(0)
        step = _filter_step(backend, self._remaining, verdict, timed_out_or_transport_error)
        self.steps.append(step)
        if step.outcome == "error":
            self.error = step.error
            self.reply_error = reply_error_text(verdict, timed_out_or_transport_error)
            self.error_backend = backend.name
        elif step.outcome == "ok":
            self._statuses.write(backend.name, step.failed or {}, step.unresolvable or {})
            self._remaining = list(step.passed or [])

    def result(self) -> CombinedFilter:
        failed, unres, by = self._statuses.maps()
        passed = [] if self.error else list(self._remaining)
        return CombinedFilter(
            passed=passed,
            failed=failed,
            unresolvable=unres,
            error=self.error,
            reply_error=self.reply_error,
            error_backend=self.error_backend,
            added=[n for n in passed if n not in self._input_set],
            status_by=by,
            steps=list(self.steps),
        )


def _filter_step(
    backend: BackendConfig, sent: list[str], verdict: Verdict | None, transport_error: str
) -> FilterStep:
    problem = _failure(verdict, transport_error)
    if verdict is None or verdict.outcome != "ok":
        outcome = "skipped" if backend.ignorable else "error"
        return FilterStep(backend.name, outcome, list(sent), error=problem)
    passed = list(verdict.passed or [])
    sent_set, passed_set = set(sent), set(passed)
    return FilterStep(
        backend.name,
        "ok",
        list(sent),
        passed=passed,
        removed=[n for n in sent if n not in passed_set],
        added=[n for n in passed if n not in sent_set],
        failed=dict(verdict.failed or {}),
        unresolvable=dict(verdict.unresolvable or {}),
    )


def parallel_filter(
    input_names: list[str], results: Sequence[tuple[BackendConfig, Verdict | None, str]]
) -> CombinedFilter:
    """The ``parallelFilter: true`` option: every backend was sent the full input at once.

    ``results`` are (backend, verdict judged against the full input, transport error), in
    scheduler order (``interested(...)``). The answer replays the chain over them, walking in
    scheduler order with the list the chain would have had:

    * a backend's passed list is restricted to that list (names it passed that an earlier
      backend removed are dropped); names outside the original input (mode false) are kept,
      and so are such names it never saw;
    * its failure entries for input nodes an earlier backend removed are dropped (listed in
      ``FilterStep.unasked``): the chain would never have asked it about them; entries for
      names outside the original input are applied;
    * once the list is empty the later backends are ``unneeded``: their reasons and errors are
      ignored, since the chain would not have called them; errors before that follow the chain's
      rules (ignorable skipped, non-ignorable fails the attempt).

    Where this still differs from the chain: a backend's answer may depend on the list it is
    sent (it saw nodes here that the chain would have withheld, and a mode-false backend after
    one that added a name never saw that name); errors are those of a call with the full list;
    and every backend was called, so each one's latency and side effects happened. When
    backends are deterministic and decide each node independently of the rest of the list, the
    passed list, the failure maps and the error are those of the chain.
    """
    input_set = set(input_names)
    remaining = list(input_names)
    statuses = _Statuses()
    steps: list[FilterStep] = []
    error = reply = error_backend = ""
    for backend, verdict, transport_error in results:
        if error or not remaining:
            steps.append(FilterStep(backend.name, "unneeded", list(remaining)))
            continue
        full = _filter_step(backend, input_names, verdict, transport_error)
        if full.outcome != "ok":
            full.input = list(remaining)
            steps.append(full)
            if full.outcome == "error":
                error, reply = full.error, reply_error_text(verdict, transport_error)
                error_backend = backend.name
            continue
        now = set(remaining)
        keep = lambda m: {n: r for n, r in m.items() if n in now or n not in input_set}  # noqa: E731
        failed, unres = keep(full.failed or {}), keep(full.unresolvable or {})
        passed = [n for n in full.passed or [] if n in now or n not in input_set]
        unseen = [n for n in remaining if n not in input_set and n not in set(passed)]
        passed += unseen
        judged = set(full.passed or []) | set(full.failed or {}) | set(full.unresolvable or {})
        steps.append(
            FilterStep(
                backend.name, "ok", list(remaining), passed=passed,
                removed=[n for n in remaining if n not in set(passed)],
                added=[n for n in passed if n not in now],
                failed=failed, unresolvable=unres,
                unasked=sorted(n for n in judged if n in input_set and n not in now),
            )
        )
        statuses.write(backend.name, failed, unres)
        remaining = passed
    failed_map, unres_map, by = statuses.maps()
    passed_final = [] if error else remaining
    return CombinedFilter(
        passed=passed_final, failed=failed_map, unresolvable=unres_map, error=error,
        reply_error=reply, error_backend=error_backend,
        added=[n for n in passed_final if n not in input_set], status_by=by, steps=steps,
    )


# ---------------------------------------------------------------------------------- prioritize


def combine_prioritize(
    feasible: list[str], results: Sequence[tuple[BackendConfig, Verdict | None]]
) -> dict[str, int]:
    """Σ Score × weight per feasible host over the backends that answered (§4.4).

    The combined entry is registered with weight 1, so the scheduler's own ×weight×10 turns
    these totals into exactly Σ Score × weight × 10. A backend that failed (any error, ignorable
    or not) gives no scores. Hosts outside ``feasible`` are ignored, a host a backend listed
    twice counts twice (the judge sums them), nothing is clamped, and every feasible host is
    present (0 without scores). ``results``: the interested prioritizers, verdicts judged
    against ``feasible``.
    """
    totals = {name: 0 for name in feasible}
    for backend, verdict in results:
        if verdict is None or verdict.outcome != "ok":
            continue
        for host, score in (verdict.scores or {}).items():
            if host in totals:
                totals[host] += score * backend.weight
    return totals


def prioritize_answer(feasible: list[str], totals: dict[str, int]) -> list[HostPriority]:
    """The combined HostPriorityList: one entry per host (a repeat would count twice)."""
    seen: set[str] = set()
    out: list[HostPriority] = []
    for name in feasible:
        if name not in seen:
            seen.add(name)
            out.append(HostPriority(name, totals.get(name, 0)))
    return out


# ---------------------------------------------------------------------------------- preempt


def judge_preempt_for(
    backend: BackendConfig, input_victims: dict[str, list[str]], status: int, body: bytes
) -> Verdict:
    """judge_preempt plus callExtenders' ignorable rule (§4.6).

    For an ignorable backend, nodes kept with null or empty victims are dropped from its reply
    instead of failing it (other errors still fail it, and the chain then skips it).
    """
    verdict = judge_preempt(
        backend.name, input_victims, status, body, backend.url_prefix,
        verb=backend.preempt_verb or "preempt",
    )
    if not backend.ignorable or verdict.outcome == "ok":
        return verdict
    if not verdict.error.startswith("expected at least one victim pod on node"):
        return verdict  # a UID/node error came first: the whole reply fails
    reply = decode_preemption_result(body).node_to_meta_victims
    kept = {n: mv for n, mv in reply.items() if mv is not None and mv.pods}
    dropped = [n for n in reply if n not in kept]
    findings = verdict.findings + [
        _finding("ignorable-dropped-node", f"ignorable: node {n!r} without victims dropped")
        for n in dropped
    ]
    decisions = [
        _decision(n, backend.name, "passed", "victims: " + ", ".join(kept[n].pods))
        if n in kept
        else _decision(n, backend.name, "failed", "dropped by backend")
        for n in input_victims
    ]
    return Verdict("ok", "", decisions, findings, victims=kept)


@dataclass
class PreemptStep:
    backend: str
    outcome: str  # "ok" | "skipped" | "error"
    input: dict[str, MetaVictims]
    error: str = ""
    output: dict[str, MetaVictims] | None = None


@dataclass
class CombinedPreempt:
    """victims: the final map (empty = no preemption); error: the preemption ends in error."""

    victims: dict[str, MetaVictims]
    error: str = ""
    error_backend: str = ""
    steps: list[PreemptStep] = field(default_factory=list)


class PreemptChain:
    """Sequential preempt over backends, as callExtenders does (§4.6).

    Feed the backends from ``interested(backends, pod, "preempt")``. Each reply REPLACES the
    map; an empty map ends the chain (no preemption); an ignorable backend's failure is skipped
    with the map unchanged; any other failure ends the preemption in error. An empty initial map
    means no call at all.
    """

    def __init__(
        self, victims: dict[str, MetaVictims], backends: Sequence[BackendConfig] = ()
    ) -> None:
        self.given = {n: list(mv.pods) for n, mv in victims.items()}
        self._map = dict(victims)
        self._queue = list(backends)
        self.steps: list[PreemptStep] = []
        self.error = ""
        self.error_backend = ""

    @property
    def remaining(self) -> dict[str, MetaVictims]:
        return dict(self._map)

    @property
    def done(self) -> bool:
        return bool(self.error) or not self._map

    def next_backend(self) -> BackendConfig | None:
        if self.done or not self._queue:
            return None
        return self._queue[0]

    def judge(self, backend: BackendConfig, status: int, body: bytes) -> Verdict:
        """Judged against the map the proxy was given (see the section's notes)."""
        return judge_preempt_for(backend, self.given, status, body)

    def apply(self, backend: BackendConfig, verdict: Verdict | None, transport_error: str = "") -> None:
        if self.done:
            raise ValueError(f"preempt chain is done; {backend.name} must not be called")
        if self._queue and self._queue[0].name == backend.name:
            self._queue.pop(0)
        sent = dict(self._map)
        if verdict is None or verdict.outcome != "ok":
            outcome = "skipped" if backend.ignorable else "error"
            problem = _failure(verdict, transport_error)
            self.steps.append(PreemptStep(backend.name, outcome, sent, error=problem))
            if outcome == "error":
                self.error, self.error_backend = problem, backend.name
            return
        self._map = dict(verdict.victims or {})
        self.steps.append(PreemptStep(backend.name, "ok", sent, output=dict(self._map)))

    def result(self) -> CombinedPreempt:
        victims = {} if self.error else dict(self._map)
        return CombinedPreempt(victims, self.error, self.error_backend, list(self.steps))


# ---------------------------------------------------------------------------------- bind


def choose_binder(backends: Sequence[BackendConfig], pod: dict) -> BackendConfig | None:
    """The first backend (scheduler order) with bindVerb that is interested; None: Bind plugins."""
    found = interested(backends, pod, "bind")
    return found[0] if found else None


def bind_fallthrough(binder: BackendConfig, verdict_or_error: Verdict | str | None) -> str:
    """What the scheduler does after the binder answered (§4.5, extendersBinding).

    ``verdict_or_error``: the judged reply, or the transport error text / None (no answer).
    "bound": 200 with an empty Error. "error": binding fails, the pod is requeued.
    "default-binder": an ignorable binder failed; the scheduler runs its Bind plugins (1.30+).
    """
    if isinstance(verdict_or_error, Verdict) and verdict_or_error.outcome == "ok":
        return "bound"
    return "default-binder" if binder.ignorable else "error"


# ---------------------------------------------------------------------------------- entry


@dataclass
class CombinedRefusal:
    """A backend set that one combined extender entry cannot represent, and why."""

    reason: str
    backends: list[str] = field(default_factory=list)


def _go_duration(seconds: float) -> str:
    ms = -int(-round(seconds * 1000, 6) // 1)  # ceiling, in whole milliseconds
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def combined_timeout(backends: Sequence[BackendConfig], parallel_filter: bool = False) -> float:
    """Seconds the combined entry's httpTimeout must cover: the longest verb, plus a margin.

    filter and preempt run backends one after another (sum; filter: max with parallelFilter),
    prioritize runs them in parallel (max), bind calls the one binder.
    """
    def t(verb: str) -> list[float]:
        return [b.http_timeout for b in backends if b.verb_string(verb)]

    filt = (max(t("filter"), default=0.0) if parallel_filter else sum(t("filter")))
    need = max(filt, sum(t("preempt")), max(t("prioritize"), default=0.0), max(t("bind"), default=0.0))
    return need + COMBINED_TIMEOUT_MARGIN


def combined_entry(
    backends: Sequence[BackendConfig], *, url_prefix: str = "", parallel_filter: bool = False
) -> dict[str, Any] | CombinedRefusal:
    """The single extender entry for ``scheduler_config --combined``, or why there is none.

    | Field            | Derived as                                                        |
    | ---------------- | ----------------------------------------------------------------- |
    | filterVerb etc.  | "filter"/"prioritize"/"preempt"/"bind" when any backend has it    |
    | weight           | 1: the proxy answers Σ Score×weight, the scheduler adds ×1×10     |
    | managedResources | union (with each ignoredByScheduler) when EVERY backend has some; |
    |                  | none otherwise (some backend sees every pod, so the proxy must)   |
    | nodeCacheCapable | true only if every backend is true: with false the proxy gets the |
    |                  | full Nodes (and victim Pods) and can send names to mode-true      |
    |                  | backends; with true it could not give mode-false backends objects |
    | ignorable        | true only if every backend is: the proxy applies the ignorable    |
    |                  | rule per backend, so a mix is representable with false            |
    | httpTimeout      | combined_timeout(): sum of the filter (and preempt) chain's       |
    |                  | timeouts, max for prioritize, plus COMBINED_TIMEOUT_MARGIN         |

    | Backend set                                          | Result                         |
    | ---------------------------------------------------- | ------------------------------ |
    | no backends                                          | refused                        |
    | ignorable binder beside non-ignorable backends       | refused: the entry must be     |
    |                                                      | non-ignorable, so a failed     |
    |                                                      | bind would fail instead of     |
    |                                                      | falling through to the Bind    |
    |                                                      | plugins                        |
    | a backend without managedResources beside a resource | refused: the entry must see    |
    | with ignoredByScheduler: true                        | every pod, and then cannot     |
    |                                                      | carry ignoredByScheduler       |
    | ignorable and non-ignorable filter/preempt backends  | represented (ignorable false)  |
    | mixed nodeCacheCapable                               | represented (false)            |
    | a binder interested in fewer pods than the entry     | represented, see               |
    |                                                      | combined_caveats               |
    """
    if not backends:
        return CombinedRefusal("no backends are configured: there is nothing to combine")
    all_ignorable = all(b.ignorable for b in backends)
    binders = [b for b in backends if b.bind_verb]
    if any(b.ignorable for b in binders) and not all_ignorable:
        return CombinedRefusal(
            f"backend {binders[0].name!r} is an ignorable binder beside non-ignorable backends: "
            "the combined entry must be non-ignorable for them, so a failed bind would fail the "
            "binding where the scheduler would fall through to its Bind plugins; use the "
            "per-backend form",
            [b.name for b in binders],
        )
    everyone = [b.name for b in backends if not b.managed_resources]
    ignored = [r.name for b in backends for r in b.managed_resources if r.ignored_by_scheduler]
    if everyone and ignored:
        return CombinedRefusal(
            f"backend(s) {', '.join(everyone)} have no managedResources (interested in every "
            "pod), so the combined entry cannot list managedResources, and then the "
            f"ignoredByScheduler of {', '.join(ignored)} would be lost (the NodeResourcesFit "
            "filter would check them again); use the per-backend form",
            everyone,
        )
    entry: dict[str, Any] = {}
    if url_prefix:
        entry["urlPrefix"] = url_prefix
    for verb in ("filter", "preempt", "prioritize"):
        if any(b.verb_string(verb) for b in backends):
            entry[f"{verb}Verb"] = COMBINED_VERBS[verb]
    entry["weight"] = 1
    if binders:
        entry["bindVerb"] = COMBINED_VERBS["bind"]
    entry["httpTimeout"] = _go_duration(combined_timeout(backends, parallel_filter))
    entry["nodeCacheCapable"] = all(b.node_cache_capable for b in backends)
    if not everyone:
        union: list[ManagedResource] = [r for b in backends for r in b.managed_resources]
        entry["managedResources"] = [
            {"name": r.name, "ignoredByScheduler": r.ignored_by_scheduler} for r in union
        ]
    entry["ignorable"] = all_ignorable
    return entry


def combined_caveats(backends: Sequence[BackendConfig]) -> list[str]:
    """Representable differences of the combined entry worth printing beside it."""
    notes: list[str] = []
    every_pod = any(not b.managed_resources for b in backends)
    all_ignorable = bool(backends) and all(b.ignorable for b in backends)
    for b in backends:
        if b.bind_verb and b.managed_resources and not all_ignorable:
            narrower = every_pod or any(o is not b and o.managed_resources for o in backends)
            if narrower:
                notes.append(
                    f"binder {b.name!r} is interested in fewer pods than the combined entry: "
                    "for the other pods the scheduler calls the proxy's bind, and the proxy "
                    "binds through the API itself (what DefaultBinder does) instead of the "
                    "scheduler running its Bind plugins"
                )
    if any(not b.node_cache_capable for b in backends) and any(b.node_cache_capable for b in backends):
        notes.append(
            "mixed nodeCacheCapable: the combined entry uses false, so the scheduler sends full "
            "Node objects (and victim Pods) to the proxy for every call"
        )
    if any(b.ignorable for b in backends) and not all_ignorable:
        notes.append(
            "a failure or timeout of the proxy itself fails the attempt (the entry is not "
            "ignorable), even where only ignorable backends were slow"
        )
    return notes
