"""A preempt exchange's null victims: what kube-scheduler cannot read, and why it matters.

May import: the standard library and ``extproxy.protocol``. No Django, no I/O.
"""
from __future__ import annotations

from extproxy.protocol import MetaVictims, PreemptionArgs


def nil_victims(reply: dict[str, MetaVictims | None]) -> list[dict]:
    """A finding for each node whose victims the scheduler cannot read: a null MetaVictims, or a
    null in its Pods.

    kube-scheduler's HTTPExtender.convertToVictims (pkg/scheduler/extender.go) reads
    ``metaVictims.NumPDBViolations`` of each node it knows, and passes each of ``metaVictims.Pods``
    to convertPodUIDToPod, which reads ``metaPod.UID`` for every pod on that node: a null is a
    nil pointer dereferenced there, and the scheduler panics (nothing in that path recovers).
    Only a node it does not know (an error first) or a node without pods (the error "claims to
    preempt pod (UID: <nil>)") escapes the panic, and the scheduler's node list is not extproxy's
    to check. The reply fails this backend's call: forwarded as it is (the per-backend form),
    the finding says what the scheduler will do with it; in the combined form the proxy, in the
    scheduler's place, never hands a null victim on (an ignorable backend is skipped, any other
    ends the preemption in error), which is what keeps the scheduler running.
    """
    found = []
    for node, mv in reply.items():
        if mv is None:
            what = "null (a nil *MetaVictims)"
        elif mv.nil_pods:
            what = f"a Pods list holding {mv.nil_pods} null(s) (nil *MetaPod)"
        else:
            continue
        found.append({"kind": "nil-victim", "detail": (
            f"victims of node {node!r} are {what}: kube-scheduler dereferences it in convertToVictims "
            "(pkg/scheduler/extender.go) and panics")})
    return found


def nil_victims_in_request(args: PreemptionArgs) -> list[dict]:
    """A finding for each node whose victims in a preempt request hold a null pod. The
    scheduler never sends one (its convertToMetaVictims, pkg/scheduler/extender.go, would
    dereference it); a request that does comes from elsewhere, and its null pod is recorded as
    a victim with UID "", which the finding says is no pod."""
    found = []
    lists = [("NodeNameToVictims", node, sum(pod is None for pod in v.pods), "*v1.Pod")
             for node, v in (args.node_to_victims or {}).items() if v is not None]
    lists += [("NodeNameToMetaVictims", node, mv.nil_pods, "*MetaPod")
              for node, mv in (args.node_to_meta_victims or {}).items() if mv is not None]
    for field, node, nils, gotype in lists:
        if nils:
            found.append({"kind": "nil-victim", "detail": (
                f"the request's {field}[{node!r}].Pods holds {nils} null(s) (nil {gotype}), which "
                "kube-scheduler never sends (convertToMetaVictims, pkg/scheduler/extender.go, would "
                'dereference it): recorded as a victim with UID "", which is no pod')})
    return found
