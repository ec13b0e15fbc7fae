"""The backend contract: one async exchange of bytes per call, which never raises.

A backend is an HTTP extender or the built-in policy. The engine only sees `exchange`: it
returns what the backend answered (status and bytes) or why it gave no answer (a transport
error, a timeout). Whether the answer is acceptable is the scheduler's reading, done by
`semantics`, not here. `trace_of` turns one exchange into the Trace the recorder stores.

May import: config, protocol and the recorder's Trace; never the engine, never Django.
"""
from __future__ import annotations

import abc
import time
from dataclasses import dataclass, field
from typing import Any, AsyncGenerator

from ..config import BackendConfig
from ..protocol import Verb
from ..recording.trace import Trace
from .feed import BodyFeed


@dataclass(slots=True)
class Exchange:
    started_at: float
    finished_at: float
    status: int | None  # None: no HTTP answer (see error / timed_out)
    body: bytes = b""
    content_type: str = "application/json"
    error: str = ""
    timed_out: bool = False
    # False: the proxy never called the backend (the combined form could not build its request;
    # `error` says why). A call that was made and failed (refused, reset, no answer) is True:
    # the scheduler's own client would have had that exchange, and names it by the backend's URL.
    called: bool = True
    # Facts the hot path already knows about the call ({"kind", "detail"}), e.g. reply-truncated.
    findings: list[dict[str, Any]] = field(default_factory=list)
    # A reply larger than the reply bound, when the caller asked for streaming: `body` is its
    # first part and `rest` yields the remainder; `length` is the reply's Content-Length when
    # known. Reading `rest` to its end (or closing it) fills in finished_at, error, findings.
    rest: AsyncGenerator[bytes, None] | None = None
    length: int | None = None
    # A streamed reply's parts kept for the record, once `rest` has ended: joined only when the
    # record is built (`recorded_body`), not between the answer's last byte and the scheduler
    # reading it, on the core they may share.
    kept: list[bytes] | None = None

    def recorded_body(self) -> bytes:
        """The body as recorded: `body`, or a streamed reply's kept parts (joined once)."""
        if self.kept is not None:
            kept, self.kept = self.kept, None
            self.body = kept[0] if len(kept) == 1 else b"".join(kept)
        return self.body


class Backend(abc.ABC):
    def __init__(self, config: BackendConfig) -> None:
        self.config = config
        # Whether its calls count in /metrics: a replay's engine (Engine(observes_backends=False))
        # calls a developer's build under the replaced backend's name, not production traffic.
        self.observed = True

    @property
    def name(self) -> str:
        return self.config.name

    def url_for(self, verb_string: str) -> str:
        return self.config.url_for(verb_string)

    @abc.abstractmethod
    async def exchange(self, verb: Verb, verb_string: str, body: bytes, *, stream: bool = False,
                       timeout: float | None = None) -> Exchange:
        """Send one call; always return, never raise.

        stream: the caller can pass a reply larger than the reply bound on as a stream
        (the per-backend form); otherwise such a reply is a failed call.
        timeout: the call's whole budget in seconds; None: the backend's own (for HTTP, its
        httpTimeout less the margin the per-backend form needs to answer in time).
        """

    async def exchange_feed(self, verb: Verb, verb_string: str, feed: BodyFeed, *, stream: bool = False) -> Exchange:
        """`exchange` of a body still arriving (feed.py). This one waits for the whole body;
        a backend that can pass it on as it arrives (HTTP) overrides it. Raises FeedBroken when
        the body never arrives whole: there is then no call to answer."""
        return await self.exchange(verb, verb_string, await feed.whole(), stream=stream)

    async def close(self) -> None:
        return None


def now() -> float:
    return time.time()


class StreamBroken(ConnectionError):
    """The backend failed while the rest of a streamed reply was passed on (the head was sent)."""


def truncated_finding(length: int, kept: int, incomplete: str = "") -> dict[str, Any]:
    """The reply-truncated finding; `incomplete` says why the full length is unknown."""
    size = f"{length} bytes" if not incomplete else f"at least {length} bytes ({incomplete})"
    return {
        "kind": "reply-truncated",
        "detail": f"reply of {size}; the first {kept} bytes are kept (EXTPROXY_MAX_REPLY_BYTES)",
    }


def incomplete_finding(passed: int, length: int | None, why: str) -> dict[str, Any]:
    """The reply-incomplete finding: a streamed reply whose head the scheduler got, not its end."""
    of = f" of {length}" if length is not None else ""
    return {
        "kind": "reply-incomplete",
        "detail": f"the scheduler got the head and {passed}{of} body bytes, then its connection was closed: {why}",
    }


def trace_of(
    config: BackendConfig,
    verb: Verb,
    request: bytes,
    exchange: Exchange,
    answered_status: int,
    answered_body: bytes | None = None,
    verdict: Any = None,
) -> Trace:
    """The record of one call to one backend (per-backend form, or a combined call's child)."""
    return Trace(
        verb=verb,
        backend=config.name,
        url=config.target,
        verb_string=config.verb_string(verb),
        started_at=exchange.started_at,
        finished_at=exchange.finished_at,
        request_body=request,
        status=exchange.status,
        response_body=exchange.recorded_body(),
        answered_status=answered_status,
        answered_body=answered_body,
        transport_error=exchange.error,
        timed_out=exchange.timed_out,
        node_cache_capable=config.node_cache_capable,
        weight=config.weight,
        verdict=verdict,
        findings=exchange.findings,
    )
