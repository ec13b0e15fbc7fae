"""Exact decoders: bytes -> wire types, as kube-scheduler's ``json.NewDecoder(...).Decode`` reads them.

Owns one decoder per message. Types are checked like Go: int64 fields take only JSON integers in
range; ``null`` leaves scalars at their zero value and sets slices, maps and pointers to nil; a
later key overwrites an earlier one, except that maps from duplicated keys merge. The Go rules
themselves live in ``gojson``; this module only says which field is which.

May import: the standard library, msgspec and the other ``protocol`` modules. No Django, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from .envelope import LastObject, _top
from .gojson import (
    _INT64_MAX,
    _INT64_MIN,
    ProtocolError,
    _Buf,
    _Fields,
    _first_value,
    _int64,
    _jkind,
    _object,
    _any_decoder,
    _pairs,
    _raw_list_decoder,
    _string,
    _string_list,
    _string_map,
    _struct_pairs,
    _trim,
    _type_error,
)
from .gostrings import as_go_reads
from .kubefields import NODE, POD
from .merged import decoded_into, go_object
from .objects import Known, NodeListParts, RecentBytes, _node_list, identity_of
from .repeats import GoSlice, object_into, strings_into
from .types import (
    BindingArgs,
    BindingResult,
    ExtenderArgs,
    FilterResult,
    HostPriority,
    MetaVictims,
    PreemptionArgs,
    PreemptionResult,
    Victims,
)

_F_ARGS = _Fields(["Pod", "Nodes", "NodeNames"])
_F_FILTER = _Fields(["Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"])
_F_HOST = _Fields(["Host", "Score"])
_F_BIND_ARGS = _Fields(["PodName", "PodNamespace", "PodUID", "Node"])
_F_BIND_RESULT = _Fields(["Error"])
_F_VICTIMS = _Fields(["Pods", "NumPDBViolations"])
_F_METAPOD = _Fields(["UID"])
_F_PREEMPT_ARGS = _Fields(["Pod", "NodeNameToVictims", "NodeNameToMetaVictims"])
_F_PREEMPT_RESULT = _Fields(["NodeNameToMetaVictims"])

# The Go types of fields that are not spelled as their JSON (extender/v1 types.go): a type
# error names them so.
_FAILED_NODES_MAP = "v1.FailedNodesMap"
_BINDING_TYPES = {"PodName": "string", "PodNamespace": "string", "PodUID": "types.UID", "Node": "string"}


@dataclass(slots=True)
class ArgsParts:
    """An ExtenderArgs body read once with Go's key and type rules, Node items left as bytes.

    ``pod_raw`` is ``b"null"`` when Pod is absent; ``nodes`` is None when Nodes is null or absent;
    ``node_names`` is None when NodeNames is null or absent.
    """

    pod_raw: bytes
    pod_identity: tuple[str, str, str]  # (namespace, name, uid)
    nodes: NodeListParts | None
    node_names: list[str] | None


@as_go_reads
def read_extender_args(body: bytes, keep_items: bool = True, recent: RecentBytes | None = None,
                       last: LastObject | None = None) -> ArgsParts:
    """The one reader of ExtenderArgs: every occurrence of a key is checked and decoded into
    what the earlier ones filled, as Go decodes it (a Pod's fields merge; repeats.py).

    ``keep_items=False``: the Nodes' names only (``nodes.items`` is None), with the same checks;
    with ``recent``, a Nodes list read before is not read again (objects.RecentBytes); with
    ``last``, the envelope is kept for the next reader of the same bytes (envelope.LastObject).
    """
    pod_raw: bytes = b"null"
    pod_identity = ("", "", "")
    nodes: NodeListParts | None = None
    names: GoSlice[str] = GoSlice()
    pairs = _top(body, "v1.ExtenderArgs", _F_ARGS, last)
    again = _given_again(pairs, "Nodes")
    for name, val in pairs:
        if name == "Pod":
            k = _jkind(val)
            if k not in ("object", "null"):
                raise _type_error(k, "ExtenderArgs.Pod", "v1.Pod")
            # Pod is a *v1.Pod: given again, it is decoded into the Pod it points to (the two
            # objects' pairs, in turn: repeats.object_into); null sets it to nil
            pod_raw = object_into(pod_raw, bytes(_trim(val))) if k == "object" else b"null"
            # read here, not after the loop: Go names the first type error in document order
            pod_identity = identity_of(pod_raw, "Pod", "Pod")
        elif name == "Nodes":
            nodes = _node_list(val, "ExtenderArgs.Nodes", keep_items, recent, into=again, before=nodes)
        else:
            strings_into(names, val, "ExtenderArgs.NodeNames")
    return ArgsParts(pod_raw, pod_identity, nodes, names.value())


def _given_again(pairs: list[tuple[str, _Buf]], field: str) -> GoSlice[bytes] | None:
    """For a NodeList field given more than once: the items its occurrences are decoded into in
    turn, as Go decodes them (repeats.py); None for the usual message, read without it."""
    return GoSlice() if sum(name == field for name, _ in pairs) > 1 else None


@as_go_reads  # besides read_extender_args: the Pod and Nodes are decoded whole here
def decode_extender_args(body: bytes) -> ExtenderArgs:
    """Decode an ExtenderArgs body (filter/prioritize request), Node objects built as dicts."""
    parts = read_extender_args(body)
    nodes = meta = None
    if parts.nodes is not None:
        nodes = [go_object(item, NODE) or {} for item in parts.nodes.items or ()]
        meta = parts.nodes.metadata
    pod = go_object(parts.pod_raw, POD) or {}
    return ExtenderArgs(pod=pod, nodes=nodes, node_names=parts.node_names, nodes_metadata=meta,
                        pod_identity=parts.pod_identity)


@as_go_reads
def decode_filter_result(body: bytes, names_only: bool = False, keep_items: bool = False,
                         known: Known | None = None) -> FilterResult:
    """Decode an ExtenderFilterResult body (filter response).

    names_only: returned Node objects are not built: ``nodes`` stays None and ``node_item_names``
    holds their names (building 1000 full Nodes would cost most of the time, and even a
    ``{"metadata": {"name": ...}}`` stub each cost a reader of 5,000 ms). keep_items, with names_only:
    ``node_items`` holds each returned object's bytes as they came (for a forwarder of them).
    known: the objects sent and their names; a returned object equal to one of them is not
    decoded for its name (objects.names_of).
    """
    node_list: NodeListParts | None = None
    node_names: GoSlice[str] = GoSlice()
    failed: dict[str, str] | None = None
    unres: dict[str, str] | None = None
    error = ""
    pairs = _top(body, "v1.ExtenderFilterResult", _F_FILTER)
    again = _given_again(pairs, "Nodes")
    for name, val in pairs:
        if name == "Nodes":
            node_list = _node_list(val, "ExtenderFilterResult.Nodes", keep_items=keep_items or not names_only,
                                   known=known, into=again, before=node_list)
        elif name == "NodeNames":
            strings_into(node_names, val, "ExtenderFilterResult.NodeNames")
        elif name == "FailedNodes":
            failed = _string_map(val, "ExtenderFilterResult.FailedNodes", failed, _FAILED_NODES_MAP)
        elif name == "FailedAndUnresolvableNodes":
            unres = _string_map(val, "ExtenderFilterResult.FailedAndUnresolvableNodes", unres, _FAILED_NODES_MAP)
        else:
            error = _string(val, "ExtenderFilterResult.Error", error)
    names = node_names.value()
    nodes = items = meta = item_names = None
    if node_list is not None:
        items, meta = node_list.items, node_list.metadata
        if names_only:
            item_names = node_list.names
        else:
            nodes = [go_object(item, NODE) or {} for item in items or ()]  # as Go reads them (merged.py)
    return FilterResult(
        nodes=nodes,
        node_names=names,
        failed_nodes=failed or {},
        failed_and_unresolvable=unres or {},
        error=error,
        nodes_metadata=meta,
        node_items=items if names_only and keep_items else None,
        node_item_names=item_names,
    )


class _HPExact(msgspec.Struct, forbid_unknown_fields=True):
    Host: str | None = ""
    Score: int | None = 0


_hp_fast_decoder = msgspec.json.Decoder(list[_HPExact | None])


@as_go_reads
def decode_host_priority_list(body: bytes) -> list[HostPriority]:
    """Decode a HostPriorityList body (prioritize response): a bare JSON array."""
    raw = _first_value(body)
    k = _jkind(raw)
    if k == "null":
        return []
    if k != "array":
        raise ProtocolError(f"json: cannot unmarshal {k} into Go value of type v1.HostPriorityList")
    try:  # fast path: exact PascalCase keys, integer scores; anything else takes the exact path
        fast = _hp_fast_decoder.decode(raw)
        if all(_INT64_MIN <= (h.Score or 0) <= _INT64_MAX for h in fast if h is not None):
            return [
                HostPriority(h.Host or "", h.Score or 0) if h is not None else HostPriority("", 0)
                for h in fast
            ]
    except msgspec.DecodeError:
        pass
    out: list[HostPriority] = []
    for raw_item in _raw_list_decoder.decode(raw):
        item = _trim(raw_item)
        ik = _jkind(item)
        if ik == "null":
            out.append(HostPriority("", 0))
            continue
        if ik != "object":
            raise ProtocolError(f"json: cannot unmarshal {ik} into Go value of type v1.HostPriority")
        host, score = "", 0
        for name, val in _pairs(item):
            f = _F_HOST.match(name)
            if f == "Host":
                host = _string(val, "HostPriority.Host", host)
            elif f == "Score":
                score = _int64(val, "HostPriority.Score", score, score=True)
        out.append(HostPriority(host, score))
    return out


@as_go_reads
def decode_binding_args(body: bytes) -> BindingArgs:
    """Decode an ExtenderBindingArgs body (bind request)."""
    v = {"PodName": "", "PodNamespace": "", "PodUID": "", "Node": ""}
    for name, val in _top(body, "v1.ExtenderBindingArgs", _F_BIND_ARGS):
        v[name] = _string(val, f"ExtenderBindingArgs.{name}", v[name], _BINDING_TYPES[name])
    return BindingArgs(v["PodName"], v["PodNamespace"], v["PodUID"], v["Node"])


@as_go_reads
def decode_binding_result(body: bytes) -> BindingResult:
    """Decode an ExtenderBindingResult body (bind response)."""
    error = ""
    for _name, val in _top(body, "v1.ExtenderBindingResult", _F_BIND_RESULT):
        error = _string(val, "ExtenderBindingResult.Error", error)
    return BindingResult(error)


def _victims_map(
    raw: _Buf, where: str, current: dict | None, meta: bool
) -> dict[str, Any] | None:
    """map[string]*Victims / map[string]*MetaVictims (merging into ``current``).

    ``where``: ``<message>.<field>``. Go adds nothing to a type error's field path for a map's
    key, so a value of the wrong kind is named by the map's field, and the fields inside a
    value by ``<Victims|MetaVictims>.<field>.<their name>`` (decode.go, ``addErrorContext``).
    """
    k = _jkind(raw)
    if k == "null":
        return None
    gotype = "v1.MetaVictims" if meta else "v1.Victims"
    if k != "object":
        raise _type_error(k, where, "map[string]*" + gotype)
    field = where.split(".", 1)[1]
    out = current if current is not None else {}
    for node, val in _pairs(_trim(raw)):
        out[node] = _meta_victims(val, where, field) if meta else _victims(val, where, field)
    return out


def _victims(raw: _Buf, where: str, field: str) -> Victims | None:
    pairs = _struct_pairs(raw, "v1.Victims", _F_VICTIMS, where)
    if pairs is None:
        return None
    pods: list = []
    n = 0
    for name, val in pairs:
        if name == "Pods":
            pods = _victim_pods(val, f"Victims.{field}.Pods")
        else:
            n = _int64(val, f"Victims.{field}.NumPDBViolations", n)
    return Victims(pods, n)


def _victim_pods(raw: _Buf, where: str) -> list[dict | None]:
    """A []*v1.Pod, each Pod read as Go reads it (merged.py); a null one stays None."""
    k = _jkind(raw)
    if k == "null":
        return []
    if k != "array":
        raise _type_error(k, where, "[]*v1.Pod")
    items = [_trim(item) for item in _raw_list_decoder.decode(raw)]
    for item in items:
        if _jkind(item) not in ("object", "null"):
            raise _type_error(_jkind(item), where, "v1.Pod")
    return [go_object(item, POD) for item in items]


def _meta_victims(raw: _Buf, where: str, field: str) -> MetaVictims | None:
    """``where``: the map's place in the message; ``field``: the map's field alone."""
    pairs = _struct_pairs(raw, "v1.MetaVictims", _F_VICTIMS, where)
    if pairs is None:
        return None
    pods: GoSlice[str | None] = GoSlice()
    n = 0
    for name, val in pairs:
        if name == "Pods":
            k = _jkind(val)
            if k == "null":
                pods.reset(nil=True)
            elif k != "array":
                raise _type_error(k, f"MetaVictims.{field}.Pods", "[]*v1.MetaPod")
            else:  # []*MetaPod: a later Pods is decoded into the pods before (repeats.py)
                pods.decode(_raw_list_decoder.decode(val), lambda old, item: _meta_pod_into(old, item, field))
        else:
            n = _int64(val, f"MetaVictims.{field}.NumPDBViolations", n)
    uids = pods.value() or []
    return MetaVictims([uid or "" for uid in uids], n, nil_pods=sum(uid is None for uid in uids))


def _meta_pod_into(uid: str | None, item: _Buf, field: str) -> str | None:
    """A *MetaPod's UID after ``item`` is decoded into it; None: the nil pointer (null)."""
    pairs = _struct_pairs(item, "v1.MetaPod", _F_METAPOD, f"MetaVictims.{field}.Pods")
    if pairs is None:
        return None
    found = uid or ""  # a nil pointer points to a new MetaPod first (indirect)
    for _f, value in pairs:
        found = _string(value, f"MetaPod.{field}.Pods.UID", found)
    return found


@as_go_reads
def decode_preemption_args(body: bytes) -> PreemptionArgs:
    """Decode an ExtenderPreemptionArgs body (preempt request)."""
    pod: dict | None = None
    victims: dict | None = None
    metas: dict | None = None
    for name, val in _top(body, "v1.ExtenderPreemptionArgs", _F_PREEMPT_ARGS):
        if name == "Pod":
            pod = _pod(val, "ExtenderPreemptionArgs.Pod", pod)
        elif name == "NodeNameToVictims":
            victims = _victims_map(val, "ExtenderPreemptionArgs.NodeNameToVictims", victims, False)
        else:
            metas = _victims_map(val, "ExtenderPreemptionArgs.NodeNameToMetaVictims", metas, True)
    return PreemptionArgs(pod=pod or {}, node_to_victims=victims, node_to_meta_victims=metas)


def _pod(raw: _Buf, where: str, before: dict | None) -> dict | None:
    """A Pod field's next occurrence (a *v1.Pod) decoded into the Pod before: the fields merge,
    null sets the pointer to nil; each key given twice inside it merged too (merged.py)."""
    k = _jkind(raw)
    if k == "null":
        return None
    if k != "object":
        raise _type_error(k, where, "v1.Pod")
    pod = go_object(_trim(raw), POD)
    return decoded_into(before, pod, POD) if before is not None else pod


@as_go_reads
def decode_preemption_result(body: bytes) -> PreemptionResult:
    """Decode an ExtenderPreemptionResult body. Null/absent map decodes to ``{}``."""
    metas: dict | None = None
    for _name, val in _top(body, "v1.ExtenderPreemptionResult", _F_PREEMPT_RESULT):
        metas = _victims_map(val, "ExtenderPreemptionResult.NodeNameToMetaVictims", metas, True)
    return PreemptionResult(metas or {})

