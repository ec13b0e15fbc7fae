"""Which backends the scheduler calls, and in which order (reference §3.3, §4.1).

May import: the standard library and ``extproxy.protocol``. No Django, no I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from extproxy.protocol import Verb

if TYPE_CHECKING:  # annotations only: semantics needs no config loading at run time
    from extproxy.config import BackendConfig


def scheduler_order(backends: Sequence[BackendConfig]) -> list[BackendConfig]:
    """The order of every phase: non-ignorable in config order, then ignorable (§3.3)."""
    return [b for b in backends if not b.ignorable] + [b for b in backends if b.ignorable]


def interested(backends: Sequence[BackendConfig], pod: dict, verb: Verb) -> list[BackendConfig]:
    """Backends the scheduler would call for ``verb``, in scheduler order (§4.1)."""
    return [b for b in scheduler_order(backends) if b.verb_string(verb) and b.interested_in(pod)]

