"""A request in a backend's own mode: Node names (nodeCacheCapable) or full Node objects.

Replay and the shadow backends send a recorded request to a backend that may take the other
mode than the one it was recorded in. Full objects to names needs nothing; names to full
objects takes the newest stored Node object of each name (the node store), which may differ
from the node as it was. Preempt: full victim Pods to their UIDs as kube-scheduler converts
them; UIDs to full Pods cannot be done (the record has no victim Pods). Reads only; must not import the engine: the shadow process
(shadow.py) uses this without one.
"""
from __future__ import annotations

import zlib

from .. import protocol
from ..config import BackendConfig


def node_objects_by_name(names: list[str]) -> dict[str, bytes]:
    """The latest stored Node object of each name (to send full objects to a backend that needs
    them when the recorded call had names only)."""
    from ..models import NodeObject

    found: dict[str, bytes] = {}
    for start in range(0, len(names), 500):
        rows = NodeObject.objects.filter(name__in=names[start : start + 500]).order_by("last_seen").values_list("name", "data")
        for name, data in rows:
            found[name] = zlib.decompress(bytes(data))
    return found


def in_mode(body: bytes, config: BackendConfig, verb: str) -> bytes | str:
    """The request in the backend's mode (names or full Node objects), or why it cannot be."""
    if verb == "preempt":
        return preempt_in_mode(body, config)
    if verb not in ("filter", "prioritize"):
        return body
    try:
        args = protocol.split_extender_args(body)
    except protocol.ProtocolError:
        return body  # sent as recorded: the backend's answer to it is what is compared
    if config.node_cache_capable and args.items is not None:
        return protocol.join_extender_args(args.pod_raw, names=args.node_names)
    if not config.node_cache_capable and args.items is None:
        objects = node_objects_by_name(args.node_names)
        missing = [n for n in args.node_names if n not in objects]
        if missing:
            return f"the call had node names only and no Node object of {missing[0]!r} is stored"
        return protocol.join_extender_args(args.pod_raw, items=[objects[n] for n in args.node_names])
    return body


def preempt_in_mode(body: bytes, config: BackendConfig) -> bytes | str:
    """A preempt request as kube-scheduler sends it to this backend: to a nodeCacheCapable one the
    victims' UIDs and PDB violation counts only (NodeNameToMetaVictims, its convertToMetaVictims),
    to any other the full victim Pods (NodeNameToVictims). Full Pods to UIDs needs nothing; a
    call recorded with UIDs only does not hold the Pods, so it cannot go to a full-mode backend."""
    try:
        args = protocol.decode_preemption_args(body)
    except protocol.ProtocolError:
        return body  # sent as recorded: the backend's answer to it is what is compared
    if config.node_cache_capable and args.node_to_victims is not None and args.node_to_meta_victims is None:
        metas: dict[str, protocol.MetaVictims | None] = {
            node: None if victims is None
            else protocol.MetaVictims([protocol.pod_identity(pod)[2] for pod in victims.pods], victims.num_pdb_violations)
            for node, victims in args.node_to_victims.items()
        }
        return protocol.encode_preemption_args(protocol.PreemptionArgs(args.pod, None, metas))
    # The built-in policy reads victims by UID too: it may stand in with full Nodes all the same.
    if (not config.node_cache_capable and not config.policy and args.node_to_meta_victims is not None
            and args.node_to_victims is None):
        return ("the call was recorded for a nodeCacheCapable backend (victims' UIDs only): the victims' full Pod "
                "objects a backend with nodeCacheCapable: false takes are not in the record")
    return body
