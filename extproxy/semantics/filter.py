"""The filter chain: findNodesThatPassExtenders, sequential or with ``parallelFilter`` (§4.2-4.3).

May import: the standard library and the other ``semantics`` modules. No Django, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Collection, Sequence

from .chain import Chain
from .decision import Outcome
from .errors import not_called_error_text, reply_error_text
from .judge import Verdict, judge_filter

if TYPE_CHECKING:  # annotations only: semantics needs no config loading at run time
    from extproxy.config import BackendConfig


@dataclass
class CombinedFilter:
    """The combined filter answer.

    With ``error`` set the answer is the error alone (``reply_error`` in the Error field): the
    scheduler discards lists and maps of a failed call and fails the attempt (no preemption).
    Otherwise reply ``passed`` (in order, duplicates kept) with ``failed``/``unresolvable``;
    each node is in at most one map, so the scheduler sets exactly these statuses.
    """

    passed: list[str]
    failed: dict[str, str]
    unresolvable: dict[str, str]
    error: str = ""
    reply_error: str = ""
    error_backend: str = ""
    # The Node objects the scheduler would hold for ``passed`` (bytes, in that order): what a
    # full-object answer must carry. None when they are not known (names throughout).
    items: list[bytes] | None = None
    # Whether ``items`` were last replaced by the Nodes answer of a names-only backend
    # (nodeCacheCapable): extender.go takes those when NodeNames is null, so a scheduler registered
    # with names holds them too, and a names answer would leave it with its own objects instead.
    names_backend_objects: bool = False


@dataclass
class _Reading:
    """One backend's filter answer as the chain takes it: an error, or a list and its statuses."""

    error: str = ""
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    items: list[bytes] | None = None  # the returned Node objects, when the scheduler takes them


def _reading(verdict: Verdict | None, transport_error: str) -> _Reading:
    if verdict is None:
        return _Reading(error=transport_error or "no answer")
    if verdict.outcome != Outcome.OK:
        return _Reading(error=verdict.error)
    return _Reading(
        "", list(verdict.passed or []), dict(verdict.failed or {}), dict(verdict.unresolvable or {}),
        verdict.passed_items,
    )


def _reply_error(backend: BackendConfig, verdict: Verdict | None, transport_error: str, called: bool) -> str:
    if not called:
        return not_called_error_text(backend.name, transport_error or "no request")
    return reply_error_text(verdict, transport_error, backend.url_for(backend.filter_verb))


def _objects_after(sent: list[str], objects: list[bytes] | None, reading: _Reading) -> list[bytes] | None:
    """The Node objects the scheduler holds after one backend's answer (§4.3, §5 item 5).

    Returned objects (the scheduler read ``Nodes``) replace its own, whatever they say: the next
    extender is sent them, and scoring and binding use them. Returned names (a mode-true
    backend's ``NodeNames``, all among those it was sent) keep the objects it had for them.
    """
    if reading.items is not None:
        return list(reading.items)
    if objects is None:
        return None
    held = dict(zip(sent, objects))
    return [held[name] for name in reading.passed]


class _Statuses:
    """The scheduler's NodeToStatus as extenders write it: Set, last writer wins."""

    def __init__(self) -> None:
        self.code: dict[str, tuple[str, str]] = {}  # node -> (code, message)

    def write(self, failed: dict[str, str], unresolvable: dict[str, str]) -> None:
        for name, msg in unresolvable.items():
            self.code[name] = ("unresolvable", msg)
        for name, msg in failed.items():
            if name not in unresolvable:  # precedence inside one reply only
                self.code[name] = ("failed", msg)

    def maps(self) -> tuple[dict[str, str], dict[str, str]]:
        failed = {n: m for n, (c, m) in self.code.items() if c == "failed"}
        unres = {n: m for n, (c, m) in self.code.items() if c == "unresolvable"}
        return failed, unres


class FilterChain(Chain):
    """Sequential filter over backends, as findNodesThatPassExtenders does (§4.2 step 4, §4.3).

    Feed it the backends from ``interested(backends, pod, "filter")`` in that order (or build
    it with them and use ``next_backend``). Each backend is sent exactly ``remaining``; its
    passed list IS the new feasible list (order and duplicates as returned; in mode false
    names outside its input are kept). The chain is ``done`` once nothing is left
    (no further calls) or a non-ignorable backend failed (the attempt fails with that error).
    An ignorable backend's failure is skipped with the list unchanged.

    ``items`` are the scheduler's Node objects for ``input_names`` (bytes), when known; the chain
    carries them as the scheduler does (``remaining_items``): a backend's returned objects
    replace them for the backends after it and in the answer.
    """

    def __init__(
        self, input_names: list[str], backends: Sequence[BackendConfig] = (), items: list[bytes] | None = None
    ) -> None:
        super().__init__(backends)
        self._remaining = list(input_names)
        self._items = list(items) if items is not None else None
        self._statuses = _Statuses()
        self._names_backend_objects = False  # CombinedFilter.names_backend_objects
        self.reply_error = ""

    @property
    def remaining(self) -> list[str]:
        return list(self._remaining)

    @property
    def remaining_items(self) -> list[bytes] | None:
        """The Node objects the scheduler holds for ``remaining`` (None: not known)."""
        return list(self._items) if self._items is not None else None

    def _exhausted(self) -> bool:
        return not self._remaining

    def judge(self, backend: BackendConfig, status: int, body: bytes) -> Verdict:
        """The chain's reading of a reply (no per-node decisions: the recorder makes those)."""
        return judge_filter(backend, self._remaining, status, body, with_decisions=False, keep_objects=True,
                            sent_items=self._items)

    def apply(
        self, backend: BackendConfig, verdict: Verdict | None, transport_error: str = "", *, called: bool = True
    ) -> None:
        """``called`` False: the proxy did not call ``backend`` (``transport_error`` says why)."""
        self._take(backend)
        reading = _reading(verdict, transport_error)
        if reading.error:
            self._fail(backend, reading.error)
            self.reply_error = _reply_error(backend, verdict, transport_error, called)
            return
        self._statuses.write(reading.failed, reading.unresolvable)
        if reading.items is not None:
            self._names_backend_objects = backend.node_cache_capable
        self._items = _objects_after(self._remaining, self._items, reading)
        self._remaining = reading.passed

    def result(self) -> CombinedFilter:
        failed, unres = self._statuses.maps()
        if self.error:
            return CombinedFilter([], failed, unres, self.error, self.reply_error, self.error_backend)
        return CombinedFilter(list(self._remaining), failed, unres, items=self.remaining_items,
                              names_backend_objects=self._names_backend_objects)


def parallel_filter(
    input_names: list[str],
    results: Sequence[tuple[BackendConfig, Verdict | None, str]],
    items: list[bytes] | None = None,
    not_called: Collection[str] = (),
) -> CombinedFilter:
    """The ``parallelFilter: true`` option: every backend was sent the full input at once.

    ``results`` are (backend, verdict judged against the full input, transport error), in
    scheduler order (``interested(...)``). The answer replays the chain over them, walking in
    scheduler order with the list the chain would have had:

    * a backend's passed list is restricted to that list (names it passed that an earlier
      backend removed are dropped); names outside the original input (mode false) are kept,
      and so are such names it never saw;
    * its failure entries for input nodes an earlier backend removed are dropped: the chain
      would never have asked it about them; entries for names outside the original input are
      applied;
    * once the list is empty the later backends are unneeded: their reasons and errors are
      ignored, since the chain would not have called them; errors before that follow the chain's
      rules (ignorable skipped, non-ignorable fails the attempt).

    Where this still differs from the chain: a backend's answer may depend on the list it is
    sent (it saw nodes here that the chain would have withheld, and a mode-false backend after
    one that added a name never saw that name); errors are those of a call with the full list;
    and every backend was called, so each one's latency and side effects happened. When
    backends are deterministic and decide each node independently of the rest of the list, the
    passed list, the failure maps and the error are those of the chain.

    Node objects (``items``, for ``input_names``): a backend's returned objects replace those
    held for the names it kept, in scheduler order; every backend was sent the original ones.
    ``not_called``: the names of the backends the proxy did not call (their transport error says
    why), as ``FilterChain.apply``'s ``called``.
    """
    input_set = set(input_names)
    remaining = list(input_names)
    held = dict(zip(input_names, items)) if items is not None else None
    statuses = _Statuses()
    error = reply = error_backend = ""
    names_backend_objects = False
    for backend, verdict, transport_error in results:
        if error or not remaining:
            break  # the chain would not have called the rest
        full = _reading(verdict, transport_error)
        if full.error:
            if not backend.ignorable:
                reply = _reply_error(backend, verdict, transport_error, backend.name not in not_called)
                error, error_backend = full.error, backend.name
            continue
        now = set(remaining)

        def asked(name: str) -> bool:
            return name in now or name not in input_set

        passed = [n for n in full.passed if asked(n)]
        passed += [n for n in remaining if n not in input_set and n not in set(passed)]  # added, never seen
        statuses.write(
            {n: r for n, r in full.failed.items() if asked(n)},
            {n: r for n, r in full.unresolvable.items() if asked(n)},
        )
        if full.items is not None:
            returned = {n: item for n, item in zip(full.passed, full.items) if asked(n)}
            held = {**(held or {}), **returned}
            names_backend_objects = backend.node_cache_capable
        remaining = passed
    failed_map, unres_map = statuses.maps()
    if error:
        return CombinedFilter([], failed_map, unres_map, error, reply, error_backend)
    known = held is not None and all(n in held for n in remaining)
    final = [held[n] for n in remaining] if held is not None and known else None
    return CombinedFilter(remaining, failed_map, unres_map, items=final, names_backend_objects=names_backend_objects)
