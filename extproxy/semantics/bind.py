"""The binder: which backend binds, and what happens when it fails (§4.5, extendersBinding).

May import: the standard library and the other ``semantics`` modules. No Django, no I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from .interest import interested
from extproxy.protocol import Verb

from .decision import Outcome
from .judge import Verdict

if TYPE_CHECKING:  # annotations only: semantics needs no config loading at run time
    from extproxy.config import BackendConfig


def choose_binder(backends: Sequence[BackendConfig], pod: dict) -> BackendConfig | None:
    """The first backend (scheduler order) with bindVerb that is interested; None: Bind plugins."""
    found = interested(backends, pod, Verb.BIND)
    return found[0] if found else None


def bind_fallthrough(binder: BackendConfig, verdict_or_error: Verdict | str | None) -> str:
    """What the scheduler does after the binder answered (§4.5, extendersBinding).

    ``verdict_or_error``: the judged reply, or the transport error text / None (no answer).
    "bound": 200 with an empty Error. "error": binding fails, the pod is requeued.
    "default-binder": an ignorable binder failed; the scheduler runs its Bind plugins (1.30+).
    """
    if isinstance(verdict_or_error, Verdict) and verdict_or_error.outcome == Outcome.OK:
        return "bound"
    return "default-binder" if binder.ignorable else "error"

