"""Encoders: wire types -> bytes, as Go's ``json.Marshal`` writes these tagless structs.

PascalCase keys in struct order, nil as ``null``, map keys sorted, compact, with Go's HTML-safe
escaping of ``<``, ``>``, ``&``, U+2028 and U+2029. All captured kube-scheduler bodies re-encode
byte for byte (tests/protocol/test_encode.py).

May import: the standard library, msgspec and ``protocol.types``. No Django, no I/O.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import msgspec

from .types import (
    BindingArgs,
    BindingResult,
    ExtenderArgs,
    FilterResult,
    HostPriority,
    MetaVictims,
    PreemptionArgs,
    PreemptionResult,
    Verb,
    Victims,
)

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"

_encoder = msgspec.json.Encoder()
_HTML = ((b"<", b"\\u003c"), (b">", b"\\u003e"), (b"&", b"\\u0026"),
         ("\u2028".encode(), b"\\u2028"), ("\u2029".encode(), b"\\u2029"))


def _enc(obj: Any) -> bytes:
    """Compact JSON like Go's json.Marshal (HTML-safe escapes; these bytes occur only in strings)."""
    out = _encoder.encode(obj)
    for raw, esc in _HTML:
        if raw in out:
            out = out.replace(raw, esc)
    return out


def _sorted_map(m: dict | None, conv: Callable[[Any], Any] = lambda v: v) -> dict | None:
    if m is None:
        return None
    return {k: conv(m[k]) for k in sorted(m)}


def _nodelist_json(nodes: list[dict] | None, meta: dict | None) -> dict | None:
    if nodes is None:
        return None
    return {"metadata": meta if meta is not None else {}, "items": nodes}


def encode_extender_args(args: ExtenderArgs) -> bytes:
    return _enc(
        {
            "Pod": args.pod,
            "Nodes": _nodelist_json(args.nodes, args.nodes_metadata),
            "NodeNames": args.node_names,
        }
    )


def encode_filter_result(r: FilterResult) -> bytes:
    return _enc(
        {
            "Nodes": _nodelist_json(r.nodes, r.nodes_metadata),
            "NodeNames": r.node_names,
            "FailedNodes": _sorted_map(r.failed_nodes),
            "FailedAndUnresolvableNodes": _sorted_map(r.failed_and_unresolvable),
            "Error": r.error,
        }
    )


def encode_host_priority_list(items: list[HostPriority]) -> bytes:
    return _enc([{"Host": h.host, "Score": h.score} for h in items])


def encode_binding_args(a: BindingArgs) -> bytes:
    return _enc(
        {"PodName": a.pod_name, "PodNamespace": a.pod_namespace, "PodUID": a.pod_uid, "Node": a.node}
    )


def encode_binding_result(r: BindingResult) -> bytes:
    return _enc({"Error": r.error})


def _victims_json(v: Victims | None) -> dict | None:
    if v is None:
        return None
    return {"Pods": v.pods, "NumPDBViolations": v.num_pdb_violations}


def _meta_victims_json(v: MetaVictims | None) -> dict | None:
    if v is None:
        return None
    return {"Pods": [{"UID": u} for u in v.pods], "NumPDBViolations": v.num_pdb_violations}


def encode_preemption_args(a: PreemptionArgs) -> bytes:
    return _enc(
        {
            "Pod": a.pod,
            "NodeNameToVictims": _sorted_map(a.node_to_victims, _victims_json),
            "NodeNameToMetaVictims": _sorted_map(a.node_to_meta_victims, _meta_victims_json),
        }
    )


def encode_preemption_result(r: PreemptionResult) -> bytes:
    return _enc({"NodeNameToMetaVictims": _sorted_map(r.node_to_meta_victims, _meta_victims_json)})


class Reply(NamedTuple):
    """An HTTP answer for the scheduler: status, body, content type."""

    status: int
    body: bytes
    content_type: str = JSON


def encode_failure(verb: Verb, text: str, status: int = 502) -> Reply:
    """The answer that makes the scheduler fail a ``verb`` call with ``text``.

    The one place of the rule in ``Verb.answers_in_error_field``: filter and bind get a 200 whose
    Error field carries the text; prioritize and preempt get ``status`` with the text as the body.
    """
    if verb.answers_in_error_field:
        return Reply(200, _enc({"Error": text}))
    return Reply(status, text.encode(), TEXT)
