"""The hot path's view of an ExtenderArgs body: split once, re-joined as bytes.

Owns what the proxy needs without building Node objects: the pod identity and node names
(``summarize_extender_args``), the Pod plus each Node item kept as its bytes
(``split_extender_args``), and the bodies built back from those parts (``join_*``), written the
way the scheduler writes them.

May import: the standard library, msgspec and the other ``protocol`` modules. No Django, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from .decode import _F_ARGS, _Obj, _ObjList, _pod_decoder
from .encode import _enc, _sorted_map
from .gojson import ProtocolError, _Buf, _jkind, _string_list, _top, _trim, _type_error, _typed

_nodelist_decoder = msgspec.json.Decoder(_ObjList | None)
_names_decoder = msgspec.json.Decoder(list[str | None] | None)


@dataclass(slots=True)
class ArgsSummary:
    """Cheap view of an ExtenderArgs body for the hot path and the recorder."""

    pod_namespace: str
    pod_name: str
    pod_uid: str
    node_names: list[str]  # names from NodeNames, or metadata.name of each Nodes item
    mode: str  # "names" (NodeNames set), "objects" (Nodes set), "none"



def _args_parts(body: bytes) -> tuple[_Buf | None, _Buf | None, _Buf | None]:
    """The raw Pod, Nodes and NodeNames values of an ExtenderArgs body (Go's key rules)."""
    pod_raw: _Buf | None = None
    nodes_raw: _Buf | None = None
    names_raw: _Buf | None = None
    for name, val in _top(body, "v1.ExtenderArgs", _F_ARGS):
        if name == "Pod":
            pod_raw = val
        elif name == "Nodes":
            nodes_raw = val
        else:
            names_raw = val
    return pod_raw, nodes_raw, names_raw


def summarize_extender_args(body: bytes) -> ArgsSummary:
    """Pod identity and candidate node names of an ExtenderArgs body, without building the Nodes.

    Measured (this machine, CPython 3.11, msgspec 0.23, best of 7): a 5000-node full-object body
    (14.5 MB: the five fixture Nodes of filter-request.nodecache-false.json repeated with new
    names) takes ~33 ms here versus ~400-520 ms for ``json.loads`` of the same body (12-15x
    faster; a full decode_extender_args is ~380 ms). A 5000-name NodeNames body takes ~0.6 ms.
    Keys are resolved with Go's rules (exact, then case-insensitive; later duplicates win).
    The NodeList's item names are kept in order; an item without metadata.name gives "".
    """
    pod_raw, nodes_raw, names_raw = _args_parts(body)
    ns = pname = uid = ""
    if pod_raw is not None:
        if _jkind(pod_raw) not in ("object", "null"):
            raise _type_error(_jkind(pod_raw), "ExtenderArgs.Pod", "v1.Pod")
        pod = _typed(_pod_decoder, pod_raw, "ExtenderArgs.Pod")
        if pod is not None and pod.metadata is not None:
            m = pod.metadata
            ns, pname, uid = m.namespace or "", m.name or "", m.uid or ""
    names: list[str] | None = None
    if names_raw is not None:
        if _jkind(names_raw) not in ("array", "null"):
            raise _type_error(_jkind(names_raw), "ExtenderArgs.NodeNames", "[]string")
        got = _typed(_names_decoder, names_raw, "ExtenderArgs.NodeNames")
        if got is not None:
            names = [n if n is not None else "" for n in got]
    if names is not None:
        return ArgsSummary(ns, pname, uid, names, "names")
    if nodes_raw is not None:
        if _jkind(nodes_raw) not in ("object", "null"):
            raise _type_error(_jkind(nodes_raw), "ExtenderArgs.Nodes", "v1.NodeList")
        lst = _typed(_nodelist_decoder, nodes_raw, "ExtenderArgs.Nodes")
        if lst is not None:
            out: list[str] = []
            for it in lst.items or ():
                md = it.metadata if it is not None else None
                out.append((md.name or "") if md is not None else "")
            return ArgsSummary(ns, pname, uid, out, "objects")
    return ArgsSummary(ns, pname, uid, [], "none")


@dataclass(slots=True)
class RawArgs:
    """ExtenderArgs split for forwarding: the Pod decoded, each Node item kept as its bytes.

    The combined form re-sends subsets of the candidates to each backend; keeping the items
    as bytes lets it build those bodies by joining slices instead of encoding Node objects.
    """

    pod: dict
    pod_raw: bytes
    node_names: list[str]
    items: list[bytes] | None  # the Nodes items (full-object mode); None in names mode


_raw_items_decoder = msgspec.json.Decoder(list[msgspec.Raw] | None)


class _RawNodeList(msgspec.Struct):
    items: list[msgspec.Raw] | None = None


_raw_nodelist_decoder = msgspec.json.Decoder(_RawNodeList | None)
_one_obj_decoder = msgspec.json.Decoder(_Obj | None)


def split_extender_args(body: bytes) -> RawArgs:
    """Decode the Pod and the node names; keep Node items as raw bytes (see RawArgs).

    One scan of the envelope, then the NodeList once as raw items and each item's name:
    a full-mode body is walked about twice, not once per question asked of it.
    """
    pod_raw, nodes_raw, names_raw = _args_parts(body)
    pod_bytes = bytes(_trim(pod_raw)) if pod_raw is not None else b"null"
    if pod_raw is not None and _jkind(pod_raw) not in ("object", "null"):
        raise _type_error(_jkind(pod_raw), "ExtenderArgs.Pod", "v1.Pod")
    pod = msgspec.json.decode(pod_bytes) or {}
    if names_raw is not None:
        names = _string_list(names_raw, "ExtenderArgs.NodeNames")
        if names is not None:
            return RawArgs(pod, pod_bytes, names, None)
    if nodes_raw is None or _jkind(nodes_raw) == "null":
        return RawArgs(pod, pod_bytes, [], None)
    if _jkind(nodes_raw) != "object":
        raise _type_error(_jkind(nodes_raw), "ExtenderArgs.Nodes", "v1.NodeList")
    lst = _typed(_raw_nodelist_decoder, nodes_raw, "ExtenderArgs.Nodes")
    items = [bytes(i) for i in (lst.items or ())] if lst is not None else []
    try:
        node_names = [node_name_of(i) for i in items]
    except msgspec.ValidationError as exc:
        raise ProtocolError(f"json: cannot unmarshal ExtenderArgs.Nodes.items: {exc}") from None
    return RawArgs(pod, pod_bytes, node_names, items)


def node_name_of(item: bytes) -> str:
    """metadata.name of one Node object's JSON ('' when absent)."""
    obj = _one_obj_decoder.decode(item)
    return (obj.metadata.name or "") if obj is not None and obj.metadata is not None else ""


def join_extender_args(pod_raw: bytes, names: list[str] | None = None, items: list[bytes] | None = None) -> bytes:
    """ExtenderArgs bytes from parts, as the scheduler writes them (the unused key is null)."""
    if items is not None:
        return b'{"Pod":' + pod_raw + b',"Nodes":{"metadata":{},"items":[' + b",".join(items) + b']},"NodeNames":null}'
    return b'{"Pod":' + pod_raw + b',"Nodes":null,"NodeNames":' + _enc(names or []) + b"}"


def join_filter_result(
    names: list[str] | None, items: list[bytes] | None, failed: dict[str, str], unresolvable: dict[str, str], error: str = ""
) -> bytes:
    """ExtenderFilterResult bytes; Node items joined as given."""
    # One join: a full-mode answer is megabytes, and each `+` would copy all of it again.
    parts = [b'{"Nodes":']
    if items is not None:
        parts += [b'{"metadata":{},"items":[', b",".join(items), b"]}"]
    else:
        parts.append(b"null")
    parts += [
        b',"NodeNames":', _enc(names) if names is not None else b"null",
        b',"FailedNodes":', _enc(_sorted_map(failed) or {}),
        b',"FailedAndUnresolvableNodes":', _enc(_sorted_map(unresolvable) or {}),
        b',"Error":', _enc(error), b"}",
    ]
    return b"".join(parts)


def pod_identity(pod: dict) -> tuple[str, str, str]:
    """(namespace, name, uid) of a Pod dict; '' for anything absent or not a string."""
    md = pod.get("metadata") if isinstance(pod, dict) else None
    if not isinstance(md, dict):
        return "", "", ""

    def s(k: str) -> str:
        v = md.get(k)
        return v if isinstance(v, str) else ""

    return s("namespace"), s("name"), s("uid")

