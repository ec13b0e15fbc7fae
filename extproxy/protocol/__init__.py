"""The kube-scheduler extender protocol (``k8s.io/kube-scheduler/extender/v1``): bytes <-> Python.

A pure package: no Django, no I/O, no logging (tests/protocol/test_purity.py proves it).
A change to how a message is read or written goes here; what the scheduler MAKES of a reply
goes in ``extproxy.semantics``.

* ``gojson``: Go's encoding/json on msgspec (first value, key folding, type checks, errors);
* ``types``: the wire types, and ``Verb``, the four calls;
* ``objects``: Pods and Nodes inside messages: identity, the one NodeList reader, and
  ``RecentBytes``, a bounded memory of what was made of bytes read before (lists, replies);
* ``envelope``: a message's top level: its values read once per owner, its keys as sent;
* ``decode``: one exact decoder per message;
* ``encode``: one encoder per message, byte-compatible with Go's json.Marshal;
* ``merged``: a Pod or Node as a dict, as Go decodes it (spellings folded, repeats merged);
* ``kubefields``: the Go types of the Pod's and Node's fields that decoding depends on;
* ``raw``: the hot path's split of ExtenderArgs into parts kept as bytes, and the joins back.

May import: the standard library and msgspec; nothing else of extproxy. The public names are
exported here, so ``from extproxy.protocol import X`` is the way in.
"""

from __future__ import annotations

from .decode import (
    ArgsParts,
    decode_binding_args,
    decode_binding_result,
    decode_extender_args,
    decode_filter_result,
    decode_host_priority_list,
    decode_preemption_args,
    decode_preemption_result,
    read_extender_args,
)
from .encode import (
    JSON,
    TEXT,
    Reply,
    encode_binding_args,
    encode_binding_result,
    encode_extender_args,
    encode_failure,
    encode_filter_result,
    encode_host_priority_list,
    encode_preemption_args,
    encode_preemption_result,
)
from .envelope import LastObject, envelope_keys, object_keys, raw_object
from .gojson import ProtocolError, go_key
from .merged import forwardable
from .objects import NodeListParts, RecentBytes, identity_of, node_name_of
from .raw import RawArgs, join_extender_args, join_filter_result, pod_identity, split_extender_args
from .types import (
    MAX_EXTENDER_PRIORITY,
    Choices,
    MIN_EXTENDER_PRIORITY,
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

__all__ = [
    "Choices",
    "ProtocolError",
    "Verb",
    "ArgsParts",
    "NodeListParts",
    "RecentBytes",
    "read_extender_args",
    "identity_of",
    "RawArgs",
    "split_extender_args",
    "node_name_of",
    "join_extender_args",
    "join_filter_result",
    "ExtenderArgs",
    "FilterResult",
    "HostPriority",
    "BindingArgs",
    "BindingResult",
    "Victims",
    "MetaVictims",
    "PreemptionArgs",
    "PreemptionResult",
    "decode_extender_args",
    "decode_filter_result",
    "decode_host_priority_list",
    "decode_binding_args",
    "decode_binding_result",
    "decode_preemption_args",
    "decode_preemption_result",
    "encode_extender_args",
    "encode_filter_result",
    "encode_host_priority_list",
    "encode_binding_args",
    "encode_binding_result",
    "encode_preemption_args",
    "encode_preemption_result",
    "encode_failure",
    "Reply",
    "JSON",
    "TEXT",
    "pod_identity",
    "forwardable",
    "envelope_keys",
    "go_key",
    "object_keys",
    "raw_object",
    "LastObject",
    "MIN_EXTENDER_PRIORITY",
    "MAX_EXTENDER_PRIORITY",
]
