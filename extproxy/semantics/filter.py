"""The filter chain: findNodesThatPassExtenders, sequential or with ``parallelFilter`` (§4.2-4.3).

May import: the standard library and the other ``semantics`` modules. No Django, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from .errors import _failure, reply_error_text
from .judge import Verdict, judge_filter

if TYPE_CHECKING:  # annotations only: semantics needs no config loading at run time
    from extproxy.config import BackendConfig

FILTER_OUTCOMES = ("ok", "skipped", "error", "unneeded")


@dataclass
class FilterStep:
    """What one backend did to the chain."""

    backend: str
    outcome: str  # "ok" | "skipped" (ignorable error) | "error" (ends the chain) | "unneeded"
    input: list[str]
    error: str = ""
    passed: list[str] | None = None  # ok: this backend's passed list (the new feasible list)
    removed: list[str] | None = None  # ok: input names it did not pass
    added: list[str] | None = None  # ok, mode false: passed names not in its input (kept)
    failed: dict[str, str] | None = None  # ok: Unschedulable entries it wrote
    unresolvable: dict[str, str] | None = None  # ok: UnschedulableAndUnresolvable entries
    unasked: list[str] | None = None  # parallel: judged names the chain would not have sent it


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
    added: list[str] = field(default_factory=list)  # final names not in the original input
    status_by: dict[str, str] = field(default_factory=dict)  # node -> backend whose entry stands
    steps: list[FilterStep] = field(default_factory=list)


class _Statuses:
    """The scheduler's NodeToStatus as extenders write it: Set, last writer wins."""

    def __init__(self) -> None:
        self.code: dict[str, tuple[str, str, str]] = {}  # node -> (code, message, backend)

    def write(self, backend: str, failed: dict[str, str], unresolvable: dict[str, str]) -> None:
        for name, msg in unresolvable.items():
            self.code[name] = ("unresolvable", msg, backend)
        for name, msg in failed.items():
            if name not in unresolvable:  # precedence inside one reply only
                self.code[name] = ("failed", msg, backend)

    def maps(self) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
        failed = {n: m for n, (c, m, _) in self.code.items() if c == "failed"}
        unres = {n: m for n, (c, m, _) in self.code.items() if c == "unresolvable"}
        return failed, unres, {n: b for n, (_, _, b) in self.code.items()}


class FilterChain:
    """Sequential filter over backends, as findNodesThatPassExtenders does (§4.2 step 4, §4.3).

    Feed it the backends from ``interested(backends, pod, "filter")`` in that order (or build
    it with them and use ``next_backend``). Each backend is sent exactly ``remaining``; its
    passed list IS the new feasible list (order and duplicates as returned; in mode false
    names outside its input are kept and marked). The chain is ``done`` once nothing is left
    (no further calls) or a non-ignorable backend failed (the attempt fails with that error).
    An ignorable backend's failure is skipped with the list unchanged.
    """

    def __init__(self, input_names: list[str], backends: Sequence[BackendConfig] = ()) -> None:
        self.input_names = list(input_names)
        self._input_set = set(input_names)
        self._remaining = list(input_names)
        self._queue = list(backends)
        self._statuses = _Statuses()
        self.steps: list[FilterStep] = []
        self.error = ""
        self.reply_error = ""
        self.error_backend = ""

    @property
    def remaining(self) -> list[str]:
        return list(self._remaining)

    @property
    def done(self) -> bool:
        return bool(self.error) or not self._remaining

    def next_backend(self) -> BackendConfig | None:
        if self.done or not self._queue:
            return None
        return self._queue[0]

    def judge(self, backend: BackendConfig, status: int, body: bytes) -> Verdict:
        """The chain's reading of a reply (no per-node decisions: the recorder makes those)."""
        return judge_filter(
            backend.name, backend.node_cache_capable, self._remaining, status, body,
            backend.url_prefix, verb=backend.filter_verb or "filter", with_decisions=False,
        )

    def apply(
        self, backend: BackendConfig, verdict: Verdict | None, timed_out_or_transport_error: str = ""
    ) -> None:
        if self.done:
            raise ValueError(f"filter chain is done; {backend.name} must not be called")
        if self._queue and self._queue[0].name == backend.name:
            self._queue.pop(0)
        step = _filter_step(backend, self._remaining, verdict, timed_out_or_transport_error)
        self.steps.append(step)
        if step.outcome == "error":
            self.error = step.error
            self.reply_error = reply_error_text(verdict, timed_out_or_transport_error)
            self.error_backend = backend.name
        elif step.outcome == "ok":
            self._statuses.write(backend.name, step.failed or {}, step.unresolvable or {})
            self._remaining = list(step.passed or [])

    def result(self) -> CombinedFilter:
        failed, unres, by = self._statuses.maps()
        passed = [] if self.error else list(self._remaining)
        return CombinedFilter(
            passed=passed,
            failed=failed,
            unresolvable=unres,
            error=self.error,
            reply_error=self.reply_error,
            error_backend=self.error_backend,
            added=[n for n in passed if n not in self._input_set],
            status_by=by,
            steps=list(self.steps),
        )


def _filter_step(
    backend: BackendConfig, sent: list[str], verdict: Verdict | None, transport_error: str
) -> FilterStep:
    problem = _failure(verdict, transport_error)
    if verdict is None or verdict.outcome != "ok":
        outcome = "skipped" if backend.ignorable else "error"
        return FilterStep(backend.name, outcome, list(sent), error=problem)
    passed = list(verdict.passed or [])
    sent_set, passed_set = set(sent), set(passed)
    return FilterStep(
        backend.name,
        "ok",
        list(sent),
        passed=passed,
        removed=[n for n in sent if n not in passed_set],
        added=[n for n in passed if n not in sent_set],
        failed=dict(verdict.failed or {}),
        unresolvable=dict(verdict.unresolvable or {}),
    )


def parallel_filter(
    input_names: list[str], results: Sequence[tuple[BackendConfig, Verdict | None, str]]
) -> CombinedFilter:
    """The ``parallelFilter: true`` option: every backend was sent the full input at once.

    ``results`` are (backend, verdict judged against the full input, transport error), in
    scheduler order (``interested(...)``). The answer replays the chain over them, walking in
    scheduler order with the list the chain would have had:

    * a backend's passed list is restricted to that list (names it passed that an earlier
      backend removed are dropped); names outside the original input (mode false) are kept,
      and so are such names it never saw;
    * its failure entries for input nodes an earlier backend removed are dropped (listed in
      ``FilterStep.unasked``): the chain would never have asked it about them; entries for
      names outside the original input are applied;
    * once the list is empty the later backends are ``unneeded``: their reasons and errors are
      ignored, since the chain would not have called them; errors before that follow the chain's
      rules (ignorable skipped, non-ignorable fails the attempt).

    Where this still differs from the chain: a backend's answer may depend on the list it is
    sent (it saw nodes here that the chain would have withheld, and a mode-false backend after
    one that added a name never saw that name); errors are those of a call with the full list;
    and every backend was called, so each one's latency and side effects happened. When
    backends are deterministic and decide each node independently of the rest of the list, the
    passed list, the failure maps and the error are those of the chain.
    """
    input_set = set(input_names)
    remaining = list(input_names)
    statuses = _Statuses()
    steps: list[FilterStep] = []
    error = reply = error_backend = ""
    for backend, verdict, transport_error in results:
        if error or not remaining:
            steps.append(FilterStep(backend.name, "unneeded", list(remaining)))
            continue
        full = _filter_step(backend, input_names, verdict, transport_error)
        if full.outcome != "ok":
            full.input = list(remaining)
            steps.append(full)
            if full.outcome == "error":
                error, reply = full.error, reply_error_text(verdict, transport_error)
                error_backend = backend.name
            continue
        now = set(remaining)
        keep = lambda m: {n: r for n, r in m.items() if n in now or n not in input_set}  # noqa: E731
        failed, unres = keep(full.failed or {}), keep(full.unresolvable or {})
        passed = [n for n in full.passed or [] if n in now or n not in input_set]
        unseen = [n for n in remaining if n not in input_set and n not in set(passed)]
        passed += unseen
        judged = set(full.passed or []) | set(full.failed or {}) | set(full.unresolvable or {})
        steps.append(
            FilterStep(
                backend.name, "ok", list(remaining), passed=passed,
                removed=[n for n in remaining if n not in set(passed)],
                added=[n for n in passed if n not in now],
                failed=failed, unresolvable=unres,
                unasked=sorted(n for n in judged if n in input_set and n not in now),
            )
        )
        statuses.write(backend.name, failed, unres)
        remaining = passed
    failed_map, unres_map, by = statuses.maps()
    passed_final = [] if error else remaining
    return CombinedFilter(
        passed=passed_final, failed=failed_map, unresolvable=unres_map, error=error,
        reply_error=reply, error_backend=error_backend,
        added=[n for n in passed_final if n not in input_set], status_by=by, steps=steps,
    )

