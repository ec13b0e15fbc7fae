"""Turning one Trace into the rows that are stored: a Call and its BackendCalls.

Owns reading the request (pod identity, node names), judging the reply the way the scheduler does (extproxy.semantics;
remembered in verdicts.py), redaction (through extproxy.redaction, via blobs.compact_body), the bounds on stored fields,
and the raw record for a call whose record cannot be built (bodies as received, finding `undecodable-request` or
`undecodable-reply` with the reason). Returns unsaved model instances; must not write to the database (writer.py does).
"""
from __future__ import annotations

import logging
from collections import Counter
from datetime import datetime, timezone
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import msgspec

from .. import nodeindex, protocol, semantics
from ..config import BackendConfig, RedactionConfig
from ..protocol import Verb
from ..semantics import Decision, Outcome, Result
from ..redaction import Echoes, bounded_text, collecting, echoes, text_needs_redaction
from .attempts import AttemptTracker
from .blobs import NodeDeduper, compact_body, compress, raw_blob
from .trace import Trace
from .verdicts import VerdictMemo

if TYPE_CHECKING:
    from ..models import BackendCall, Call

log = logging.getLogger(__name__)

# Bounds on what one call stores, so every list and page can render any call.
MAX_FINDINGS = 100  # kept per call; the rest are counted in one `findings-truncated` finding
MAX_FINDING_TEXT = 2048  # characters of a finding's detail
MAX_KIND_TEXT = 64
MAX_REASON_TEXT = 2048  # characters of a node's reason (a backend's FailedNodes text)
MIN_REASON_TEXT = 256  # ... when a call has so many distinct reasons that the next bound cuts them
REASONS_REDACT_MAX = 1 << 20  # characters of a call's distinct reasons redacted (~0.3 s a MiB)
MAX_ERROR_TEXT = 16384  # characters of a call's error text
NON_200_BODY_BYTES = 4096  # of a non-200 reply, kept in the error text

Built = tuple["Call", list["BackendCall"]]
REMEMBER_BYTES = 8192  # a stored blob larger than this is made again for each call
_RESULT = attrgetter("result")
VERDICTS = VerdictMemo()  # filter and prioritize verdicts by what decides them (verdicts.py)


class Undecodable(Exception):
    """The record of a call cannot be built; `kind` says which side could not be read."""

    def __init__(self, kind: str, cause: BaseException) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.kind = kind


def _when(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=timezone.utc)


def bounded_findings(findings: list[dict[str, Any]], rules: RedactionConfig,
                     echo: Echoes | None = None) -> list[dict[str, Any]]:
    """At most MAX_FINDINGS findings, each with bounded text; the rest counted. A detail can
    quote a backend (`error-under-200` quotes its Error), so it is redacted as error texts are
    (`echo`: the values removed from the call's request, removed where the detail repeats them)."""
    kept = [
        {"kind": str(f.get("kind", ""))[:MAX_KIND_TEXT], "detail": _detail(str(f.get("detail", "")), rules, echo)}
        for f in findings[:MAX_FINDINGS]
    ]
    if len(findings) > MAX_FINDINGS:
        kept.append({"kind": "findings-truncated", "detail": f"{len(findings) - MAX_FINDINGS} more findings not kept"})
    return kept


def _detail(text: str, rules: RedactionConfig, echo: Echoes | None = None) -> str:
    if echo is not None and echo.in_text(text[: 2 * MAX_FINDING_TEXT]):
        return echo.bounded(text, rules, MAX_FINDING_TEXT)
    if not text_needs_redaction(text[: 2 * MAX_FINDING_TEXT].encode("utf-8", "surrogatepass"), rules):
        return text[:MAX_FINDING_TEXT]  # most details: one byte test, not five expressions
    return bounded_text(text, rules, MAX_FINDING_TEXT)


def _error_text(text: str, rules: RedactionConfig, echo: Echoes | None) -> str:
    """Redacted (a non-200 body can echo secrets; it is streamed live) and cut to MAX_ERROR_TEXT."""
    return bounded_text(text, rules, MAX_ERROR_TEXT) if echo is None else echo.bounded(text, rules, MAX_ERROR_TEXT)


def read_request(trace: Trace, memory: NodeDeduper | None = None) -> dict[str, Any]:
    """Pod identity and node list of the request; `request_error` when the scheduler's decoder would refuse it;
    `request_findings`, what the record says of the request (that error, a preempt request's null victims).
    `memory`: the writer's (the node names of NodeLists read before, by their bytes; the
    envelope it keeps for storing the body next)."""
    ident: dict[str, Any] = {"namespace": "", "name": "", "uid": "", "nodes": []}
    try:
        if trace.verb in ("filter", "prioritize"):
            # The parts, not split_extender_args: that decodes the whole Pod, which is not read here.
            recent, last = (None, None) if memory is None else (memory.request_lists, memory.envelope)
            parts = protocol.read_extender_args(trace.request_body, keep_items=False, recent=recent, last=last)
            ns, name, uid = parts.pod_identity
            if parts.node_names is not None or parts.nodes is None:  # NodeNames wins, as in split_extender_args
                nodes, names_mode = parts.node_names or [], True
            else:
                nodes, names_mode = parts.nodes.names, False
            ident.update(namespace=ns, name=name, uid=uid, nodes=nodes, names_mode=names_mode)
        elif trace.verb == "bind":
            args = protocol.decode_binding_args(trace.request_body)
            ident.update(namespace=args.pod_namespace, name=args.pod_name, uid=args.pod_uid, nodes=[args.node])
        elif trace.verb == "preempt":
            pargs = protocol.decode_preemption_args(trace.request_body)
            ns, name, uid = protocol.pod_identity(pargs.pod)
            ident.update(namespace=ns, name=name, uid=uid)
            ident["victims"] = _input_victims(pargs)
            ident["request_findings"] = semantics.nil_victims_in_request(pargs)
            ident["nodes"] = list(ident["victims"])
    except protocol.ProtocolError as exc:
        ident.update(request_error=str(exc), request_findings=[{"kind": "bad-request", "detail": str(exc)}])
    return ident


def judge_reply(trace: Trace, ident: dict[str, Any]) -> semantics.Verdict | None:
    """The scheduler's reading of the reply; None when the backend gave no answer."""
    if trace.status is None or trace.truncated:
        return None
    if trace.verdict is not None:
        return trace.verdict
    # The combined entry's mode is whichever the scheduler used for this request.
    cache_capable = ident.get("names_mode", False) if trace.form == "combined" else trace.node_cache_capable
    backend = BackendConfig.as_recorded(
        trace.backend, trace.url, Verb(trace.verb), trace.verb_string, node_cache_capable=cache_capable, weight=trace.weight
    )
    if trace.verb in ("filter", "prioritize"):
        judge_verb = semantics.judge_filter if trace.verb == "filter" else semantics.judge_prioritize
        what = (trace.verb, trace.backend, trace.url, trace.verb_string, cache_capable, trace.weight)
        status: int = trace.status  # not None (above); the lambda would see the attribute's Optional type
        return VERDICTS.judge(what, status, trace.response_body, ident["nodes"],
                              lambda: judge_verb(backend, ident["nodes"], status, trace.response_body))
    if trace.verb == "bind":
        return semantics.judge_bind(backend, trace.status, trace.response_body)
    return semantics.judge_preempt(backend, ident.get("victims", {}), trace.status, trace.response_body)


def judge(trace: Trace) -> tuple[dict[str, Any], semantics.Verdict | None]:
    """Both halves at once (kept for callers that want the reading without rows)."""
    ident = read_request(trace)
    return ident, judge_reply(trace, ident)


def _input_victims(args: protocol.PreemptionArgs) -> dict[str, list[str]]:
    if args.node_to_meta_victims is not None:
        return {node: list(mv.pods) if mv else [] for node, mv in args.node_to_meta_victims.items()}
    result: dict[str, list[str]] = {}
    for node, victims in (args.node_to_victims or {}).items():
        result[node] = [protocol.pod_identity(p)[2] for p in victims.pods] if victims else []
    return result


def _outcome(trace: Trace, verdict: semantics.Verdict | None) -> tuple[Outcome, str, list[dict], list[Decision]]:
    if trace.timed_out:
        return Outcome.TIMEOUT, trace.transport_error, [], []
    if verdict is None:
        if trace.truncated and not trace.transport_error:
            return Outcome.ERROR, "reply too large to judge: only its first part is kept (see findings)", [], []
        return Outcome.ERROR, trace.transport_error or "no answer", [], []
    # The combined entry answers Σ score × weight, out of 0..10 by design: a backend's own is found on its part.
    findings = [f for f in verdict.findings if trace.form != "combined" or f.get("kind") != "score-out-of-range"]
    error = verdict.error
    if trace.status not in (None, 200) and trace.response_body:
        # The scheduler throws a non-200 body away; operators need it.
        body = bytes(trace.response_body[:NON_200_BODY_BYTES]).decode("utf-8", "replace")
        error = f"{error}: {body}" if error else body
    return verdict.outcome, error, findings, verdict.decisions


class _Stage:
    """Which side of the call is being read, so a failure names it."""

    def __init__(self) -> None:
        self.kind = "undecodable-request"


def build_call(trace: Trace, rules: RedactionConfig, attempts: AttemptTracker, nodes: NodeDeduper) -> Built:
    """An unsaved Call (and its BackendCalls) for one trace; raises Undecodable.

    A combined call's decisions are its own (backend "combined") followed by each backend's,
    so one call shows every backend's verdict on every node.
    """
    from ..models import BackendCall, Call

    stage = _Stage()
    try:
        # The requests first (each part's too): what redacting them removed is removed wherever the call repeats it.
        ident = read_request(trace, nodes)
        requests = []
        with collecting() as removed:
            request_blob = _stored(trace.request_body, rules, nodes)
            for child in trace.backend_calls:
                c_ident = read_request(child, nodes)
                requests.append((child, c_ident, _stored(child.request_body, rules, nodes)))
        echo = echoes(removed)
        # Its texts come from its replies and errors: when none repeats a value, what is remembered holds.
        if echo is not None and (echo.in_call(trace) or echo.in_text(ident.get("request_error", ""))):
            echo = echo.apart_from(_shown_names(ident, requests))
        else:
            echo = None
        stage.kind = "undecodable-reply"
        verdict = judge_reply(trace, ident)
        outcome, error, findings, decisions = _outcome(trace, verdict)
        extras = VERDICTS.extras(verdict)  # same verdict: same reply bytes, node names, backend
        if echo is not None and echo.in_bytes(trace.response_body):  # not remembered: the request's own
            response_blob = _stored(trace.response_body, rules, nodes, echo)
        else:
            response_blob = _remembered(extras, ("reply", rules), nodes, lambda: _stored(trace.response_body, rules, nodes))
        children = []
        own = decisions  # the answer's: what the call's counts say (its parts' are their own)
        for child, c_ident, c_request in requests:
            kid, c_decisions = _backend_call(child, c_ident, c_request, rules, nodes, stage, echo)
            decisions = decisions + c_decisions
            children.append(kid)
        if verdict is None or decisions is not verdict.decisions:
            extras = None  # the call's decisions are not (only) the verdict's
        if echo is not None and echo.in_reasons(decisions):
            decisions_blob = compress(msgspec.json.encode(stored_decisions(decisions, rules, echo)))
        else:
            decisions_blob = _remembered(extras, ("decisions", rules), nodes,
                                         lambda: compress(msgspec.json.encode(stored_decisions(decisions, rules))))
        node_pairs = _remembered(extras, "pairs", nodes, lambda: nodeindex.pairs_and_digest(decisions, ident["nodes"]))
    except Exception as exc:  # anything unreadable: the caller stores the raw record
        raise Undecodable(stage.kind, exc) from exc
    findings += ident.get("request_findings", ())
    counts = _remembered(extras, "counts", nodes, lambda: Counter(map(_RESULT, own)))
    call = _new(
        Call,
        call_id=trace.call_id,
        verb=trace.verb,
        backend=trace.backend,
        form=trace.form,
        pod_namespace=ident["namespace"][:253],
        pod_name=ident["name"][:253],
        pod_uid=ident["uid"][:64],
        attempt=attempts.link(ident["uid"], trace.verb, trace.backend, len(ident["nodes"]), trace.started_at),
        started_at=_when(trace.started_at),
        finished_at=_when(trace.finished_at),
        outcome=outcome,
        http_status=trace.status,
        error=_error_text(error, rules, echo),
        node_count=len(ident["nodes"]),
        passed_count=counts[Result.PASSED],
        failed_count=counts[Result.FAILED],
        unresolvable_count=counts[Result.UNRESOLVABLE],
        findings=bounded_findings(findings + list(trace.findings), rules, echo),
        request_body=request_blob,
        response_body=response_blob,
        response_status=trace.answered_status,
        decisions_blob=decisions_blob,
    )
    call._node_pairs = node_pairs  # for nodeindex, written with the call
    return call, children


_FIELDS: dict[type, list[tuple[str, Any]]] = {}


def _new(model: type, **values: Any) -> Any:
    """model(**values), built by position: Django's keyword path took twice as long, and the
    recorder builds a row per call. Fields not given get their defaults, as with keywords."""
    fields = _FIELDS.get(model)
    if fields is None:
        fields = _FIELDS[model] = [(f.attname, f) for f in model._meta.concrete_fields]  # type: ignore[attr-defined]
    args = [values.pop(name) if name in values else field.get_default() for name, field in fields]
    if values:
        raise TypeError(f"{model.__name__} has no field {', '.join(values)}")
    return model(*args)


def _shown_names(ident: dict[str, Any], requests: list[tuple[Trace, dict[str, Any], bytes]]) -> list[str]:
    """The names a call's record keeps in the clear: its Pod's and its nodes' (each part's)."""
    idents = [ident] + [c_ident for _, c_ident, _ in requests]
    return [name for each in idents for name in (each["namespace"], each["name"], each["uid"], *each["nodes"])]


def stored_decisions(decisions: list[Decision], rules: RedactionConfig, echo: Echoes | None = None) -> list[Decision]:
    """The decisions as they are stored: a reason is a backend's free text (FailedNodes), so it
    is redacted as error texts are (it can echo what the Pod holds: `echo`, the values removed
    from the call's request) and cut to MAX_REASON_TEXT. The same list when no reason needs
    either (the usual case: one byte test over the distinct reasons)."""
    reasons = {d.reason for d in decisions if d.reason}
    if not reasons or (max(map(len, reasons)) <= MAX_REASON_TEXT
                       and not text_needs_redaction("\n".join(reasons).encode("utf-8", "surrogatepass"), rules)
                       and not (echo is not None and echo.in_text("\n".join(reasons)))):
        return decisions
    # Each distinct reason is redacted (twice its kept length, bounded_text): of many long ones,
    # each is cut shorter, so that a call's redaction stays within REASONS_REDACT_MAX characters
    # (or 512 a reason, with more than 2,048 distinct reasons).
    limit = min(MAX_REASON_TEXT, max(MIN_REASON_TEXT, REASONS_REDACT_MAX // (2 * len(reasons))))
    kept = {reason: bounded_text(reason, rules, limit) if echo is None else echo.bounded(reason, rules, limit)
            for reason in reasons}
    return [d if not d.reason or kept[d.reason] == d.reason else msgspec.structs.replace(d, reason=kept[d.reason])
            for d in decisions]


def _stored(body: bytes, rules: RedactionConfig, nodes: NodeDeduper, echo: Echoes | None = None) -> bytes:
    """The stored form of a body; remembered by `nodes` when it redacts by the same rules (and
    has no request's values to remove: `echo`, a reply's)."""
    if rules is nodes.rules and echo is None:
        return nodes.stored_body(body)
    return compress(compact_body(body, rules, nodes, echo))


def _remembered(extras: dict | None, key: Any, nodes: NodeDeduper, make: Any) -> Any:
    """make(), kept in a held verdict's extras when it is small and refers to no Node object
    (those must be marked used by every call that refers to them)."""
    if extras is not None and key in extras:
        return extras[key]
    refs = nodes.refs
    value = make()
    if extras is not None and nodes.refs == refs and (not isinstance(value, bytes) or len(value) <= REMEMBER_BYTES):
        extras[key] = value
    return value


def _backend_call(child: Trace, ident: dict[str, Any], request_blob: bytes, rules: RedactionConfig, nodes: NodeDeduper,
                  stage: _Stage, echo: Echoes | None) -> tuple["BackendCall", list[Decision]]:
    """One part of a combined call, its request already read and stored (build_call)."""
    from ..models import BackendCall

    stage.kind = "undecodable-reply"
    c_outcome, c_error, c_findings, c_decisions = _outcome(child, judge_reply(child, ident))
    echoed = echo is not None and echo.in_bytes(child.response_body)
    kid = _new(
        BackendCall,
        backend=child.backend,
        verb=child.verb,
        started_at=_when(child.started_at),
        finished_at=_when(child.finished_at),
        outcome=c_outcome,
        http_status=child.status,
        error=_error_text(c_error, rules, echo),
        findings=bounded_findings(c_findings + list(child.findings), rules, echo),
        request_body=request_blob,
        response_body=_stored(child.response_body, rules, nodes, echo if echoed else None),
        decisions_blob=compress(msgspec.json.encode(stored_decisions(c_decisions, rules, echo))),
    )
    return kid, c_decisions


def raw_call(trace: Trace, kind: str, why: str, rules: RedactionConfig) -> Built:
    """The record of a call that could not be decoded: bodies as received (but for what looks
    like a secret: blobs.raw_blob), the reason kept.

    Outcome `error`, pod fields empty, no decisions (COMMON.md, "raw record"). Only plain
    field copies, pattern redaction and compression: this must not fail where build_call did.
    """
    from ..models import BackendCall, Call

    with collecting() as removed:  # by pattern: what it removed is removed where the call repeats it
        request_blob = raw_blob(bytes(trace.request_body), rules)
        requests = [raw_blob(bytes(c.request_body), rules) for c in trace.backend_calls]
    echo = echoes(removed)
    call = Call(
        call_id=trace.call_id,
        verb=str(trace.verb)[:16],
        backend=str(trace.backend)[:63],
        form=str(trace.form)[:16],
        started_at=_when(trace.started_at),
        finished_at=_when(trace.finished_at),
        outcome="timeout" if trace.timed_out else "error",
        http_status=trace.status,
        error=_error_text(trace.transport_error or f"record not decodable: {why}", rules, echo),
        findings=bounded_findings([{"kind": kind, "detail": why}] + list(trace.findings), rules, echo),
        request_body=request_blob,
        response_body=raw_blob(bytes(trace.response_body), rules, echo),
        response_status=trace.answered_status,
        decisions_blob=compress(b"[]"),
    )
    children = [
        BackendCall(
            backend=str(c.backend)[:63],
            verb=str(c.verb)[:16],
            started_at=_when(c.started_at),
            finished_at=_when(c.finished_at),
            outcome="timeout" if c.timed_out else "error",
            http_status=c.status,
            error=_error_text(c.transport_error or "part of a call whose record could not be decoded", rules, echo),
            findings=bounded_findings(list(c.findings), rules, echo),
            request_body=c_request,
            response_body=raw_blob(bytes(c.response_body), rules, echo),
            decisions_blob=compress(b"[]"),
        )
        for c, c_request in zip(trace.backend_calls, requests)
    ]
    return call, children


def build_or_raw(trace: Trace, rules: RedactionConfig, attempts: AttemptTracker, nodes: NodeDeduper) -> tuple[Built, bool]:
    """The call's rows, and whether they are a raw record."""
    try:
        return build_call(trace, rules, attempts, nodes), False
    except Undecodable as exc:
        log.warning("recorder: %s %s call %s stored raw (%s): %s", trace.backend, trace.verb, trace.call_id, exc.kind, exc)
        return raw_call(trace, exc.kind, str(exc)[:MAX_FINDING_TEXT], rules), True
