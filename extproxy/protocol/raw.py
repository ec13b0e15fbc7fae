"""The hot path's view of an ExtenderArgs body: split once, re-joined as bytes.

Owns what the proxy needs without building Node objects: the Pod plus each Node item kept as
its bytes and its name (``split_extender_args``; the recorder reads requests with it too), and
the bodies built back from those parts (``join_*``), written the way the scheduler writes them.

May import: the standard library, msgspec and the other ``protocol`` modules. No Django, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from .decode import read_extender_args
from .encode import _enc, _sorted_map
from .kubefields import POD
from .merged import go_object


@dataclass(slots=True)
class RawArgs:
    """ExtenderArgs split for forwarding: the Pod decoded, each Node item kept as its bytes.

    The combined form re-sends subsets of the candidates to each backend; keeping the items
    as bytes lets it build those bodies by joining slices instead of encoding Node objects.
    """

    pod: dict
    pod_raw: bytes
    pod_identity: tuple[str, str, str]  # (namespace, name, uid)
    node_names: list[str]
    items: list[bytes] | None  # the Nodes items (full-object mode, when kept); None in names mode
    names_mode: bool = True  # the request listed NodeNames (or no list at all)


def split_extender_args(body: bytes, keep_items: bool = True) -> RawArgs:
    """The Pod decoded and the node names; Node items kept as raw bytes (see RawArgs).

    Read by ``decode.read_extender_args``, the same reader (and type checks) as the full
    decoder; NodeNames wins when both lists are set, as in the scheduler's own requests.
    ``keep_items=False`` (the recorder): names only, ``items`` stays None.
    """
    parts = read_extender_args(body, keep_items)
    pod = go_object(parts.pod_raw, POD) or {}  # spellings folded, repeats merged: as the scheduler reads it
    if parts.node_names is not None:
        return RawArgs(pod, parts.pod_raw, parts.pod_identity, parts.node_names, None)
    if parts.nodes is None:
        return RawArgs(pod, parts.pod_raw, parts.pod_identity, [], None)
    return RawArgs(pod, parts.pod_raw, parts.pod_identity, parts.nodes.names, parts.nodes.items, names_mode=False)


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

