"""What the sequential chains (filter, preempt) share: the backends left to call, the fatal error.

May import: the standard library. No Django, no I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # annotations only: semantics needs no config loading at run time
    from extproxy.config import BackendConfig


class Chain:
    """Backends called one after another until one fails for good or nothing is left to decide."""

    def __init__(self, backends: Sequence[BackendConfig]) -> None:
        self._queue = list(backends)
        self.error = ""
        self.error_backend = ""

    def _exhausted(self) -> bool:
        """Nothing left to send (the chain stops without calling the rest)."""
        raise NotImplementedError

    @property
    def done(self) -> bool:
        return bool(self.error) or self._exhausted()

    def next_backend(self) -> BackendConfig | None:
        if self.done or not self._queue:
            return None
        return self._queue[0]

    def _take(self, backend: BackendConfig) -> None:
        """Called before applying ``backend``'s answer: refuse a call the chain would not make."""
        if self.done:
            raise ValueError(f"the chain is done; {backend.name} must not be called")
        if self._queue and self._queue[0].name == backend.name:
            self._queue.pop(0)

    def _fail(self, backend: BackendConfig, error: str) -> None:
        """A failed call: an ignorable backend is skipped; any other ends the chain in error."""
        if not backend.ignorable:
            self.error, self.error_backend = error, backend.name
