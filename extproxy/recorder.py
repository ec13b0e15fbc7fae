"""Trace -> durable storage, off the hot path; publishes live events after each commit.

The hot path only builds a `Trace` (bytes and timestamps, nothing decoded) and calls
`Recorder.submit`, a non-blocking put into a bounded queue. One writer thread drains the queue
in batches and does everything else: decoding, judging the reply the way the scheduler would
(semantics.judge_*), redaction, node de-duplication, compression, one transaction per batch,
then publishing summaries to the channel layer.

Bounds: the queue holds at most `queue_size` traces and `queue_bytes` body bytes. At either
bound the new trace is dropped, counted in `extproxy_recorder_dropped_total` and logged (at
most once a second); the scheduler's answer is never delayed. When the database fails, the
batch is kept and retried with backoff while new traces keep queueing up to the bound.
This module is the only writer of call records.
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import queue
import sys
import threading
import time
import uuid
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Collection

import msgspec

from . import bodyformat, metrics, protocol, semantics
from .config import BackendConfig, RecordingConfig, RedactionConfig, RetentionConfig
from .protocol import Verb
from .semantics import Decision, Outcome
from .redaction import needs_redaction, redact_object, redact_text

log = logging.getLogger(__name__)

LIVE_GROUP = "calls"
TOUCH_EVERY = 600.0  # seconds between last_seen refreshes of a node in use
PRUNE_EVERY = 60.0  # seconds between retention passes of the writer


@dataclass(slots=True)
class Trace:
    """What happened on one call, as raw as the hot path had it."""

    verb: str
    backend: str
    url: str  # the backend's urlPrefix (the scheduler's name for an extender)
    started_at: float
    finished_at: float
    request_body: bytes
    status: int | None  # the backend's HTTP status; None when it gave no answer
    response_body: bytes  # the backend's body
    answered_status: int  # what extproxy sent the scheduler
    answered_body: bytes | None = None  # only when extproxy answered other bytes than the backend's
    transport_error: str = ""
    timed_out: bool = False
    node_cache_capable: bool = False
    weight: int = 0
    form: str = "per-backend"
    verb_string: str = ""  # the verb as configured (may differ from `verb`, e.g. predicates/gpu)
    verdict: Any = None  # semantics.Verdict when the hot path already judged the reply (combined)
    backend_calls: list["Trace"] = field(default_factory=list)
    # Findings the hot path already knows ({"kind", "detail"}), e.g. reply-truncated: then
    # response_body is only the reply's first EXTPROXY_MAX_REPLY_BYTES and cannot be judged.
    findings: list[dict[str, Any]] = field(default_factory=list)

    @property
    def truncated(self) -> bool:
        return any(f.get("kind") == "reply-truncated" for f in self.findings)

    def size(self) -> int:
        return len(self.request_body) + len(self.response_body)


# --- compact storage -------------------------------------------------------------------

_RAW_MARK = b"R"  # body stored as received (not a JSON object, or undecodable)
_COMPACT_MARK = b"C"  # JSON object with Node items replaced by {"$node": sha256}


def compress(data: bytes) -> bytes:
    # Level 1: most of the ratio on repetitive JSON at a fraction of the CPU of higher levels.
    return zlib.compress(data, 1)


def decompress(data: bytes) -> bytes:
    return zlib.decompress(data) if data else b""


class _NodeListRaw(msgspec.Struct):
    items: list[msgspec.Raw] = []
    metadata: msgspec.Raw = msgspec.Raw(b"{}")


# What decoding bytes that are not readable JSON raises (beyond the protocol's own errors).
UNDECODABLE = (msgspec.DecodeError, RecursionError, UnicodeDecodeError)


class _Name(msgspec.Struct, frozen=True):
    name: str = ""


class _NamedObject(msgspec.Struct):
    metadata: _Name = _Name()


class NodeDeduper:
    """Collects the distinct Node objects of a batch, keyed by the SHA-256 of canonical JSON.

    Canonical (sorted keys, compact) so that the same Node sent with other spacing or key
    order is stored once. Canonicalising costs a decode and an encode, so the hash of the raw
    bytes is mapped to the canonical hash in a bounded cache: a Node that arrives byte for
    byte as before (the common case) costs one SHA-256 of its bytes.
    """

    def __init__(self, rules: RedactionConfig, cache_size: int = 100_000) -> None:
        self.rules = rules
        self.batch: dict[str, tuple[str, bytes]] = {}  # canonical sha -> (name, json)
        self.used: set[str] = set()  # every canonical sha the batch referred to
        self._canonical: OrderedDict[bytes, tuple[str, str]] = OrderedDict()  # raw digest -> (sha, name)
        self._cache_size = cache_size

    def add(self, raw: bytes) -> str:
        digest = hashlib.sha256(raw).digest()
        known = self._canonical.get(digest)
        if known is not None:
            self._canonical.move_to_end(digest)
            self.used.add(known[0])
            return known[0]
        node = msgspec.json.decode(raw)
        if needs_redaction(raw, self.rules):
            redact_object(node, self.rules)
        data = msgspec.json.encode(node, order="sorted")
        sha = hashlib.sha256(data).hexdigest()
        name = ((node.get("metadata") or {}).get("name") or "") if isinstance(node, dict) else ""
        self.batch.setdefault(sha, (str(name)[:253], data))
        self.used.add(sha)
        self._canonical[digest] = (sha, name)
        while len(self._canonical) > self._cache_size:
            self._canonical.popitem(last=False)
        return sha

    def add_exact(self, raw: bytes) -> tuple[str, list[str]]:
        """Keep a Node object as received (keyed by the SHA-256 of its bytes), so its body can
        be restored byte for byte; one that needs redaction is kept redacted, and the changes
        are returned as marks."""
        if needs_redaction(raw, self.rules):
            node = msgspec.json.decode(raw)
            kept = redact_object(msgspec.json.decode(raw), self.rules)
            marks = bodyformat.redaction_marks(node, kept)
            if marks:
                return self.add(raw), marks
        digest = hashlib.sha256(raw).digest()
        known = self._canonical.get(digest)
        if known is not None and known[0] == digest.hex():
            self._canonical.move_to_end(digest)
            self.used.add(known[0])
            return known[0], []
        sha = digest.hex()
        try:
            name = msgspec.json.decode(raw, type=_NamedObject).metadata.name
        except msgspec.DecodeError:  # not shaped like a Node: kept all the same, without a name
            name = ""
        self.batch.setdefault(sha, (name[:253], raw))
        self.used.add(sha)
        self._canonical[digest] = (sha, name)
        while len(self._canonical) > self._cache_size:
            self._canonical.popitem(last=False)
        return sha, []

    def take_batch(self) -> tuple[dict[str, tuple[str, bytes]], set[str]]:
        """The new nodes and every node referred to since the last call."""
        batch, used, self.batch, self.used = self.batch, self.used, {}, set()
        return batch, used


def compact_body(body: bytes, rules: RedactionConfig, nodes: NodeDeduper) -> bytes:
    """Redact, move Node objects into `nodes`, and return the form that is stored.

    The spliced form (bodyformat) first: it restores the body byte for byte. The older
    canonical form below only for bodies it cannot splice exactly.
    """
    redact = bodyformat.redactor(lambda obj: redact_object(obj, rules), lambda raw: needs_redaction(raw, rules))
    try:
        spliced = bodyformat.compact(body, redact, nodes.add_exact)
    except UNDECODABLE:  # the older form below decides what to keep
        spliced = None
    if spliced is not None:
        return spliced
    try:
        return _compact_body(body, rules, nodes)
    except UNDECODABLE:  # invalid UTF-8 or nesting too deep somewhere inside: kept as received
        return _RAW_MARK + body


def _compact_body(body: bytes, rules: RedactionConfig, nodes: NodeDeduper) -> bytes:
    try:
        envelope = msgspec.json.decode(body, type=dict[str, msgspec.Raw])
    except msgspec.DecodeError:
        return _RAW_MARK + body
    out: dict[str, Any] = dict(envelope)
    pod_key = protocol.go_key(envelope, "Pod")
    if pod_key is not None:
        out[pod_key] = redact_object(msgspec.json.decode(envelope[pod_key]), rules)
    nodes_key = protocol.go_key(envelope, "Nodes")
    if nodes_key is not None and bytes(envelope[nodes_key]).strip() != b"null":
        try:
            node_list = msgspec.json.decode(envelope[nodes_key], type=_NodeListRaw)
            out[nodes_key] = {
                "metadata": node_list.metadata,
                "items": [{"$node": nodes.add(bytes(item))} for item in node_list.items],
            }
        except msgspec.DecodeError:
            pass  # not a NodeList: keep the value as received
    victims_key = protocol.go_key(envelope, "NodeNameToVictims")
    if victims_key is not None:
        victims = msgspec.json.decode(envelope[victims_key])
        if isinstance(victims, dict):
            for entry in victims.values():
                for pod in (entry or {}).get("Pods") or (entry or {}).get("pods") or ():
                    redact_object(pod, rules)
        out[victims_key] = victims
    return _COMPACT_MARK + msgspec.json.encode(out)


def restore(stored: bytes, load_nodes: Callable[[list[str]], dict[str, bytes]]) -> bodyformat.Restored:
    """A stored body as received (redactions and lost nodes marked), whatever its stored form."""
    data = decompress(stored)
    if data.startswith(bodyformat.SPLICED_MARK):
        return bodyformat.restore(data[1:], load_nodes)
    if data.startswith(_COMPACT_MARK):
        marks = ["stored in the canonical form: keys re-ordered and re-encoded"]
        return bodyformat.Restored(restore_body(stored, load_nodes), exact=False, marks=marks)
    return bodyformat.Restored(data[1:], exact=True)


def restore_body(stored: bytes, load_nodes: Callable[[list[str]], dict[str, bytes]]) -> bytes:
    """The stored body as JSON bytes again, Node references replaced by the objects."""
    data = decompress(stored)
    if data.startswith(bodyformat.SPLICED_MARK):
        return bodyformat.restore(data[1:], load_nodes).body
    if not data.startswith(_COMPACT_MARK):
        return data[1:]
    envelope = msgspec.json.decode(data[1:])
    refs: list[str] = []
    for value in envelope.values():
        if isinstance(value, dict) and isinstance(value.get("items"), list):
            refs += [i["$node"] for i in value["items"] if isinstance(i, dict) and "$node" in i]
    if refs:
        objects = load_nodes(refs)
        for value in envelope.values():
            if isinstance(value, dict) and isinstance(value.get("items"), list):
                value["items"] = [
                    msgspec.json.decode(objects[i["$node"]]) if isinstance(i, dict) and "$node" in i else i
                    for i in value["items"]
                ]
    return msgspec.json.encode(envelope)


# --- linking calls into scheduling attempts -------------------------------------------


class AttemptTracker:
    """Groups one pod's calls into scheduling attempts (filter ... prioritize ... bind).

    A filter starts a new attempt when the current one already has a filter from the same
    backend (unless that one was the one-node nominated-node filter), after a bind, or after
    `window` seconds of silence. Other verbs join the current attempt. Bounded: the least
    recently seen pods are forgotten first. Only the writer thread uses it.
    """

    def __init__(self, max_pods: int = 50_000, window: float = 60.0) -> None:
        self._pods: OrderedDict[str, dict[str, Any]] = OrderedDict()
        # Ids unique across processes and restarts: a random prefix per tracker, then a counter.
        self._prefix = uuid.uuid4().hex[:12]
        self._count = 0
        self._max_pods = max_pods
        self._window = window

    def link(self, pod_uid: str, verb: str, backend: str, node_count: int, at: float) -> str:
        if not pod_uid:
            return ""
        state = self._pods.get(pod_uid)
        if state is None or self._starts_new(state, verb, backend, at):
            self._count += 1
            state = {"id": f"{self._prefix}-{self._count:x}", "filters": {}, "bound": False}
        state["last"] = at
        if verb == "filter":
            state["filters"][backend] = node_count
        if verb == "bind":
            state["bound"] = True
        self._pods[pod_uid] = state
        self._pods.move_to_end(pod_uid)
        while len(self._pods) > self._max_pods:
            self._pods.popitem(last=False)
        return state["id"]

    def _starts_new(self, state: dict[str, Any], verb: str, backend: str, at: float) -> bool:
        if at - state["last"] > self._window or state["bound"]:
            return True
        if verb != "filter" or backend not in state["filters"]:
            return False
        return state["filters"][backend] != 1  # the nominated-node pass is followed by a full one


# --- turning a trace into rows ---------------------------------------------------------


def _when(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=timezone.utc)


def judge(trace: Trace) -> tuple[dict[str, Any], semantics.Verdict | None]:
    """Pod identity and node list of the request, and the scheduler's reading of the reply."""
    ident: dict[str, Any] = {"namespace": "", "name": "", "uid": "", "nodes": []}
    victims: dict[str, list[str]] = {}
    try:
        if trace.verb in ("filter", "prioritize"):
            split = protocol.split_extender_args(trace.request_body, keep_items=False)
            ns, name, uid = split.pod_identity
            ident.update(namespace=ns, name=name, uid=uid, nodes=split.node_names, names_mode=split.names_mode)
        elif trace.verb == "bind":
            args = protocol.decode_binding_args(trace.request_body)
            ident.update(namespace=args.pod_namespace, name=args.pod_name, uid=args.pod_uid, nodes=[args.node])
        elif trace.verb == "preempt":
            pargs = protocol.decode_preemption_args(trace.request_body)
            ns, name, uid = protocol.pod_identity(pargs.pod)
            ident.update(namespace=ns, name=name, uid=uid)
            victims = _input_victims(pargs)
            ident["nodes"] = list(victims)
    except protocol.ProtocolError as exc:
        ident["request_error"] = str(exc)
    except UNDECODABLE as exc:  # not JSON the decoder can read at all: keep the call, say why
        ident["undecodable"] = f"{type(exc).__name__}: {exc}"
    if trace.status is None or trace.truncated:
        return ident, None
    if trace.verdict is not None:
        return ident, trace.verdict
    # The combined entry's mode is whichever the scheduler used for this request.
    cache_capable = ident.get("names_mode", False) if trace.form == "combined" else trace.node_cache_capable
    backend = BackendConfig.as_recorded(
        trace.backend, trace.url, Verb(trace.verb), trace.verb_string, node_cache_capable=cache_capable, weight=trace.weight
    )
    if trace.verb == "filter":
        verdict = semantics.judge_filter(backend, ident["nodes"], trace.status, trace.response_body)
    elif trace.verb == "prioritize":
        verdict = semantics.judge_prioritize(backend, ident["nodes"], trace.status, trace.response_body)
    elif trace.verb == "bind":
        verdict = semantics.judge_bind(backend, trace.status, trace.response_body)
    else:
        verdict = semantics.judge_preempt(backend, victims, trace.status, trace.response_body)
    return ident, verdict


def _input_victims(args: protocol.PreemptionArgs) -> dict[str, list[str]]:
    if args.node_to_meta_victims is not None:
        return {node: list(mv.pods) if mv else [] for node, mv in args.node_to_meta_victims.items()}
    result: dict[str, list[str]] = {}
    for node, victims in (args.node_to_victims or {}).items():
        result[node] = [protocol.pod_identity(p)[2] for p in victims.pods] if victims else []
    return result


def build_call(trace: Trace, rules: RedactionConfig, attempts: AttemptTracker, nodes: NodeDeduper):
    """An unsaved Call (and its BackendCalls) for one trace.

    A combined call's decisions are its own (backend "combined") followed by each backend's,
    so one call shows every backend's verdict on every node.
    """
    from .models import BackendCall, Call  # the writer runs with Django set up

    ident, verdict = judge(trace)
    outcome, error, findings, decisions = _outcome(trace, verdict)
    findings += trace.findings
    if "request_error" in ident:
        findings.append({"kind": "bad-request", "detail": ident["request_error"]})
    if "undecodable" in ident:
        findings.append({"kind": "undecodable-request", "detail": ident["undecodable"]})
    counts = {r: sum(1 for d in decisions if d.result == r) for r in ("passed", "failed", "unresolvable")}
    children = []
    for child in trace.backend_calls:
        _, child_verdict = judge(child)
        c_outcome, c_error, c_findings, c_decisions = _outcome(child, child_verdict)
        c_findings += child.findings
        decisions = decisions + c_decisions
        children.append(
            BackendCall(
                backend=child.backend,
                verb=child.verb,
                started_at=_when(child.started_at),
                finished_at=_when(child.finished_at),
                outcome=c_outcome,
                http_status=child.status,
                error=redact_text(c_error, rules),
                findings=c_findings,
                request_body=compress(compact_body(child.request_body, rules, nodes)),
                response_body=compress(compact_body(child.response_body, rules, nodes)),
                decisions_blob=compress(msgspec.json.encode(c_decisions)),
            )
        )
    call = Call(
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
        error=redact_text(error, rules),  # a backend's non-200 body can echo secrets; it is streamed live
        node_count=len(ident["nodes"]),
        passed_count=counts["passed"],
        failed_count=counts["failed"],
        unresolvable_count=counts["unresolvable"],
        findings=findings,
        request_body=compress(compact_body(trace.request_body, rules, nodes)),
        response_body=compress(compact_body(trace.response_body, rules, nodes)),
        response_status=trace.answered_status,
        decisions_blob=compress(msgspec.json.encode(decisions)),
    )
    call._node_index = (decisions, ident["nodes"])  # for nodeindex, written with the call
    return call, children


def _outcome(trace: Trace, verdict: semantics.Verdict | None) -> tuple[Outcome, str, list[dict], list[Decision]]:
    if trace.timed_out:
        return Outcome.TIMEOUT, trace.transport_error, [], []
    if verdict is None:
        if trace.truncated and not trace.transport_error:
            return Outcome.ERROR, "reply too large to judge: only its first part is kept (see findings)", [], []
        return Outcome.ERROR, trace.transport_error or "no answer", [], []
    findings = list(verdict.findings)
    error = verdict.error
    if trace.status not in (None, 200) and trace.response_body:
        # The scheduler throws a non-200 body away; operators need it.
        body = trace.response_body[:4096].decode("utf-8", "replace")
        error = f"{error}: {body}" if error else body
    return verdict.outcome, error, findings, verdict.decisions


# --- the writer ------------------------------------------------------------------------


Publisher = Callable[[list[dict[str, Any]]], None]


class Recorder:
    """A bounded queue and the one writer thread that empties it."""

    def __init__(
        self,
        recording: RecordingConfig,
        redaction: RedactionConfig,
        queue_bytes: int = 512 * 1024 * 1024,
        publisher: Publisher | None = None,
        retention: RetentionConfig | None = None,
    ) -> None:
        self.recording = recording
        self.redaction = redaction
        self.queue_bytes = queue_bytes
        self._queue: queue.Queue[Trace] = queue.Queue(maxsize=max(1, recording.queue_size))
        self._bytes = 0
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pending = 0  # submitted and not yet written (or dropped by a failing write)
        self._last_drop_log = 0.0
        self.dropped = 0
        self.written = 0
        self._attempts = AttemptTracker()
        self._nodes = NodeDeduper(redaction)
        self._touched: OrderedDict[str, float] = OrderedDict()
        self.retention = retention
        self._next_prune = 0.0
        self.publisher = publisher
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        metrics.RECORDER_QUEUE_DEPTH.set_function(self._queue.qsize)
        metrics.RECORDER_QUEUE_BYTES.set_function(lambda: self._bytes)

    # hot path ------------------------------------------------------------------------
    def submit(self, trace: Trace) -> bool:
        """Queue a trace without blocking; False (and counted) when a bound is reached."""
        if not self.recording.enabled:
            return False
        size = trace.size()
        with self._lock:
            if self._bytes + size > self.queue_bytes:
                return self._drop("bytes")
            try:
                self._queue.put_nowait(trace)
            except queue.Full:
                return self._drop("count")
            self._bytes += size
            self._pending += 1
        if self._thread is None:
            self.start()
        return True

    def _drop(self, bound: str) -> bool:  # called with the lock held
        self.dropped += 1
        metrics.RECORDER_DROPPED.inc()
        now = time.monotonic()
        if now - self._last_drop_log > 1.0:
            self._last_drop_log = now
            log.warning("recorder queue full (%s bound): call not recorded; %d dropped so far", bound, self.dropped)
        return False

    # writer ----------------------------------------------------------------------------
    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            # The writer shares the GIL with the event loop. CPython lets a thread that wants
            # the GIL wait a whole switch interval (5 ms) before the holder must drop it, which
            # lands on the scheduler's latency; a shorter interval hands it back sooner.
            interval = float(os.environ.get("EXTPROXY_SWITCH_INTERVAL", "0.0005"))
            sys.setswitchinterval(interval)
            self._thread = threading.Thread(target=self._run, name="extproxy-recorder", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self.flush(timeout)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every submitted trace is written. True when that happened in time."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def _run(self) -> None:
        from django.db import close_old_connections

        while not self._stop.is_set():
            self._maybe_prune()
            batch = self._take_batch()
            if not batch:
                continue
            built, new_nodes, used = self.build_batch(batch)
            delay = 0.1
            while True:
                try:
                    summaries = self.store_batch(built, new_nodes, used)
                    break
                except Exception:  # the database is down or refused the batch: keep it, retry
                    metrics.RECORDER_WRITE_ERRORS.inc()
                    log.exception("recorder: writing %d calls failed; retrying in %.1fs", len(batch), delay)
                    close_old_connections()
                    if self._stop.wait(delay):
                        return
                    delay = min(delay * 2, 5.0)
            self._finish(batch)
            self._publish(summaries)

    def _maybe_prune(self) -> None:
        if self.retention is None or time.monotonic() < self._next_prune:
            return
        self._next_prune = time.monotonic() + PRUNE_EVERY
        from .retention import prune

        try:
            prune(self.retention)
        except Exception:  # retention is retried on the next pass; recording goes on
            log.exception("recorder: retention pass failed")

    def _take_batch(self) -> list[Trace]:
        """Wait for one trace, let a batch gather for flush_interval, then drain without waiting.

        Waiting once per batch instead of once per item matters: a writer blocked in get() is
        woken (and takes the GIL from the event loop) by every single submit.
        """
        try:
            first = self._queue.get(timeout=0.5)
        except queue.Empty:
            return []
        batch = [first]
        if self._queue.qsize() < self.recording.batch_size - 1:
            self._stop.wait(self.recording.flush_interval)
        while len(batch) < self.recording.batch_size:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return batch

    def _finish(self, batch: list[Trace]) -> None:
        with self._idle:
            self._bytes -= sum(t.size() for t in batch)
            self._pending -= len(batch)
            self.written += len(batch)
            self._idle.notify_all()

    def write_batch(self, batch: list[Trace]) -> list[dict[str, Any]]:
        """Build and store a batch (tests and tools call this directly)."""
        return self.store_batch(*self.build_batch(batch))

    def build_batch(self, batch: list[Trace]) -> tuple[list, list, set[str]]:
        """The unsaved rows of a batch: (call, children) pairs, new Node objects, nodes used."""
        from .models import NodeObject

        built = []
        for trace in batch:
            try:
                built.append(build_call(trace, self.redaction, self._attempts, self._nodes))
            except Exception:  # a record that cannot be built must not stop the others
                log.exception("recorder: could not build the record of a %s call", trace.verb)
        fresh, used = self._nodes.take_batch()
        new_nodes = [NodeObject(sha256=sha, name=name, data=compress(data)) for sha, (name, data) in fresh.items()]
        return built, new_nodes, used - fresh.keys()

    def store_batch(self, built: list, new_nodes: list, used: Collection[str] = ()) -> list[dict[str, Any]]:
        """One transaction; on failure nothing is stored and the same rows can be stored again."""
        from django.db import transaction

        from .models import BackendCall, Call, NodeObject
        from .nodeindex import index_calls

        with transaction.atomic():
            if new_nodes:
                NodeObject.objects.bulk_create(new_nodes, ignore_conflicts=True, batch_size=500)
            self._touch_nodes(used)
            calls = [call for call, _ in built]
            for call in calls:
                call.pk = None  # a retried batch is inserted afresh
            Call.objects.bulk_create(calls, batch_size=500)
            index_calls((c.pk, *getattr(c, "_node_index", ((), ()))) for c in calls)
            children = [kid for call, kids in built for kid in kids]
            for call, kids in built:
                for kid in kids:
                    kid.pk = None
                    kid.call = call
            if children:
                BackendCall.objects.bulk_create(children, batch_size=500)
        for call, _ in built:
            metrics.CALLS.labels(call.backend, call.verb, call.outcome).inc()
        metrics.RECORDER_WRITTEN.inc(len(built))
        return [call.to_json() for call, _ in built]

    def _touch_nodes(self, used: Collection[str]) -> None:
        """Refresh last_seen of nodes still in use, each at most every TOUCH_EVERY seconds."""
        from django.utils import timezone as dj_timezone

        from .models import NodeObject

        now = time.monotonic()
        stale = [sha for sha in used if now - self._touched.get(sha, -TOUCH_EVERY) >= TOUCH_EVERY]
        for start in range(0, len(stale), 500):
            NodeObject.objects.filter(sha256__in=stale[start : start + 500]).update(last_seen=dj_timezone.now())
        for sha in stale:
            self._touched[sha] = now
            self._touched.move_to_end(sha)
        while len(self._touched) > 200_000:
            self._touched.popitem(last=False)

    def _publish(self, summaries: list[dict[str, Any]]) -> None:
        if not summaries or self.publisher is None:
            return
        try:
            self.publisher(summaries)
        except Exception:  # a failing live stream never costs a record
            log.exception("recorder: publishing %d live events failed", len(summaries))


def _log_failure(future) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("recorder: live event not published: %s", future.exception())


def channel_layer_publisher(loop: asyncio.AbstractEventLoop | None) -> Publisher:
    """Publish summaries to the live group; with the in-memory layer, on the server's loop."""
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    # A sequence number per publishing process: a consumer that sees one skipped (a publish
    # lost while Redis was away, a message the layer dropped) knows its client must refetch.
    origin, sequence = uuid.uuid4().hex[:12], iter(range(1, sys.maxsize))

    def publish(summaries: list[dict[str, Any]]) -> None:
        if layer is None:
            return
        message = {"type": "calls.batch", "calls": summaries, "origin": origin, "seq": next(sequence)}
        coro = layer.group_send(LIVE_GROUP, message)
        if loop is not None and loop.is_running():
            # Not waited for: the writer must not stall on the live stream.
            future = asyncio.run_coroutine_threadsafe(coro, loop)
            future.add_done_callback(_log_failure)
        else:
            asyncio.run(coro)

    return publish
