"""The judge: how kube-scheduler reads ONE backend's reply to one verb.

Given the HTTP status and body the scheduler received (reference: extender-protocol.md §1,
§4.3-4.6, §5), it says whether the call succeeded, the error text the scheduler would report, the
per-node decisions and the findings (protocol breaches worth showing, even when ok). Timeouts and
transport errors are decided by the caller; the judge only sees a status and a body.

May import: the standard library, ``extproxy.protocol`` and ``semantics.decision``. No Django,
no I/O. The judges read the backend's configuration (``extproxy.config.BackendConfig``: its
name, target, mode, weight, verb strings and ignorable flag); a recorded call rebuilds one with
``BackendConfig.as_recorded``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, TypeVar

from extproxy.protocol import (
    MAX_EXTENDER_PRIORITY,
    MIN_EXTENDER_PRIORITY,
    FilterResult,
    MetaVictims,
    ProtocolError,
    Verb,
    decode_binding_result,
    decode_filter_result,
    decode_host_priority_list,
    decode_preemption_result,
    envelope_keys,
    go_key,
)

from .decision import Decision, Outcome, Result
from .nil_victims import nil_victims

if TYPE_CHECKING:  # annotations only: semantics needs no config loading at run time
    from extproxy.config import BackendConfig

T = TypeVar("T")

#: MaxNodeScore / MaxExtenderPriority (integer arithmetic, as in the scheduler).
SCORE_FACTOR = 100 // MAX_EXTENDER_PRIORITY


@dataclass
class Verdict:
    outcome: Outcome  # OK or ERROR (timeouts/transport errors are decided by the caller)
    error: str  # "" when ok; otherwise the text the scheduler would report
    decisions: list[Decision]
    findings: list[dict]  # {"kind","detail"}: protocol breaches worth showing, even when ok
    passed: list[str] | None = None  # filter: names that pass, as the scheduler would take them
    # filter, when the scheduler takes the returned Node objects (mode false, or no NodeNames):
    # each passed node's object as the backend returned it, bytes; None when it keeps its own.
    passed_items: list[bytes] | None = None
    failed: dict[str, str] | None = None  # filter: Unschedulable reasons (after precedence)
    unresolvable: dict[str, str] | None = None  # filter: UnschedulableAndUnresolvable reasons
    scores: dict[str, int] | None = None  # prioritize: raw Score per input host (summed; 0 when unlisted)
    # prioritize: the input hosts the reply listed (any score, 0 included): the scheduler holds a
    # score from this backend for exactly these (prioritize.listed_hosts).
    listed: set[str] | None = None
    victims: dict[str, MetaVictims] | None = None  # preempt: accepted map


_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v",
               '"': '\\"', "\\": "\\\\"}


def go_quote(text: str) -> str:
    """``text`` as Go's %q writes it in the scheduler's messages (strconv.Quote): in double
    quotes, ``"`` and backslash escaped, printable characters as they are, the others as Go
    escapes them. A name a backend returns may hold any of them."""
    out = []
    for ch in text:
        if ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    return '"' + "".join(out) + '"'


def _finding(kind: str, detail: str) -> dict:
    return {"kind": kind, "detail": detail}


def _fail(error: str, findings: list[dict]) -> Verdict:
    return Verdict(outcome=Outcome.ERROR, error=error, decisions=[], findings=findings)


def _read(backend: BackendConfig, verb: Verb, status: int, body: bytes, decode: Callable[[bytes], T]) -> T | Verdict:
    """The decoded reply, or the Verdict of a call that failed before its content counts.

    The non-200 rule (§1): any other status fails the call and the body is not even read. A body
    the scheduler's decoder rejects fails it too.
    """
    if status != 200:
        verb_string = backend.verb_string(verb) or verb
        return _fail(
            f"failed {verb_string} with extender at URL {backend.url_for(verb_string)}, code {status}",
            [_finding("non-200", f"HTTP status {status}; only 200 counts as success")],
        )
    try:
        return decode(body)
    except ProtocolError as exc:
        return _decode_failure(exc)


def _decode_failure(exc: ProtocolError) -> Verdict:
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
    backend: BackendConfig,
    input_names: list[str],
    status: int,
    body: bytes,
    *,
    with_decisions: bool = True,
    keep_objects: bool = False,
    sent_items: list[bytes] | None = None,
) -> Verdict:
    """Read a filter reply as kube-scheduler does (§4.3, §5 items 3-5, 7, 9).

    ``with_decisions=False`` skips the per-node decisions (and the dropped-without-reason
    finding that comes from them): the combined form's hot path needs only the lists and maps.
    ``keep_objects``: keep the returned Node objects' bytes (``passed_items``) for a caller that
    passes them on, as the scheduler does; a reader of verdicts needs only their names.
    ``sent_items``: the Node objects sent for ``input_names`` (same order); a returned object
    with the same bytes is named without being decoded again (the same name, less time).
    The backend's ``target`` (its urlPrefix) names it in the scheduler's messages.
    """
    known = (sent_items, input_names) if sent_items is not None and len(sent_items) == len(input_names) else None

    def decode(reply: bytes) -> FilterResult:  # the returned Nodes are not built, only named
        return decode_filter_result(reply, names_only=True, keep_items=keep_objects, known=known)

    r = _read(backend, Verb.FILTER, status, body, decode)
    if isinstance(r, Verdict):
        return r
    findings: list[dict] = []
    if r.error:
        return _error_under_200(r.error, findings)

    input_set = set(input_names)
    passed: list[str]
    passed_items: list[bytes] | None = None
    if backend.node_cache_capable and r.node_names is not None:
        outside = set(r.node_names) - input_set
        for name in r.node_names if outside else ():  # the first one outside, in reply order
            if name in outside:
                findings.append(
                    _finding("name-not-in-input", f"NodeNames lists {name!r}, not in the input")
                )
                return _fail(
                    f"extender {go_quote(backend.target)} claims a filtered node {go_quote(name)} which is not "
                    "found in the input node list",
                    findings,
                )
        passed = list(r.node_names)
    elif r.node_item_names is not None:
        passed_items = r.node_items
        passed = list(r.node_item_names)
        for name in [n for n in passed if n not in input_set]:
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

    decisions: list[Decision] = []
    dropped: list[str] = []
    for name in input_names if with_decisions else ():
        if name in passed_set:
            decisions.append(Decision(name, backend.name, Result.PASSED))
        elif name in unresolvable:
            decisions.append(Decision(name, backend.name, Result.UNRESOLVABLE, unresolvable[name]))
        elif name in failed:
            decisions.append(Decision(name, backend.name, Result.FAILED, failed[name]))
        else:
            decisions.append(Decision(name, backend.name, Result.FAILED))
            dropped.append(name)
    if dropped:
        findings.append(
            _finding("dropped-without-reason", f"dropped with no reason: {', '.join(dropped)}")
        )
    return Verdict(
        outcome=Outcome.OK,
        error="",
        decisions=decisions,
        findings=findings,
        passed=passed,
        failed=failed,
        unresolvable=unresolvable,
        passed_items=passed_items,
    )


# The reason of a host a prioritizer did not list (Verdict.listed says which it did).
NO_SCORE = "no score returned"


def judge_prioritize(backend: BackendConfig, input_names: list[str], status: int, body: bytes) -> Verdict:
    """Read a prioritize reply as kube-scheduler does (§4.4, §5 item 2).

    On error the scheduler drops this backend's scores (scheduling goes on): outcome ERROR.
    """
    items = _read(backend, Verb.PRIORITIZE, status, body, decode_host_priority_list)
    if isinstance(items, Verdict):
        return items
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
    decisions: list[Decision] = []
    out: dict[str, int] = {}
    for name in input_names:
        if name in out:
            continue
        got = scores.get(name)
        s = got if got is not None else 0
        out[name] = s
        reason = None if got is not None else NO_SCORE
        decisions.append(Decision(name, backend.name, Result.SCORED, reason, s, s * backend.weight * SCORE_FACTOR))
    return Verdict(outcome=Outcome.OK, error="", decisions=decisions, findings=findings, scores=out, listed=set(scores))


def judge_bind(backend: BackendConfig, status: int, body: bytes) -> Verdict:
    """Read a bind reply (§4.5, §5 item 14): 200 with an empty Error counts as bound."""
    r = _read(backend, Verb.BIND, status, body, decode_binding_result)
    if isinstance(r, Verdict):
        return r
    if r.error:
        return _error_under_200(r.error, [])
    return Verdict(outcome=Outcome.OK, error="", decisions=[], findings=[])


def judge_preempt(backend: BackendConfig, input_victims: dict[str, list[str]], status: int, body: bytes) -> Verdict:
    """Read a preempt reply (§4.6, §5 item 6). ``input_victims``: node -> UIDs sent.

    The reply map replaces the input. Every UID must be one given for that node; a node that was
    not in the input is an error; a node with null/empty Pods is an error, except that an
    ignorable backend's such nodes are dropped (callExtenders).
    """
    r = _read(backend, Verb.PREEMPT, status, body, decode_preemption_result)
    if isinstance(r, Verdict):
        return r
    findings: list[dict] = []
    reply = r.node_to_meta_victims
    if not reply:
        keys = envelope_keys(body)
        if go_key(keys, "NodeNameToVictims") and not go_key(keys, "NodeNameToMetaVictims"):
            findings.append(
                _finding(
                    "wrong-preempt-form",
                    "reply holds only NodeNameToVictims, which the scheduler ignores: "
                    "decodes to an empty map (no preemption)",
                )
            )
    nil = nil_victims(reply)
    if nil:
        findings.extend(nil)
        return _fail(f"extproxy: {nil[0]['detail']}", findings)
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
                        f"extender {go_quote(backend.target)} claims to preempt pod (UID: {uid}) on node: {node}, "
                        "but the pod is not found on that node"
                    )
    # Pass 2, like callExtenders: every node kept needs at least one victim; an ignorable
    # backend's node without victims is dropped instead of failing the reply.
    accepted: dict[str, MetaVictims] = {}
    for node, mv in reply.items():
        if mv is not None and mv.pods:
            accepted[node] = mv
            continue
        findings.append(
            _finding("empty-victims", f"node {node!r} kept with {'null' if mv is None else 'no'} victims")
        )
        if backend.ignorable:
            findings.append(_finding("ignorable-dropped-node", f"ignorable: node {node!r} without victims dropped"))
        elif not error:
            error = f'expected at least one victim pod on node "{node}"'
    if error:
        return _fail(error, findings)
    decisions = [
        Decision(node, backend.name, Result.PASSED, victims_reason(accepted[node]))
        if node in accepted
        else Decision(node, backend.name, Result.FAILED, "dropped by backend")
        for node in input_victims
    ]
    return Verdict(outcome=Outcome.OK, error="", decisions=decisions, findings=findings, victims=accepted)


def victims_reason(victims: MetaVictims) -> str:
    """A node's preempt decision: its victims as a set (the scheduler evicts them whatever the
    order), and the PDB violations they cause when any (the scheduler weighs candidate nodes
    by them). Written so that a decision stored before the count was added reads the same
    when it was 0 (replay/diff.py compares these)."""
    reason = "victims: " + ", ".join(sorted(victims.pods))
    if victims.num_pdb_violations:
        reason += f"; PDB violations: {victims.num_pdb_violations}"
    return reason
