"""The combined form: extproxy as ONE extender that runs every backend by the scheduler's rules.

The rules themselves are in `semantics` (pure); this module does the I/O around them: it
builds each backend's request in that backend's own mode (names, or full Node objects kept
as bytes from the request or taken from the node cache), calls it, feeds the judged reply
into the chain, and answers the scheduler. Every backend call becomes a child Trace of the
combined call's Trace.

Registered with full Node objects (nodeCacheCapable: false), the proxy has every object it
needs. Registered with names only while some backend needs objects, it takes them from the
node cache (Kubernetes API list and watch); nodes the cache does not know fail that backend's
call (its ignorable rule then applies) without calling it: the error says so in the proxy's own
words, not as an exchange with the backend's URL that failed. Preempt to a full-object backend needs the victims'
full Pods, which the proxy has only when registered with full objects.

May import: the pure core, backends/, kube and the node cache, the recorder's Trace; never the
engine (which imports this module) or Django.
"""
from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Mapping

import msgspec

from . import kube, protocol, semantics
from .backends import Backend, Exchange
from .backends.base import now, trace_of
from .bindguard import BindGuard
from .config import BackendConfig
from .nodecache import NodeCache
from .podmemory import PodMemory
from .protocol import Reply, Verb
from .recording import Trace

Handled = tuple[Reply, list[Trace]]  # the answer to the scheduler, and the backend calls made for it


class Combined:
    def __init__(self, backends: Mapping[str, Backend], parallel_filter: bool = False) -> None:
        self.backends = backends
        self.configs = [b.config for b in backends.values()]
        self.parallel_filter = parallel_filter
        self.pods = PodMemory()  # from filter/prioritize, for the bind's interest check
        self.bindable = BindGuard()  # the pods and nodes extproxy may bind through the API
        self._node_cache: NodeCache | None = None
        self._verbs: dict[Verb, Callable[[bytes], Awaitable[Handled]]] = {
            Verb.FILTER: self.filter, Verb.PRIORITIZE: self.prioritize, Verb.BIND: self.bind, Verb.PREEMPT: self.preempt,
        }

    async def call(self, verb: Verb, body: bytes) -> Handled:
        """The answer to the scheduler, and a Trace of every backend call made for it."""
        return await self._verbs[verb](body)

    def close(self) -> None:
        if self._node_cache is not None:
            self._node_cache.stop()

    # --- shared pieces --------------------------------------------------------------------

    def node_cache(self) -> NodeCache:
        if self._node_cache is None:  # started on first need: most setups never need it
            self._node_cache = NodeCache().start()
        return self._node_cache

    def args_for(
        self, config: BackendConfig, args: protocol.RawArgs, names: list[str], items: list[bytes] | None, body: bytes
    ) -> bytes | str:
        """The request for one backend in its own mode, or the reason it cannot be built.

        ``items``: the Node objects the scheduler would hold for ``names`` now (bytes: the
        request's own, or those an earlier backend returned), None when not known.
        """
        same_list = names == args.node_names
        if config.node_cache_capable:
            if same_list and args.items is None:
                return body  # nothing to convert: forward the scheduler's bytes
            return protocol.join_extender_args(args.pod_raw, names=names)
        if items is not None:
            if same_list and items == args.items:
                return body  # the scheduler's own objects, unchanged: its bytes as they came
            return protocol.join_extender_args(args.pod_raw, items=_as_scheduler_hands_on(items, args.items))
        found, missing = self.node_cache().get_many(names)
        if missing:
            return f"no Node object for {len(missing)} node(s) (e.g. {missing[0]}) in the node cache"
        return protocol.join_extender_args(args.pod_raw, items=[msgspec.json.encode(n) for n in found])

    async def exchange(self, config: BackendConfig, verb: Verb, request: bytes | str) -> Exchange:
        if isinstance(request, str):  # the request could not be built: no call was made
            t = now()
            finding = {"kind": "not-called", "detail": f"extproxy did not call this backend: {request}"}
            return Exchange(t, t, None, error=request, called=False, findings=[finding])
        # The backend's whole httpTimeout, as the scheduler would give it: the entry's own covers
        # the chain's sum plus 1 s, so the margin the per-backend form keeps is not needed here.
        return await self.backends[config.name].exchange(verb, config.verb_string(verb), request,
                                                         timeout=config.http_timeout)

    @staticmethod
    def child(config: BackendConfig, verb: Verb, request: bytes | str, exchange: Exchange, verdict=None) -> Trace:
        # `verdict`: judged already, so the recorder need not read the reply again.
        body = request if isinstance(request, bytes) else b""
        return trace_of(config, verb, body, exchange, exchange.status or 0, verdict=verdict)

    # --- verbs ----------------------------------------------------------------------------

    async def filter(self, body: bytes) -> Handled:
        args = protocol.split_extender_args(body)
        self.pods.remember(args.pod, args.pod_identity[2])
        backends = semantics.interested(self.configs, args.pod, Verb.FILTER)
        children: list[Trace] = []
        if self.parallel_filter:
            result = await self._parallel_filter(args, body, backends, children)
        else:
            chain = semantics.FilterChain(args.node_names, items=args.items)
            for config in backends:
                if chain.done:
                    break
                request = self.args_for(config, args, chain.remaining, chain.remaining_items, body)
                exchange = await self.exchange(config, Verb.FILTER, request)
                verdict = chain.judge(config, exchange.status, exchange.body) if exchange.status is not None else None
                chain.apply(config, verdict, exchange.error, called=exchange.called)
                children.append(self.child(config, Verb.FILTER, request, exchange))
            result = chain.result()
        if result.error:
            return Reply(200, protocol.join_filter_result(None, None, {}, {}, result.reply_error or result.error)), children
        self.bindable.allow(*_uid_ns_name(args), result.passed)
        if result.items is not None and (
            not args.names_mode or result.names_backend_objects or _unsent(result.passed, args.node_names)
        ):
            # Full mode: the objects the scheduler would now hold, returned ones included. Names
            # mode too when a full-object backend returned a Node the scheduler did not send: it
            # takes such a backend's objects unchecked, but refuses a name it did not send
            # (`extender "<this proxy>" claims a filtered node ...`), so only objects say it.
            # And when a names-only backend answered Nodes: registered with names, the scheduler
            # would have taken them (extender.go reads Nodes when NodeNames is null).
            return Reply(200, protocol.join_filter_result(None, result.items, result.failed, result.unresolvable)), children
        return Reply(200, protocol.join_filter_result(result.passed, None, result.failed, result.unresolvable)), children

    async def _parallel_filter(self, args, body, backends, children) -> semantics.CombinedFilter:
        requests = [self.args_for(c, args, args.node_names, args.items, body) for c in backends]
        exchanges = await asyncio.gather(*(self.exchange(c, Verb.FILTER, r) for c, r in zip(backends, requests)))
        results = []
        for config, request, exchange in zip(backends, requests, exchanges):
            verdict = None
            if exchange.status is not None:
                verdict = semantics.judge_filter(config, args.node_names, exchange.status, exchange.body, keep_objects=True,
                                               sent_items=args.items)
            results.append((config, verdict, exchange.error))
            children.append(self.child(config, Verb.FILTER, request, exchange, verdict))
        not_called = [c.name for c, e in zip(backends, exchanges) if not e.called]
        return semantics.parallel_filter(args.node_names, results, args.items, not_called)

    async def prioritize(self, body: bytes) -> Handled:
        args = protocol.split_extender_args(body)
        self.pods.remember(args.pod, args.pod_identity[2])
        feasible = args.node_names
        self.bindable.allow(*_uid_ns_name(args), feasible)
        backends = semantics.interested(self.configs, args.pod, Verb.PRIORITIZE)
        requests = [self.args_for(c, args, feasible, args.items, body) for c in backends]
        exchanges = await asyncio.gather(*(self.exchange(c, Verb.PRIORITIZE, r) for c, r in zip(backends, requests)))
        results = []
        for config, exchange in zip(backends, exchanges):
            verdict = None
            if exchange.status is not None:
                verdict = semantics.judge_prioritize(config, feasible, exchange.status, exchange.body)
            results.append((config, verdict))
        totals = semantics.combine_prioritize(feasible, results)
        children = [
            self.child(c, Verb.PRIORITIZE, r, e, v) for (c, v), r, e in zip(results, requests, exchanges)
        ]
        every_host = any(not c.verb_string(Verb.PRIORITIZE) and c.interested_in(args.pod) for c in self.configs)
        listed = semantics.listed_hosts(results, every_host)
        answer = protocol.encode_host_priority_list(semantics.prioritize_answer(feasible, totals, listed))
        return Reply(200, answer), children

    async def bind(self, body: bytes) -> Handled:
        args = protocol.decode_binding_args(body)
        if not (args.pod_name and args.pod_namespace and args.node):
            raise protocol.ProtocolError("ExtenderBindingArgs needs PodName, PodNamespace and Node")
        pod = self.pods.get(args.pod_uid)
        binder = self._binder(pod)
        children: list[Trace] = []
        if binder is not None:
            exchange = await self.exchange(binder, Verb.BIND, body)
            children.append(self.child(binder, Verb.BIND, body, exchange))
            verdict = None
            if exchange.status is not None:
                verdict = semantics.judge_bind(binder, exchange.status, exchange.body)
            what = semantics.bind_fallthrough(binder, verdict if verdict is not None else exchange.error)
            if what == "bound":
                return self._bound(""), children
            if what == "error":
                url = binder.url_for(binder.bind_verb)
                return self._bound(semantics.reply_error_text(verdict, exchange.error, url)), children
        # No interested binder, or an ignorable one failed: what the scheduler's DefaultBinder does,
        # with extproxy's own credentials, so only for a pod it saw and a node that passed.
        refusal = self.bindable.refusal(args.pod_uid, args.pod_namespace, args.pod_name, args.node)
        if refusal is not None:
            return self._bound(semantics.go_format_safe(refusal)), children
        try:
            await asyncio.to_thread(kube.bind_pod, args.pod_namespace, args.pod_name, args.pod_uid, args.node)
        except kube.KubeError as exc:
            return self._bound(semantics.go_format_safe(str(exc))), children
        self.bindable.forget(args.pod_uid)
        return self._bound(""), children

    @staticmethod
    def _bound(error: str) -> Reply:
        return Reply(200, protocol.encode_binding_result(protocol.BindingResult(error)))

    def _binder(self, pod: dict | None) -> BackendConfig | None:
        if pod is not None:
            return semantics.choose_binder(self.configs, pod)
        # Not seen in a filter or prioritize call: without the pod, interest cannot be checked;
        # the configured binder is assumed interested (the scheduler calls bind only then).
        binders = [c for c in semantics.scheduler_order(self.configs) if c.bind_verb]
        return binders[0] if binders else None

    async def preempt(self, body: bytes) -> Handled:
        args = protocol.decode_preemption_args(body)
        pods_by_uid: dict[str, dict] = {}
        if args.node_to_meta_victims is not None:
            start = {n: mv for n, mv in args.node_to_meta_victims.items() if mv is not None}
        else:
            start = {}
            for node, victims in (args.node_to_victims or {}).items():
                if victims is None:
                    continue
                if any(pod is None for pod in victims.pods):
                    # The scheduler's victims are pods of its own cache: it never sends a null one,
                    # and converting it to a MetaPod (convertToMetaVictims, pkg/scheduler/extender.go)
                    # would dereference it. Not a request to stand in for: refused, no backend called.
                    raise protocol.ProtocolError(
                        f"NodeNameToVictims[{node!r}].Pods holds a null victim, which kube-scheduler never sends "
                        "(convertToMetaVictims would dereference it)")
                uids = [protocol.pod_identity(p)[2] for p in victims.pods]
                pods_by_uid.update(zip(uids, victims.pods))
                start[node] = protocol.MetaVictims(uids, victims.num_pdb_violations)
        chain = semantics.PreemptChain(start)
        children: list[Trace] = []
        for config in semantics.interested(self.configs, args.pod, Verb.PREEMPT):
            if chain.done:
                break
            request = self._preempt_args(config, args.pod, chain.remaining, pods_by_uid)
            exchange = await self.exchange(config, Verb.PREEMPT, request)
            verdict = chain.judge(config, exchange.status, exchange.body) if exchange.status is not None else None
            chain.apply(config, verdict, exchange.error)
            children.append(self.child(config, Verb.PREEMPT, request, exchange, verdict))
        result = chain.result()
        if result.error:
            text = f"extproxy: preempt: backend {result.error_backend}: {result.error}"
            return protocol.encode_failure(Verb.PREEMPT, text), children
        answer = protocol.PreemptionResult(dict[str, protocol.MetaVictims | None](result.victims))
        return Reply(200, protocol.encode_preemption_result(answer)), children

    @staticmethod
    def _preempt_args(config, pod: dict, victims: dict[str, protocol.MetaVictims], pods_by_uid: dict[str, dict]) -> bytes | str:
        if config.node_cache_capable:
            return protocol.encode_preemption_args(protocol.PreemptionArgs(pod, None, dict(victims)))
        full: dict[str, protocol.Victims | None] = {}
        for node, mv in victims.items():
            missing = [uid for uid in mv.pods if uid not in pods_by_uid]
            if missing:
                return f"no full Pod for victim {missing[0]} (register the proxy with nodeCacheCapable: false)"
            full[node] = protocol.Victims([pods_by_uid[uid] for uid in mv.pods], mv.num_pdb_violations)
        return protocol.encode_preemption_args(protocol.PreemptionArgs(pod, full, None))


def _as_scheduler_hands_on(items: list[bytes], sent: list[bytes] | None) -> list[bytes]:
    """The Node objects for the next backend: the scheduler's own as they came; one an earlier
    backend returned with a key given twice (or one object made of a Node given twice), merged
    as the scheduler would have decoded it before handing it on (protocol.forwardable), so a
    backend that keeps a key's last occurrence reads what a Go backend reads."""
    own = {id(item) for item in sent or ()}
    return [item if id(item) in own else protocol.forwardable(item) for item in items]


def _unsent(passed: list[str], sent: list[str]) -> bool:
    """Whether ``passed`` names a node the scheduler did not send."""
    known = set(sent)
    return any(name not in known for name in passed)


def _uid_ns_name(args: protocol.RawArgs) -> tuple[str, str, str]:
    # read from the request's bytes by Go's key rules (protocol/identity.py): a key spelled
    # otherwise (Metadata, NAME) names the pod for the scheduler, and so for its bind
    namespace, name, uid = args.pod_identity
    return uid, namespace, name
