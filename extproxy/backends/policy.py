"""The built-in policy module as a backend: answers extender calls in-process.

Filter and prioritize need full Node objects (nodeCacheCapable: false, the default for a
policy backend); registered with names only, filter fails with a clear Error (a node cache
from the Kubernetes API comes with the combined form). Bind goes
through the Kubernetes API (pods/binding) in a worker thread and is entered in the policy's
ledger; only for a pod this backend saw in filter or prioritize, to a node that passed (bindguard). The policy's own errors never escape: a bad request is the protocol's error answer.
"""
from __future__ import annotations

import asyncio
import logging


from .. import kube, protocol
from ..config import BackendConfig
from ..bindguard import BindGuard
from ..podmemory import PodMemory
from ..policies import Policy
from ..protocol import Verb
from ..semantics import go_format_safe
from .base import Backend, Exchange, now

log = logging.getLogger(__name__)


class PolicyBackend(Backend):
    def __init__(self, config: BackendConfig, policy: Policy) -> None:
        super().__init__(config)
        self.policy = policy
        self.pods = PodMemory()  # between filter and bind, for the ledger
        self.bindable = BindGuard()  # binding uses extproxy's credentials: only pods and nodes it passed

    async def exchange(self, verb: Verb, verb_string: str, body: bytes, *, stream: bool = False,
                       timeout: float | None = None) -> Exchange:  # runs in this process: no wait to bound
        started = now()
        try:
            if verb == Verb.FILTER:
                data = self._filter(body)
            elif verb == Verb.PRIORITIZE:
                data = self._prioritize(body)
            elif verb == Verb.PREEMPT:
                data = self._preempt(body)
            else:
                data = await self._bind(body)
        except protocol.ProtocolError as exc:
            return self._refuse(verb, started, f"bad request: {exc}")
        except Exception as exc:  # the contract: a backend call never raises
            log.exception("policy backend %s: %s failed", self.name, verb)
            return self._refuse(verb, started, f"policy error: {type(exc).__name__}: {exc}")
        return Exchange(started, now(), 200, data)

    def _refuse(self, verb: Verb, started: float, reason: str) -> Exchange:
        status, body, content_type = protocol.encode_failure(verb, go_format_safe(reason), 400)
        return Exchange(started, now(), status, body, content_type)

    def _filter(self, body: bytes) -> bytes:
        args = protocol.decode_extender_args(body)
        # the pod's identity as the scheduler reads it from the bytes (a key spelled Metadata,
        # given twice), not the dict's: it is what the scheduler's bind will name
        self.pods.remember(args.pod, args.pod_identity[2])
        if args.nodes is None:
            return protocol.encode_filter_result(
                protocol.FilterResult(None, None, {}, {}, "policy backends need full Node objects: register with nodeCacheCapable: false")
            )
        outcome = self.policy.filter(args.pod, args.nodes)
        passed = set(outcome.passed)
        # Hand back the scheduler's own objects, unchanged (reference 5.5).
        kept = [n for n in args.nodes if (n.get("metadata") or {}).get("name") in passed]
        namespace, name, uid = args.pod_identity
        self.bindable.allow(uid, namespace, name, outcome.passed)
        return protocol.encode_filter_result(
            protocol.FilterResult(kept, None, outcome.failed, outcome.unresolvable, "")
        )

    def _prioritize(self, body: bytes) -> bytes:
        args = protocol.decode_extender_args(body)
        if args.nodes is None:
            return protocol.encode_host_priority_list([])
        namespace, name, uid = args.pod_identity
        self.bindable.allow(uid, namespace, name, [(n.get("metadata") or {}).get("name") or "" for n in args.nodes])
        scores = self.policy.prioritize(args.pod, args.nodes)
        return protocol.encode_host_priority_list([protocol.HostPriority(h, s) for h, s in scores.items()])

    def _preempt(self, body: bytes) -> bytes:
        args = protocol.decode_preemption_args(body)
        if args.node_to_victims is not None:
            full = {node: v for node, v in args.node_to_victims.items() if v is not None}
            given = {node: v.pods for node, v in full.items()}
            pdb = {node: v.num_pdb_violations for node, v in full.items()}
        else:
            meta = {node: mv for node, mv in (args.node_to_meta_victims or {}).items() if mv is not None}
            given = {node: [{"metadata": {"uid": uid}} for uid in mv.pods] for node, mv in meta.items()}
            pdb = {node: mv.num_pdb_violations for node, mv in meta.items()}
        kept = self.policy.preempt(args.pod, given)
        result: dict[str, protocol.MetaVictims | None] = {
            node: protocol.MetaVictims([protocol.pod_identity(p)[2] for p in victims], pdb.get(node, 0))
            for node, victims in kept.items()
        }
        return protocol.encode_preemption_result(protocol.PreemptionResult(result))

    async def _bind(self, body: bytes) -> bytes:
        args = protocol.decode_binding_args(body)
        refusal = self.bindable.refusal(args.pod_uid, args.pod_namespace, args.pod_name, args.node)
        if refusal is not None:
            return protocol.encode_binding_result(protocol.BindingResult(error=go_format_safe(refusal)))
        try:
            await asyncio.to_thread(kube.bind_pod, args.pod_namespace, args.pod_name, args.pod_uid, args.node)
        except kube.KubeError as exc:
            return protocol.encode_binding_result(protocol.BindingResult(error=go_format_safe(str(exc))))
        self.bindable.forget(args.pod_uid)
        pod = self.pods.pop(args.pod_uid)
        if pod is not None:
            self.policy.record_binding(pod, args.node)
        return protocol.encode_binding_result(protocol.BindingResult(error=""))
