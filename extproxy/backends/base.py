"""The backend contract: one async exchange of bytes per call, which never raises.

A backend is an HTTP extender or the built-in policy. The engine only sees `exchange`: it
returns what the backend answered (status and bytes) or why it gave no answer (a transport
error, a timeout). Whether the answer is acceptable is the scheduler's reading, done by
`semantics`, not here.
"""
from __future__ import annotations

import abc
import time
from dataclasses import dataclass

from ..config import BackendConfig


@dataclass(slots=True)
class Exchange:
    started_at: float
    finished_at: float
    status: int | None  # None: no HTTP answer (see error / timed_out)
    body: bytes = b""
    content_type: str = "application/json"
    error: str = ""
    timed_out: bool = False
    # permanent: retrying the same request cannot help (refused by the backend's rules, bad
    # input); transient: the backend may answer next time (timeout, connection reset).
    permanent: bool = False


class Backend(abc.ABC):
    def __init__(self, config: BackendConfig) -> None:
        self.config = config

    @property
    def name(self) -> str:
        return self.config.name

    def supports(self, verb: str) -> bool:
        return bool(getattr(self.config, f"{verb}_verb", ""))

    def url_for(self, verb_string: str) -> str:
        return self.config.url_for(verb_string) if self.config.url_prefix else f"policy:{self.config.policy}/{verb_string}"

    @abc.abstractmethod
    async def exchange(self, verb: str, verb_string: str, body: bytes) -> Exchange:
        """Send one call; always return, never raise."""

    async def close(self) -> None:
        return None


def now() -> float:
    return time.time()
